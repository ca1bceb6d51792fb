// Validation of the optimizer and learning-rate scheduler option sets (see validate() in
// distributed_optimizer.h and lr_scheduler.h). Rules: torch/optim/adamw.py (the ValueErrors
// of AdamW.__init__) and megatron/core/optimizer_param_scheduler.py (its asserts).
#include <cmath>
#include <cstdio>

#include "twinkle/core/option_check.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/optim/lr_scheduler.h"

namespace twinkle {

void validate(const OptimizerConfig& c) {
  const char* s = "optimizer";
  check_option(std::isfinite(c.lr) && c.lr >= 0, s, "lr", "a finite number >= 0 (PyTorch AdamW)", c.lr);
  check_option(c.adam_beta1 >= 0 && c.adam_beta1 < 1, s, "adam_beta1", "in [0, 1) (PyTorch AdamW)", c.adam_beta1);
  check_option(c.adam_beta2 >= 0 && c.adam_beta2 < 1, s, "adam_beta2", "in [0, 1) (PyTorch AdamW)", c.adam_beta2);
  check_option(std::isfinite(c.adam_eps) && c.adam_eps > 0, s, "adam_eps", "a finite number > 0", c.adam_eps);
  check_option(std::isfinite(c.weight_decay) && c.weight_decay >= 0, s, "weight_decay",
               "a finite number >= 0 (PyTorch AdamW)", c.weight_decay);
  check_option(std::isfinite(c.clip_grad), s, "clip_grad", "a finite number (<= 0 disables clipping)", c.clip_grad);
  check_option(c.bucket_bytes >= 1, s, "bucket_bytes", ">= 1", c.bucket_bytes);
}

void validate(const LRSchedulerConfig& c) {
  const char* s = "lr scheduler";
  check_option(c.lr_decay_style == "cosine" || c.lr_decay_style == "linear" || c.lr_decay_style == "constant", s,
               "lr_decay_style", "one of cosine, linear, constant", c.lr_decay_style);
  check_option(c.lr_warmup_steps >= 0, s, "lr_warmup_steps", ">= 0", c.lr_warmup_steps);
  check_option(c.lr_decay_steps >= 0, s, "lr_decay_steps", ">= 0 (0 = constant after the warm-up)", c.lr_decay_steps);
  check_option(c.lr_decay_steps == 0 || c.lr_warmup_steps < c.lr_decay_steps, s, "lr_warmup_steps",
               "smaller than lr_decay_steps (" + std::to_string(c.lr_decay_steps) + ")", c.lr_warmup_steps);
  check_option(std::isfinite(c.max_lr) && c.max_lr >= 0, s, "lr", "a finite number >= 0", c.max_lr);
  check_option(std::isfinite(c.min_lr) && c.min_lr >= 0, s, "min_lr", "a finite number >= 0", c.min_lr);
  char lr[64];
  std::snprintf(lr, sizeof lr, "%.17g", c.max_lr);
  check_option(c.min_lr <= c.max_lr, s, "min_lr", std::string("<= lr (") + lr + ")", c.min_lr);
  check_option(std::isfinite(c.init_lr) && c.init_lr >= 0 && c.init_lr <= c.max_lr, s, "init_lr",
               std::string("a finite number in [0, lr (") + lr + ")]", c.init_lr);
}

}  // namespace twinkle
