// twinkle/parallel/tp_comm.h — tensor/sequence-parallel communication on token-major activations.
//
// Activations are [T, H] row-major with T = tokens of a micro-batch. These are
// Megatron-core's mappings (megatron/core/tensor_parallel/mappings.py) in explicit
// forward/backward form:
//   copy_to_tp_region            fwd identity      bwd all-reduce
//   reduce_from_tp_region        fwd all-reduce    bwd identity
//   gather_from_sp_region        fwd all-gather    bwd reduce-scatter   (along tokens)
//   reduce_scatter_to_sp_region  fwd reduce-scatter bwd all-gather      (along tokens)
// With sequence parallelism rank r of the tp group holds tokens [r*T/tp, (r+1)*T/tp).
#pragma once
#include <cstdint>

#include "twinkle/dist/process_group.h"

namespace twinkle::parallel {

/// full[T = tp*local_rows, cols] = concatenation of every tp rank's local[local_rows, cols].
void all_gather_rows(dist::ProcessGroup& tp, const float* local, float* full, int64_t local_rows, int64_t cols);
/// local[local_rows, cols] = sum over tp ranks of their full[tp*local_rows, cols] rows of this rank's block.
void reduce_scatter_rows(dist::ProcessGroup& tp, const float* full, float* local, int64_t local_rows, int64_t cols);
/// In-place sum over the group (no-op for size 1).
void all_reduce_sum(dist::ProcessGroup& g, float* buf, int64_t n);

/// The tensor-parallel group as the layer types see it (Megatron's tp group plus
/// config.sequence_parallel). `sequence_parallel` is only true when size > 1.
struct TensorParallel {
  dist::ProcessGroup* group = nullptr;
  int size = 1;
  int rank = 0;
  bool sequence_parallel = false;
  /// Rows of a [T, cols] activation this rank holds between the parallel regions:
  /// T/tp under sequence parallelism, else T.
  int64_t local_rows(int64_t T) const { return sequence_parallel ? T / size : T; }
};

/// Megatron gather_from_sequence_parallel_region (forward): under SP all-gathers every tp
/// rank's local [T/tp, cols] into `full` [T, cols] and returns `full`; without SP returns
/// `local` (which already holds all T rows; `full` is not touched and may be null).
const float* sp_gather_rows(const TensorParallel& tp, const float* local, float* full, int64_t T, int64_t cols);
/// Reduces a tp-partial sum full[T, cols] (row-parallel output, column-parallel input
/// gradient): under SP reduce-scatters it into `local` [T/tp, cols] and returns `local`;
/// otherwise all-reduces `full` in place and returns it (`local` unused, may be null).
/// Megatron reduce_scatter_to_sequence_parallel_region / reduce_from_tensor_model_parallel_region.
float* tp_reduce_rows(const TensorParallel& tp, float* full, float* local, int64_t T, int64_t cols);

}  // namespace twinkle::parallel
