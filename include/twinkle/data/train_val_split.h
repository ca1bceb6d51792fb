// twinkle/data/train_val_split.h — a validation set split off the training data, ms-swift's
// `--split_dataset_ratio R` (`twinkle train --split-dataset-ratio R`).
//
// Source of the semantics: ms-swift's DatasetLoader.post_process (swift/dataset/dataset_meta.py) as
// load_dataset (swift/dataset/loader.py) calls it, once per `--dataset` in order, before the datasets
// are mixed:
//    random_state = np.random.RandomState(data_seed)            (one for all the datasets)
//    train_len   = min(len(ds), dataset_sample)               (dataset_sample: ID#N, else len(ds))
//    val_sample  = max(int(train_len * R), 1)
//    train_sample = dataset_sample - val_sample               (asserted > 0)
//    train, val  = ds.train_test_split(test_size=val_sample, shuffle=True,
//                                      seed=get_seed(random_state))
//    train       = sample_dataset(train, train_sample, ...)
// get_seed (swift/utils/np_utils.py) is random_state.randint(0, np.iinfo(np.int32).max), and
// datasets' Dataset.train_test_split with an int test_size and a seed takes
// permutation = np.random.default_rng(seed).permutation(len(ds)), test rows permutation[:val_sample],
// train rows permutation[val_sample:] — both in permutation order. twinkle reproduces both NumPy
// streams bit for bit (src/data/numpy_random.h), so a dataset's validation rows are the ones ms-swift
// picks, and for several datasets too (one get_seed draw each, in order). What follows the split is
// twinkle's: the train parts go into the mixture (twinkle/data/mixture.h, whose sampling and shuffle use
// twinkle's own random numbers) and the validation parts are concatenated in dataset order (ms-swift's
// val_dataset_shuffle=False for `--val_dataset`; its split validation set is also shuffled when
// dataset_shuffle is on, which twinkle does not do).
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace twinkle {

/// ms-swift's `val_sample` for a dataset of `n` rows of which `dataset_sample` are taken (ID#N; nullopt
/// = n) with split ratio `ratio`: max(int(min(n, dataset_sample) * ratio), 1), the product in double
/// and truncated as Python's int() does. Throws twinkle::Error naming --split-dataset-ratio when ratio
/// is not in (0, 1), n < 1, or nothing is left to train (dataset_sample - val_sample < 1, ms-swift's
/// assertion), naming `what` (the dataset).
int64_t split_val_count(int64_t n, std::optional<int64_t> dataset_sample, double ratio, const std::string& what);

/// The seeds ms-swift's get_seed draws from np.random.RandomState(data_seed): each next() is the next
/// randint(0, 2**31 - 1). Throws twinkle::Error when data_seed > 2**32 - 1 (NumPy's RandomState refuses it).
class SwiftSeedStream {
 public:
  explicit SwiftSeedStream(uint64_t data_seed);
  int64_t next();

 private:
  std::mt19937 mt_;
};

/// Row indices of datasets' Dataset.train_test_split(test_size=n_test, shuffle=True, seed=seed) of a
/// dataset of `n` rows: `val` = the first n_test entries of np.random.default_rng(seed).permutation(n),
/// `train` = the rest, both in permutation order. Throws twinkle::Error when n_test is not in [1, n - 1].
struct TrainValIndices {
  std::vector<int64_t> train, val;
};
TrainValIndices train_test_split_indices(int64_t n, int64_t n_test, uint64_t seed);

/// np.random.default_rng(seed).permutation(n) (NumPy's SeedSequence + PCG64 + Generator.shuffle).
std::vector<int64_t> numpy_default_rng_permutation(int64_t n, uint64_t seed);

}  // namespace twinkle
