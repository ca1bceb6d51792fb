// twinkle/data/mixture.h — several datasets trained as one: a sample count or ratio per dataset,
// concatenated, concatenated and shuffled, or interleaved, with a seed.
//
// Sources of the semantics:
//  * ms-swift's `--dataset ID#N` and its sample_dataset (swift/llm/dataset/utils.py): N rows of a
//    dataset of n rows are floor(N / n) whole copies in order (np.tile) followed by N mod n rows
//    taken from a seeded random permutation (its first N mod n entries; ms-swift's
//    dataset_shuffle=False takes rows 0..N mod n - 1 instead). So N < n is a random subset without
//    repeats, and N > n repeats the whole dataset and adds a random remainder. Twinkle also accepts
//    `ID#R` with a decimal point: N = floor(R * n) (R = 0.5 half the rows, R = 2.0 every row twice).
//  * Twinkle's Dataset.add_dataset / mix_dataset (src/twinkle/dataset/base.py): each dataset is
//    preprocessed on its own (map with its DatasetMeta), then mixed: interleave=False is
//    datasets.concatenate_datasets (rows of the first, then of the second, ...), interleave=True is
//    datasets.interleave_datasets with its defaults (no probabilities, stopping_strategy
//    "first_exhausted": one row of each dataset in turn, k · min(len) rows in all; with probabilities,
//    MixOptions::probabilities).
//  * ms-swift's default dataset_shuffle: the concatenation shuffled with the seed (MixMode::Shuffle).
// The random numbers are twinkle's (std::mt19937_64 seeded through splitmix64, Fisher-Yates; the
// DataLoader's permutation, src/data/permutation.h), not numpy's: the same seed gives the same rows
// on every machine and standard library, but not the rows ms-swift picks.
//
// A mixture is an ordinary Dataset (rows in the mixed order, each keeping its "<file>:<line>"), so
// the DataLoader cuts the same global batches from it on every dp size, and its saved position
// resumes it exactly (every rank recomputes the same order from the same seed).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace twinkle {

class Dataset;

/// One `--dataset` value: "ID", "ID#N" (N rows, an integer >= 1) or "ID#R" (R a decimal number with
/// a '.', > 0: floor(R · n) rows). The id is everything before the last '#' when what follows it is
/// empty or starts with a digit, '.', '+' or '-' (and must then be N or R); otherwise the whole text
/// is the id (a path may contain '#').
struct DatasetSpec {
  std::string id;
  std::optional<int64_t> count;  ///< #N
  std::optional<double> ratio;   ///< #R
  /// Throws twinkle::Error naming `option` and the text for "ID#", "ID#0", "ID#-3", "ID#0.0",
  /// "ID#1e3" and an empty id.
  static DatasetSpec parse(const std::string& text, const std::string& option = "--dataset");
  /// The number of rows this spec takes from a dataset of `n` rows (n when neither is set).
  /// Throws twinkle::Error naming the id when a ratio gives 0 rows.
  int64_t rows(int64_t n) const;
};

/// ms-swift's sample_dataset rule (above) for `count` rows of a dataset of `n` rows: indices into it.
/// `shuffle` false takes the remainder in order (rows 0..count mod n - 1). Throws twinkle::Error
/// when n < 1 or count < 0.
std::vector<int64_t> sample_indices(int64_t n, int64_t count, bool shuffle, uint64_t seed);

enum class MixMode {
  Concat,      ///< datasets.concatenate_datasets (Twinkle mix_dataset(interleave=False))
  Shuffle,     ///< the concatenation, then a seeded permutation (ms-swift dataset_shuffle)
  Interleave,  ///< datasets.interleave_datasets, round robin, first_exhausted (mix_dataset())
};

/// "concat", "shuffle" or "interleave"; throws twinkle::Error naming `option` otherwise.
MixMode parse_mix_mode(const std::string& text, const std::string& option = "--dataset-mix");

struct MixOptions {
  MixMode mode = MixMode::Shuffle;
  uint64_t seed = 42;
  /// ms-swift's dataset_shuffle for the `#N` remainder rows (and MixMode::Shuffle's permutation
  /// stays on regardless).
  bool sample_shuffle = true;
  /// Interleave only: datasets.interleave_datasets' `probabilities` (ms-swift --interleave_prob), one
  /// weight >= 0 per dataset, normalised by their sum: each row comes from a dataset drawn with these
  /// weights (std::mt19937_64 seeded with splitmix64(seed + 0x1f), a 53-bit uniform against the
  /// cumulative weights), taking that dataset's next row; "first_exhausted": the order ends right after
  /// some dataset's last row was taken. Empty = round robin.
  std::vector<double> probabilities;
};

/// The mixed order: (dataset index, row index) pairs for datasets of `sizes[i]` rows from which
/// `counts[i]` rows are sampled (sample_indices with seed splitmix64(seed + 1 + i)); Shuffle
/// permutes the concatenation with seed splitmix64(seed). Throws twinkle::Error when the lists'
/// lengths differ or are empty, a size is < 1, or probabilities are given for another mode, with
/// another count than the datasets', negative, non-finite or all zero.
std::vector<std::pair<int32_t, int64_t>> mixture_order(const std::vector<int64_t>& sizes,
                                                       const std::vector<int64_t>& counts, const MixOptions& opts);

/// The Dataset of `parts` (each already preprocessed, not encoded) in mixture_order with
/// counts[i] = specs[i].rows(parts[i].size()); its id is the parts' ids joined by " + ".
/// Throws twinkle::Error when a part is encoded, when the lists differ in length, or for an empty
/// result.
Dataset mix_datasets(const std::vector<const Dataset*>& parts, const std::vector<DatasetSpec>& specs,
                     const MixOptions& opts);

}  // namespace twinkle
