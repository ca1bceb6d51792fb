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

}  // namespace twinkle::parallel
