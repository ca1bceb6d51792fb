// ms-swift's train/validation split (twinkle/data/train_val_split.h) against values computed outside
// twinkle: the val_sample rule by hand from ms-swift's post_process (swift/dataset/dataset_meta.py), and
// the NumPy streams as NumPy 2.4 printed them:
//   [int(np.random.RandomState(42).randint(0, np.iinfo(np.int32).max)) for 3 draws]
//       = [1608637542, 1273642419, 1935803228]; RandomState(0): [209652396, 398764591]
//   np.random.default_rng(1608637542).permutation(10) = [8, 0, 3, 5, 6, 7, 2, 9, 1, 4]
//   np.random.default_rng(0).permutation(5) = [2, 4, 3, 0, 1]
//   np.random.default_rng(2**40 + 5).permutation(7) = [1, 2, 5, 6, 0, 4, 3]   (a two-word seed)
//   datasets.Dataset.from_dict({'v': range(10)}).train_test_split(test_size=2, shuffle=True,
//       seed=1608637542): test [8, 0], train [3, 5, 6, 7, 2, 9, 1, 4]
// tests/reference/check_eval.py checks the same against datasets' train_test_split end to end.
#include <gtest/gtest.h>

#include "error_of.h"
#include "twinkle/core/error.h"
#include "twinkle/data/train_val_split.h"

using namespace twinkle;

using twinkle::test_support::error_of;

TEST(SplitValCount, MsSwiftRule) {
  EXPECT_EQ(split_val_count(10, std::nullopt, 0.25, "d"), 2);   // int(2.5)
  EXPECT_EQ(split_val_count(10, std::nullopt, 0.3, "d"), 3);    // 10 * 0.3 == 3.0
  EXPECT_EQ(split_val_count(100, std::nullopt, 0.29, "d"), 28); // 28.999999999999996 truncated
  EXPECT_EQ(split_val_count(3, std::nullopt, 0.1, "d"), 1);     // int(0.3) = 0 -> at least 1
  EXPECT_EQ(split_val_count(10, int64_t{4}, 0.5, "d"), 2);      // ID#4: train_len = min(10, 4)
  EXPECT_EQ(split_val_count(10, int64_t{20}, 0.15, "d"), 1);    // ID#20: train_len = 10, int(1.5)
  EXPECT_EQ(split_val_count(2, std::nullopt, 0.9, "d"), 1);
}

TEST(SplitValCount, Refusals) {
  EXPECT_NE(error_of([] { split_val_count(10, std::nullopt, 0.0, "d"); }).find("--split-dataset-ratio must be in (0, 1)"),
            std::string::npos);
  EXPECT_NE(error_of([] { split_val_count(10, std::nullopt, 1.0, "d"); }).find("(0, 1)"), std::string::npos);
  const std::string e = error_of([] { split_val_count(1, std::nullopt, 0.5, "tiny.jsonl"); });
  EXPECT_NE(e.find("dataset 'tiny.jsonl' (1 rows) would keep no training row"), std::string::npos) << e;
}

TEST(SwiftSeedStream, EqualsNumpyRandomStateRandint) {
  SwiftSeedStream s(42);
  EXPECT_EQ(s.next(), 1608637542);
  EXPECT_EQ(s.next(), 1273642419);
  EXPECT_EQ(s.next(), 1935803228);
  SwiftSeedStream z(0);
  EXPECT_EQ(z.next(), 209652396);
  EXPECT_EQ(z.next(), 398764591);
  EXPECT_NE(error_of([] { SwiftSeedStream big(uint64_t{1} << 32); }).find("seed <= 4294967295"), std::string::npos);
}

TEST(NumpyPermutation, EqualsDefaultRngPermutation) {
  EXPECT_EQ(numpy_default_rng_permutation(10, 1608637542), (std::vector<int64_t>{8, 0, 3, 5, 6, 7, 2, 9, 1, 4}));
  EXPECT_EQ(numpy_default_rng_permutation(5, 0), (std::vector<int64_t>{2, 4, 3, 0, 1}));
  EXPECT_EQ(numpy_default_rng_permutation(7, (uint64_t{1} << 40) + 5), (std::vector<int64_t>{1, 2, 5, 6, 0, 4, 3}));
  EXPECT_EQ(numpy_default_rng_permutation(1, 3), (std::vector<int64_t>{0}));
}

TEST(TrainTestSplit, EqualsDatasetsTrainTestSplit) {
  const TrainValIndices s = train_test_split_indices(10, 2, 1608637542);
  EXPECT_EQ(s.val, (std::vector<int64_t>{8, 0}));
  EXPECT_EQ(s.train, (std::vector<int64_t>{3, 5, 6, 7, 2, 9, 1, 4}));
  EXPECT_NE(error_of([] { train_test_split_indices(3, 3, 1); }).find("test size 3 is not in [1, 2]"), std::string::npos);
}
