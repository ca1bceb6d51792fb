// twinkle/data/dataloader.h — global batches of encoded rows, split over data-parallel ranks.
//
// Semantics follow Twinkle's DataLoader (src/twinkle/dataloader/*.py) with torch's
// defaults: sequential order (no shuffle), drop_last=false, no padding at this level.
// A global batch is batch_size consecutive rows (of the epoch's order); data-parallel
// rank k of n takes the contiguous block [k*b/n, (k+1)*b/n) of it (b = rows in that
// batch), like Twinkle's DeviceMeshSampler / mesh.get_slice. A final batch with fewer
// rows than dp_size is kept by default (the ranks without a row contribute no token, so every
// layout trains the same rows); min_batch_size > 0 ends the epoch before a final batch
// shorter than it (Twinkle's DeviceMeshSampler check, whose default there is the data world
// size); with drop_last any final partial batch is dropped. Every rank computes the same order:
// the loader needs no communication.
//
// Iteration:  for (const LocalBatch& b : loader) { ... }  yields the remaining batches
// of the current epoch, starting from the saved position; the position advances as each
// batch is produced, so get_state() inside the loop body already points at the next
// batch (a checkpoint saved there resumes with the following batch). Starting a
// range-for when the epoch is finished moves to the next epoch.
#pragma once
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "twinkle/data/batch.h"

namespace twinkle {

class Dataset;

struct DataLoaderOptions {
  int64_t batch_size = 1;  ///< global batch size (rows per step over all DP ranks)
  bool shuffle = false;    ///< seeded permutation per epoch (identical on every rank)
  uint64_t seed = 42;      ///< shuffle seed (Twinkle: TWINKLE_SEED or 42)
  bool drop_last = false;  ///< drop a final batch smaller than batch_size
  /// Twinkle's min_batch_size: a final batch with fewer rows than this ends the epoch (is not
  /// produced, and size() does not count it). 0 (default) keeps every final batch, whatever its
  /// size; Twinkle's DeviceMeshSampler defaults to the data world size instead, which drops a
  /// different number of rows on each layout.
  int64_t min_batch_size = 0;
  int64_t dp_rank = 0;     ///< this rank's data-parallel index (ignored when dp_size == 0)
  /// Data-parallel world size; 0 (default) = take dp size and rank from the global mesh of
  /// twinkle::initialize (Twinkle injects it the same way), or 1 before initialize().
  int64_t dp_size = 0;
};

/// The one place the DataLoader options are checked (the DataLoader constructors, `twinkle
/// train` and the recipes call it). Throws twinkle::Error naming the field: batch_size < 1,
/// dp_size < 0, dp_rank outside [0, dp_size) when dp_size > 0, batch_size not divisible by
/// dp_size (each data-parallel rank needs an equal share of a full batch), min_batch_size
/// outside [0, batch_size].
void validate(const DataLoaderOptions& opts);

/// What one rank gets for one step.
struct LocalBatch {
  std::vector<EncodedRow> rows;      ///< this rank's block of the global batch
  std::vector<int64_t> row_indices;  ///< indices of `rows` in the loader's encoded rows
  int64_t global_rows = 0;           ///< rows in the whole global batch (all ranks)
  int64_t index = 0;                 ///< batch index within the epoch (0-based)
  int64_t epoch = 0;                 ///< epoch (0-based)
};

/// Position of a DataLoader: the next batch to produce.
struct DataLoaderState {
  int64_t epoch = 0;             ///< current epoch
  int64_t next_batch = 0;        ///< next batch index within the epoch (== size(): epoch finished)
  int64_t consumed_samples = 0;  ///< global rows produced so far (all epochs, all ranks)
  int64_t batch_size = 0;        ///< loader's batch_size when saved (0 = unknown, not checked)
  int64_t num_rows = 0;          ///< loader's row count when saved (0 = unknown, not checked)
  /// {"epoch", "next_batch", "consumed_samples", "batch_size", "num_rows"}.
  nlohmann::json to_json() const;
  /// Throws twinkle::Error naming the missing/mistyped field (batch_size and num_rows
  /// are optional).
  static DataLoaderState from_json(const nlohmann::json& j);
};

class DataLoader {
 public:
  /// Over `dataset.encoded()` (shared, so the loader stays valid if the Dataset goes
  /// away). Throws twinkle::Error if the dataset is not encoded, what validate(opts)
  /// throws, or when no batch is left (drop_last without a full batch, or fewer rows than
  /// min_batch_size). Warns (logger, rank 0) when
  /// batch_size exceeds the row count (one batch of every row per epoch) and when the
  /// final partial batch leaves some data-parallel ranks without a row.
  DataLoader(const Dataset& dataset, const DataLoaderOptions& opts);
  /// Over given rows (same checks; throws on an empty list).
  DataLoader(std::shared_ptr<const std::vector<EncodedRow>> rows, const DataLoaderOptions& opts);
  DataLoader(std::vector<EncodedRow> rows, const DataLoaderOptions& opts);

