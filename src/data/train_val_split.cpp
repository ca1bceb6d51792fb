// ms-swift's train/validation split (twinkle/data/train_val_split.h).
#include "twinkle/data/train_val_split.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "numpy_random.h"
#include "twinkle/core/error.h"

namespace twinkle {

int64_t split_val_count(int64_t n, std::optional<int64_t> dataset_sample, double ratio, const std::string& what) {
  check(ratio > 0 && ratio < 1, "--split-dataset-ratio must be in (0, 1) (the share of each --dataset held out for "
                                "validation), got " + std::to_string(ratio));
  check(n >= 1, "--split-dataset-ratio: dataset '" + what + "' has no rows");
  const int64_t sample = dataset_sample ? *dataset_sample : n;
  const int64_t train_len = std::min(n, sample);
  // Python's int(float): truncation toward zero of the double product
  const int64_t val = std::max<int64_t>(static_cast<int64_t>(std::trunc(static_cast<double>(train_len) * ratio)), 1);
  check(sample - val >= 1, "--split-dataset-ratio " + std::to_string(ratio) + ": dataset '" + what + "' (" +
                               std::to_string(sample) + " rows) would keep no training row after holding out " +
                               std::to_string(val) + " for validation");
  return val;
}

SwiftSeedStream::SwiftSeedStream(uint64_t data_seed) {
  check(data_seed <= 0xffffffffull, "--split-dataset-ratio draws its seeds as ms-swift does, from "
                                    "np.random.RandomState(--seed), which needs a seed <= 4294967295; got " +
                                        std::to_string(data_seed));
  mt_.seed(static_cast<std::mt19937::result_type>(data_seed));
}

int64_t SwiftSeedStream::next() { return detail::numpy_randint_int32_max(mt_); }

std::vector<int64_t> numpy_default_rng_permutation(int64_t n, uint64_t seed) {
  check(n >= 0, "numpy_default_rng_permutation: n < 0");
  return detail::numpy_permutation(n, seed);
}

TrainValIndices train_test_split_indices(int64_t n, int64_t n_test, uint64_t seed) {
  check(n_test >= 1 && n_test <= n - 1, "train_test_split: test size " + std::to_string(n_test) +
                                            " is not in [1, " + std::to_string(n - 1) + "] for " + std::to_string(n) +
                                            " rows");
  const std::vector<int64_t> p = detail::numpy_permutation(n, seed);
  TrainValIndices out;
  out.val.assign(p.begin(), p.begin() + n_test);
  out.train.assign(p.begin() + n_test, p.end());
  return out;
}

}  // namespace twinkle
