// twinkle/data/dataset_meta.h — what a Dataset loads: id/path, subset, split, row slice.
//
// Mirrors Twinkle's DatasetMeta (src/twinkle/dataset/base.py): `data_slice` selects rows
// by index, and an index >= the dataset length wraps modulo that length (so range(256)
// over a 100-row file repeats rows), applied like datasets.Dataset.select.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace twinkle {

/// A row selection: either a half-open range [start, stop) or an explicit index list.
class DataSlice {
 public:
  /// Rows start, start+1, ..., stop-1 (like Python's range(start, stop)); stop < start
  /// selects nothing. Throws twinkle::Error if start or stop is negative.
  static DataSlice range(int64_t start, int64_t stop);
  /// range(0, stop).
  static DataSlice range(int64_t stop) { return range(0, stop); }
  /// The listed rows, in this order (repeats allowed). Throws twinkle::Error naming the
  /// position of the first negative index.
  static DataSlice indices(std::vector<int64_t> idx);
  /// The command line's spelling (`twinkle train --data-slice`): "A:B" = range(A, B),
  /// "N" = range(N), "i,j,k" = indices({i, j, k}); every number a non-negative decimal
  /// integer. Throws twinkle::Error naming `option` and the offending text for anything else
  /// (empty parts, signs, trailing characters, "1:2:3", values beyond int64).
  static DataSlice parse(const std::string& text, const std::string& option = "--data-slice");

  /// Number of selected indices (before wrap-around).
  int64_t count() const;
  /// The selected row indices for a dataset of `n` rows, each taken modulo n.
  /// Throws twinkle::Error (naming `what`) if n == 0 and the slice is non-empty.
  std::vector<int64_t> resolve(int64_t n, const std::string& what) const;
  /// "range(a, b)" or "[i, j, ...]" for messages.
  std::string describe() const;

 private:
  bool is_range_ = true;
  int64_t start_ = 0, stop_ = 0;
  std::vector<int64_t> idx_;
};

struct DatasetMeta {
  /// `dataset_id`: a local .jsonl/.json/.csv/.parquet file or directory, or a hub id
  /// ("ms://owner/name", "hf://owner/name", bare "owner/name"; see twinkle/data/hub.h).
  DatasetMeta(std::string dataset_id = "", std::optional<DataSlice> data_slice = std::nullopt,
              std::string subset_name = "default", std::string split = "train")
      : dataset_id(std::move(dataset_id)),
        data_slice(std::move(data_slice)),
        subset_name(std::move(subset_name)),
        split(std::move(split)) {}

  std::string dataset_id;
  std::optional<DataSlice> data_slice;  ///< nullopt = all rows in file order
  std::string subset_name = "default";
  std::string split = "train";
  /// When true, a malformed row (bad JSON, not an object, invalid UTF-8, or a
  /// preprocessing/encoding error later) is skipped with a warning and counted
  /// (Dataset::bad_rows()) instead of throwing twinkle::Error.
  bool skip_bad_rows = false;
};

}  // namespace twinkle
