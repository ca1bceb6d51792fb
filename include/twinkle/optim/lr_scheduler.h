// twinkle/optim/lr_scheduler.h — Megatron-core OptimizerParamScheduler's learning-rate shape.
//
// megatron/core/optimizer_param_scheduler.py, get_lr(): with n scheduler steps taken,
//   n <= W (warm-up)      lr = init_lr + (max_lr - init_lr) * n / W   (init_lr = 0)
//   n >  D (decay steps)  lr = min_lr
//   otherwise             cosine: min + (max - min) * 0.5 * (1 + cos(pi * (n - W) / (D - W)))
//                         linear: min + (max - min) * (1 - (n - W) / (D - W))
//                         constant: max
// The optimizer step k (1-based) runs at lr(k - 1) (so the first step runs at lr 0 when W > 0).
#pragma once
#include <cstdint>
#include <string>

namespace twinkle {

struct LRSchedulerConfig {
  int64_t lr_warmup_steps = 0;
  int64_t lr_decay_steps = 0;       ///< 0 = constant after warm-up
  double max_lr = 1e-4;
  double min_lr = 0.0;
  double init_lr = 0.0;
  std::string lr_decay_style = "cosine";  ///< "cosine", "linear", "constant"
};

/// The one place the scheduler options are checked (LRScheduler, MegatronModel::
/// set_lr_scheduler, `twinkle train` and the recipes). Throws twinkle::Error naming the field
/// (and its flag) and the allowed range, with Megatron's OptimizerParamScheduler asserts:
/// lr_decay_style one of cosine / linear / constant; lr_warmup_steps, lr_decay_steps >= 0;
/// lr_warmup_steps < lr_decay_steps when lr_decay_steps > 0; max_lr, min_lr, init_lr finite
/// and >= 0; min_lr <= max_lr (max_lr is the optimizer's lr); init_lr <= max_lr.
void validate(const LRSchedulerConfig& cfg);

class LRScheduler {
 public:
  LRScheduler() = default;
  /// Throws what validate(cfg) throws.
  explicit LRScheduler(const LRSchedulerConfig& cfg);
  /// Learning rate after `n` scheduler steps.
  double lr_at(int64_t n) const;
  /// Learning rate for the next optimizer step.
  double current() const { return lr_at(steps_); }
  void step() { ++steps_; }
  int64_t steps() const { return steps_; }
  void set_steps(int64_t n) { steps_ = n; }
  const LRSchedulerConfig& config() const { return cfg_; }

 private:
  LRSchedulerConfig cfg_;
  int64_t steps_ = 0;
};

}  // namespace twinkle
