// The validation row schedule of twinkle/train/evaluate.h against values worked out by hand from Megatron's
// training.py: consumed_valid_samples = (iteration // eval_interval) * eval_iters * eval_global_batch_size
// after a resume (build_train_valid_test_data_loaders), eval_iters * batch rows consumed per evaluation,
// the iterator wrapping at the end of the set (cyclic_iter), each global batch cut into the DataLoader's
// contiguous dp blocks; and Megatron's ppl = exp(min(20, loss)) and its validation line.
// (The loss itself: tests/reference/check_eval.py against transformers.)
#include <gtest/gtest.h>

#include <cmath>

#include "twinkle/core/error.h"
#include "twinkle/train/evaluate.h"

using namespace twinkle;

TEST(ValidationSchedule, FirstRowContinuesAcrossEvaluations) {
  // interval 2, 3 batches of 4 rows: evaluations after steps 2, 4, 6 start at rows 0, 12, 24
  EXPECT_EQ(validation_first_row(2, 2, 3, 4), 0);
  EXPECT_EQ(validation_first_row(4, 2, 3, 4), 12);
  EXPECT_EQ(validation_first_row(6, 2, 3, 4), 24);
  // the final evaluation of a run that ends at step 5: after the evaluations at 2 and 4
  EXPECT_EQ(validation_first_row(5, 2, 3, 4), 24);
  EXPECT_EQ(validation_first_row(1, 2, 3, 4), 0);
  // no interval evaluations: the final one starts at row 0
  EXPECT_EQ(validation_first_row(7, 0, 3, 4), 0);
  EXPECT_THROW(validation_first_row(0, 2, 3, 4), Error);
  EXPECT_THROW(validation_first_row(2, 2, 3, 0), Error);
}

TEST(ValidationSchedule, BatchesWrapAndSplitOverDp) {
  // 10 rows, batch 4 from row 8: rows 8, 9, 0, 1; dp 2 gives {8, 9} and {0, 1}
  EXPECT_EQ(validation_batch_indices(10, 8, 4, 0, 1), (std::vector<int64_t>{8, 9, 0, 1}));
  EXPECT_EQ(validation_batch_indices(10, 8, 4, 0, 2), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(validation_batch_indices(10, 8, 4, 1, 2), (std::vector<int64_t>{0, 1}));
  // a start past the end wraps (row 24 of 10 = row 4), and a set smaller than the batch repeats rows
  EXPECT_EQ(validation_batch_indices(10, 24, 4, 0, 1), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(validation_batch_indices(3, 2, 4, 0, 1), (std::vector<int64_t>{2, 0, 1, 2}));
  EXPECT_THROW(validation_batch_indices(10, 0, 6, 0, 4), Error);  // 6 rows over dp 4
  EXPECT_THROW(validation_batch_indices(0, 0, 4, 0, 1), Error);
}

TEST(ValidationSchedule, MegatronPplAndLine) {
  EXPECT_DOUBLE_EQ(validation_ppl(2.0), std::exp(2.0));
  EXPECT_DOUBLE_EQ(validation_ppl(25.0), std::exp(20.0));  // capped at exp(20)
  EvalResult r;
  r.has_loss = true;
  r.lm_loss = 1.5;
  r.ppl = validation_ppl(1.5);
  EXPECT_EQ(validation_line(r, 10), " validation loss at iteration 10 | lm loss value: 1.500000E+00 | lm loss PPL: "
                                    "4.481689E+00 | ");
  r.has_loss = false;
  EXPECT_EQ(validation_line(r, 3), " validation loss at iteration 3 | lm loss: no labelled tokens | ");
}
