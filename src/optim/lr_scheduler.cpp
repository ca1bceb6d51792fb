#include "twinkle/optim/lr_scheduler.h"

#include <cmath>

#include "twinkle/core/error.h"

namespace twinkle {

LRScheduler::LRScheduler(const LRSchedulerConfig& cfg) : cfg_(cfg) {
  check(cfg.lr_decay_style == "cosine" || cfg.lr_decay_style == "linear" || cfg.lr_decay_style == "constant",
        "lr_decay_style '" + cfg.lr_decay_style + "' is not one of cosine, linear, constant");
  check(cfg.lr_warmup_steps >= 0 && cfg.lr_decay_steps >= 0, "lr_warmup_steps and lr_decay_steps must be >= 0");
  check(cfg.lr_decay_steps == 0 || cfg.lr_warmup_steps < cfg.lr_decay_steps,
        "lr_warmup_steps (" + std::to_string(cfg.lr_warmup_steps) + ") must be smaller than lr_decay_steps (" +
            std::to_string(cfg.lr_decay_steps) + ")");
  check(cfg.max_lr >= 0 && cfg.min_lr >= 0 && cfg.min_lr <= cfg.max_lr, "need 0 <= min_lr <= lr");
}

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
