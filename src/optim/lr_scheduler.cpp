#include "twinkle/optim/lr_scheduler.h"

#include <cmath>

#include "twinkle/core/error.h"

namespace twinkle {

LRScheduler::LRScheduler(const LRSchedulerConfig& cfg) : cfg_(cfg) { validate(cfg_); }

double LRScheduler::lr_at(int64_t n) const {
  const auto W = cfg_.lr_warmup_steps, D = cfg_.lr_decay_steps;
  if (W > 0 && n <= W) return cfg_.init_lr + (cfg_.max_lr - cfg_.init_lr) * static_cast<double>(n) / static_cast<double>(W);
  if (cfg_.lr_decay_style == "constant" || D == 0) return cfg_.max_lr;
  if (n > D) return cfg_.min_lr;
  const double ratio = static_cast<double>(n - W) / static_cast<double>(D - W);
  double coeff;
  if (cfg_.lr_decay_style == "linear") coeff = 1.0 - ratio;
  else coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return cfg_.min_lr + coeff * (cfg_.max_lr - cfg_.min_lr);
}

}  // namespace twinkle
