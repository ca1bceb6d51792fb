// twinkle/parallel/vocab_parallel.h — vocab-parallel embedding and cross entropy.
//
// Megatron-core VocabParallelEmbedding and _VocabParallelCrossEntropy
// (megatron/core/tensor_parallel/{layers,cross_entropy}.py). The vocabulary is padded
// to a multiple of 128*tp (make_vocab_size_divisible_by = 128); tp rank r owns rows
// [r*Vl, (r+1)*Vl) of the padded table, of which `valid` are real ids. Padded rows
// never enter the softmax and receive zero gradient.
#pragma once
#include <cstdint>

#include "twinkle/core/tensor.h"
#include "twinkle/dist/process_group.h"
#include "twinkle/kernels/ops.h"

namespace twinkle::parallel {

struct VocabShard {
  int64_t vocab = 0;        ///< real vocabulary size (HF vocab_size)
  int64_t padded = 0;       ///< padded size, a multiple of 128*tp
  int64_t local = 0;        ///< rows per tp rank = padded / tp
  int64_t start = 0;        ///< first global id of this rank
  int64_t valid = 0;        ///< real ids on this rank (local, or fewer on the last ranks)
};

/// Shard of a vocabulary of `vocab` ids for tp rank `tp_rank` of `tp_size`.
VocabShard make_vocab_shard(int64_t vocab, int tp_rank, int tp_size, int64_t divisible_by = 128);

/// Vocab-parallel cross entropy on logits [T, local] of this rank's shard.
/// targets [T]: global ids or -100. Forward: per-row max, sum-exp and target logit are
/// all-reduced over `tp`; writes lse[T] and returns the SUM of token losses over rows
/// whose target != -100 (identical on every tp rank).
double vocab_parallel_ce_forward(dist::ProcessGroup& tp, const VocabShard& shard, const float* logits,
                                 const int32_t* targets, int64_t T, float* lse, float* scratch_max,
                                 float* scratch_target);
/// The same with the local pieces from `ce` (a kernel table's cross_entropy op). With `dev` an
/// accelerator every pointer is device memory; the final [T] combination (lse = max + log sum-exp,
/// the loss sum) then runs on host copies of the [T] rows (3 downloads and 1 upload of T values).
double vocab_parallel_ce_forward(dist::ProcessGroup& tp, const VocabShard& shard, const float* logits,
                                 const int32_t* targets, int64_t T, float* lse, float* scratch_max,
                                 float* scratch_target, const kernels::CrossEntropyOp& ce,
                                 Device dev = Device::CPU);

}  // namespace twinkle::parallel
