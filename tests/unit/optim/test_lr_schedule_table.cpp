// LRScheduler against a table of values of Megatron-core's OptimizerParamScheduler
// (megatron/core/optimizer_param_scheduler.py) as Twinkle configures it: max_lr 1e-4, min_lr 0,
// init_lr 0, cosine, value by value, and the step-to-lr convention (optimizer step k runs
// at lr(n = k-1), so the first step runs at lr 0 when there is a warm-up).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/optim/lr_scheduler.h"

using namespace twinkle;

namespace {

LRScheduler cosine(int64_t warmup, int64_t decay) {
  LRSchedulerConfig c;
  c.lr_warmup_steps = warmup;
  c.lr_decay_steps = decay;
  c.max_lr = 1e-4;
  c.min_lr = 0.0;
  c.lr_decay_style = "cosine";
  return LRScheduler(c);
}

struct Row {
  int64_t n;
  double lr;  // as tabulated (5 significant digits)
};

void expect_table(const LRScheduler& s, const std::vector<Row>& rows) {
  for (const auto& r : rows) {
    // The table has 5 significant digits: half a unit of the last digit.
    const double tol = r.lr == 0 ? 0.0 : 0.5 * std::pow(10.0, std::floor(std::log10(r.lr)) - 4);
    EXPECT_NEAR(s.lr_at(r.n), r.lr, tol) << "n = " << r.n;
  }
}

}  // namespace

TEST(LRScheduleTable, TpNpuRecipe) {  // W = 2, D = 32
  expect_table(cosine(2, 32), {{0, 0.0}, {1, 5.0e-5}, {2, 1.0e-4}, {3, 9.9726e-5}, {5, 9.7553e-5}, {10, 8.3457e-5}});
}

TEST(LRScheduleTable, MoeRecipe) {  // W = 2, D = 64
  expect_table(cosine(2, 64), {{0, 0.0}, {1, 5.0e-5}, {2, 1.0e-4}, {3, 9.9936e-5}, {5, 9.9423e-5}, {10, 9.5948e-5}});
}

TEST(LRScheduleTable, AfterDecayStepsTheLrIsMinLr) {
  LRScheduler s = cosine(2, 32);
  EXPECT_NEAR(s.lr_at(32), 0.0, 1e-20);  // cosine reaches min at n = D
  EXPECT_EQ(s.lr_at(33), 0.0);  // n > D: min_lr
  EXPECT_EQ(s.lr_at(1000), 0.0);
}

TEST(LRScheduleTable, OptimizerStepKRunsAtLrOfKMinusOne) {
  LRScheduler s = cosine(2, 32);
  std::vector<double> applied;
  for (int k = 1; k <= 4; ++k) {
    applied.push_back(s.current());  // what clip_grad_and_step uses for step k
    s.step();
  }
  EXPECT_EQ(applied[0], 0.0);  // the first optimizer step runs at lr 0 under warm-up
  EXPECT_NEAR(applied[1], 5.0e-5, 5e-10);
  EXPECT_NEAR(applied[2], 1.0e-4, 5e-10);
  EXPECT_NEAR(applied[3], 9.9726e-5, 5e-10);
  EXPECT_NEAR(s.current(), 9.8907e-5, 5e-10);  // logged after step 4 = lr(n = 4) = 1e-4 * (1 + cos(pi/15)) / 2
}

TEST(LRScheduleTable, BadConfigsThrow) {
  EXPECT_THROW(cosine(32, 32), Error);  // warm-up must be shorter than the decay
  LRSchedulerConfig c;
  c.lr_decay_steps = 10;
  c.lr_decay_style = "exponential";
  EXPECT_THROW(LRScheduler{c}, Error);
}
