// twinkle/parallel/vocab_parallel_embedding.h — Megatron's VocabParallelEmbedding.
//
// The embedding table [vocab, H] split along the (padded) vocabulary over tp
// (megatron/core/tensor_parallel/layers.py VocabParallelEmbedding; vocab_parallel.h has the
// shard): each rank looks up the ids of its shard (zero rows for the others) and the rows
// are summed over tp — all-reduce, or reduce-scatter to [T/tp, H] under sequence
// parallelism. Backward all-gathers d(output) under SP and scatters it into this rank's
// rows; ids equal to padding_idx get no gradient (HF nn.Embedding(padding_idx=...)).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "twinkle/core/workspace.h"
#include "twinkle/parallel/tensor_table.h"
#include "twinkle/parallel/tp_comm.h"
#include "twinkle/parallel/vocab_parallel.h"

namespace twinkle::parallel {

/// The entry of a vocab-sharded [vocab, hidden] HF tensor: local [shard.local, hidden]
/// (padding rows included, zero and never loaded), N(0, std) init, weight decay.
TensorEntry vocab_entry(const std::string& name, const VocabShard& shard, int64_t hidden);

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;
  /// Adds `name` [vocab, hidden] (vocab_entry) to `table`. With `tied` the checkpoint may
  /// hold it as "lm_head.weight" instead (a tied model saved by another tool).
  VocabParallelEmbedding(TensorTable& table, const TensorParallel& tp, const std::string& name, const VocabShard& shard,
                         int64_t hidden, bool tied);
  size_t weight_entry() const { return weight_; }

  /// ids [T] (validated by the caller, kernels::cpu::check_token_ids). Writes out_local
  /// [Tl, H] (Tl = T/tp under SP, else T): the embedding rows summed over tp.
  /// Scratch key "tp.emb_full" when tp > 1.
  void forward(const int32_t* ids, int64_t T, float* out_local, Workspace& scratch) const;
  /// dy_local [Tl, H]: accumulates d(table) of this rank's rows; ids equal to padding_idx
  /// contribute nothing. Scratch key "tp.dy_full" under SP.
  void backward(const float* dy_local, const int32_t* ids, int64_t T, std::optional<int64_t> padding_idx,
                Workspace& scratch) const;

 private:
  const TensorTable* table_ = nullptr;
  TensorParallel tp_;
  VocabShard shard_;
  int64_t H_ = 0;
  size_t weight_ = kNoParam;
};

}  // namespace twinkle::parallel
