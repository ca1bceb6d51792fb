// The optimizer and scheduler option sets are validated in one place each
// (validate() in distributed_optimizer.h / lr_scheduler.h), with PyTorch AdamW's and Megatron's
// OptimizerParamScheduler's rules, and every out-of-range bound is an error naming the field
// and its flag. The constructors (DistributedOptimizer, LRScheduler) go through the same check.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "twinkle/core/error.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/optim/lr_scheduler.h"

using namespace twinkle;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

template <class C>
std::string error_of(const C& cfg) {
  try {
    validate(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_bad(const OptimizerConfig& c, const std::string& field, const std::string& flag) {
  const std::string e = error_of(c);
  EXPECT_NE(e.find("'" + field + "'"), std::string::npos) << field << ": " << e;
  EXPECT_NE(e.find(flag), std::string::npos) << e;
  EXPECT_NE(e.find("must be"), std::string::npos) << e;
}

}  // namespace

TEST(OptimizerOptions, DefaultsAndEdgesAreValid) {
  EXPECT_EQ(error_of(OptimizerConfig{}), "");
  EXPECT_EQ(error_of(OptimizerConfig{.lr = 0, .weight_decay = 0, .adam_beta1 = 0, .adam_beta2 = 0}), "");
  EXPECT_EQ(error_of(OptimizerConfig{.adam_beta1 = 0.999999, .adam_beta2 = 0.999999}), "");
  EXPECT_EQ(error_of(OptimizerConfig{.clip_grad = 0}), "");   // 0 disables clipping
  EXPECT_EQ(error_of(OptimizerConfig{.clip_grad = -1}), "");  // so does a negative value
}

TEST(OptimizerOptions, EveryBound) {
  // lr: PyTorch AdamW raises for lr < 0; nan / inf are refused too
  for (double v : {-1.0, -1e-12, kNaN, kInf, -kInf}) expect_bad(OptimizerConfig{.lr = v}, "lr", "--lr");
  EXPECT_NE(error_of(OptimizerConfig{.lr = -1}).find("got -1"), std::string::npos);
  EXPECT_NE(error_of(OptimizerConfig{.lr = kNaN}).find("got nan"), std::string::npos);
  // betas in [0, 1)
  for (double v : {1.5, 1.0, -0.1, kNaN}) {
    expect_bad(OptimizerConfig{.adam_beta1 = v}, "adam_beta1", "--adam-beta1");
    expect_bad(OptimizerConfig{.adam_beta2 = v}, "adam_beta2", "--adam-beta2");
  }
  EXPECT_NE(error_of(OptimizerConfig{.adam_beta1 = 1.5}).find("[0, 1)"), std::string::npos);
  // eps finite and > 0
  for (double v : {0.0, -1e-8, kNaN, kInf}) expect_bad(OptimizerConfig{.adam_eps = v}, "adam_eps", "--adam-eps");
  // weight decay finite and >= 0
  for (double v : {-0.01, kNaN, kInf}) expect_bad(OptimizerConfig{.weight_decay = v}, "weight_decay", "--weight-decay");
  // clip_grad finite
  for (double v : {kNaN, kInf, -kInf}) expect_bad(OptimizerConfig{.clip_grad = v}, "clip_grad", "--clip-grad");
  expect_bad(OptimizerConfig{.bucket_bytes = 0}, "bucket_bytes", "--bucket-bytes");
}

TEST(SchedulerOptions, EveryBound) {
  EXPECT_EQ(error_of(LRSchedulerConfig{}), "");
  EXPECT_EQ(error_of(LRSchedulerConfig{.lr_warmup_steps = 2, .lr_decay_steps = 3}), "");
  EXPECT_EQ(error_of(LRSchedulerConfig{.lr_warmup_steps = 5, .lr_decay_steps = 0}), "");  // constant after warm-up
  auto has = [](const LRSchedulerConfig& c, std::initializer_list<const char*> parts) {
    const std::string e = error_of(c);
    EXPECT_FALSE(e.empty());
    for (const char* p : parts) EXPECT_NE(e.find(p), std::string::npos) << e;
  };
  has({.lr_warmup_steps = -1}, {"'lr_warmup_steps' (--lr-warmup-steps)", ">= 0", "got -1"});
  has({.lr_decay_steps = -2}, {"'lr_decay_steps' (--lr-decay-steps)", "got -2"});
  // warm-up >= decay steps
  has({.lr_warmup_steps = 5, .lr_decay_steps = 5}, {"'lr_warmup_steps'", "smaller than lr_decay_steps (5)", "got 5"});
  has({.lr_warmup_steps = 9, .lr_decay_steps = 4}, {"'lr_warmup_steps'", "got 9"});
  // min_lr > lr
  has({.max_lr = 1e-4, .min_lr = 2e-4}, {"'min_lr' (--min-lr)", "<= lr (0.0001"});
  has({.min_lr = -1e-5}, {"'min_lr'", ">= 0"});
  has({.min_lr = kNaN}, {"'min_lr'"});
  has({.max_lr = -1}, {"'lr' (--lr)"});
  has({.max_lr = kInf}, {"'lr' (--lr)"});
  has({.init_lr = 1.0}, {"'init_lr'"});
  has({.lr_decay_style = "exponential"}, {"'lr_decay_style' (--lr-decay-style)", "cosine, linear, constant",
                                          "\"exponential\""});
  // the scheduler itself goes through the same check
  EXPECT_THROW(LRScheduler(LRSchedulerConfig{.lr_warmup_steps = 3, .lr_decay_steps = 2}), Error);
}