  /// Batches per epoch: ceil(N/batch_size) (floor with drop_last, or when the final batch
  /// has fewer than min_batch_size rows), the same for every dp_size.
  int64_t size() const { return num_batches_; }
  /// Rows per epoch (N, the encoded row count).
  int64_t num_rows() const { return static_cast<int64_t>(rows_->size()); }
  const DataLoaderOptions& options() const { return opts_; }

  /// The order of the encoded rows in `epoch` (identity without shuffle; with shuffle a
  /// Fisher-Yates permutation driven by std::mt19937_64 seeded with
  /// splitmix64(seed + epoch), so every rank and every run gets the same order).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  /// This rank's part of batch `index` of `epoch` (random access; does not move the
  /// position). May hold no row (a final partial batch with fewer rows than dp_size). Throws twinkle::Error if index is outside [0, size()). Not thread-safe
  /// (caches the epoch's permutation); use one DataLoader per thread.
  LocalBatch batch(int64_t epoch, int64_t index) const;
  /// Produces the next batch of the current epoch into `out` and advances the position;
  /// returns false (leaving `out` untouched) when the epoch is finished. Call
  /// next_epoch() (or start a range-for) to continue.
  bool next(LocalBatch& out);
  /// Moves to batch 0 of the next epoch.
  void next_epoch();

  /// The current position (with batch_size and num_rows filled in).
  DataLoaderState get_state() const;
  /// Restores a position. Throws twinkle::Error if next_batch is outside [0, size()],
  /// a field is negative, or the state records a different batch_size / num_rows than
  /// this loader's (a resumed run must see the same data to continue where it stopped).
  void set_state(const DataLoaderState& s);
  /// Global rows produced so far (Twinkle: consumed_train_samples).
  int64_t consumed_samples() const { return state_.consumed_samples; }
  /// Twinkle's resume_from_checkpoint(n): positions the loader as if `n` global rows had
  /// been consumed from epoch 0. Throws twinkle::Error if n does not fall on a batch
  /// boundary.
  void skip_samples(int64_t n);

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = LocalBatch;
    using difference_type = std::ptrdiff_t;
    using pointer = const LocalBatch*;
    using reference = const LocalBatch&;
    iterator() = default;
    reference operator*() const { return cur_; }
    pointer operator->() const { return &cur_; }
    iterator& operator++();
    bool operator==(const iterator& o) const { return loader_ == o.loader_; }
    bool operator!=(const iterator& o) const { return !(*this == o); }

   private:
    friend class DataLoader;
    explicit iterator(DataLoader* l);
    DataLoader* loader_ = nullptr;  ///< null = end
    LocalBatch cur_;
  };
  /// Starts (or continues) the current epoch; moves to the next epoch first if the
  /// current one is finished.
  iterator begin();
  iterator end() { return iterator(); }

 private:
  void init();
  std::shared_ptr<const std::vector<EncodedRow>> rows_;
  DataLoaderOptions opts_;
  int64_t num_batches_ = 0;
  DataLoaderState state_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

/// Splits `rows` into micro-batches of `micro_batch_size` consecutive rows (the last one
/// may be smaller). Each is collate_padded(chunk, pad_id) (right-padded to its own
/// longest row; Twinkle's InputProcessor pads input_ids with 0) or, with `packing`,
/// collate_packed(chunk) (one padding-free sequence). Throws twinkle::Error on an empty
/// list or micro_batch_size < 1.
std::vector<MicroBatch> make_micro_batches(const std::vector<EncodedRow>& rows, int64_t micro_batch_size,
                                           int32_t pad_id, bool packing);

}  // namespace twinkle
