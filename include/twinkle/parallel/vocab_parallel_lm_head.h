// twinkle/parallel/vocab_parallel_lm_head.h — the vocab-parallel lm head fused with the loss.
//
// logits = X W^T with W [vocab, H] split along the vocabulary (Megatron's output_layer, a
// ColumnParallelLinear with gather_output = False) followed by the vocab-parallel cross
// entropy (vocab_parallel.h, Megatron _VocabParallelCrossEntropy), run in chunks of tokens
// with the cross-entropy backward fused in, so the [T, vocab/tp] logits never exist for
// the whole micro-batch. Under sequence parallelism the input is all-gathered first and
// d(input) reduce-scattered; otherwise d(input) is all-reduced over tp.
// The weight is lm_head.weight, or with tie_word_embeddings the embedding's own entry (one
// pipeline stage) or a tied copy on the last stage (Megatron's shared embedding weights,
// whose gradients finalize_grads sums over the embedding group).
#pragma once
#include <cstdint>
#include <vector>

#include "twinkle/core/workspace.h"
#include "twinkle/parallel/tensor_table.h"
#include "twinkle/parallel/tp_comm.h"
#include "twinkle/parallel/vocab_parallel.h"

namespace twinkle::parallel {

class VocabParallelLMHead {
 public:
  enum class Weight {
    Own,       ///< adds "lm_head.weight" (untied)
    TiedCopy,  ///< adds the last stage's copy of "model.embed_tokens.weight" (not saved)
    Shared,    ///< uses `shared_entry`, the embedding of the same stage
  };
  VocabParallelLMHead() = default;
  VocabParallelLMHead(TensorTable& table, const TensorParallel& tp, const VocabShard& shard, int64_t hidden,
                      int64_t chunk_tokens, Weight weight, size_t shared_entry = kNoParam);
  size_t weight_entry() const { return weight_; }

  /// x_local [Tl, H] (Tl = T/tp under SP, else T); targets [T]: global ids or -100.
  /// Returns the SUM of the token cross entropies over targets != -100 (the same on every
  /// tp rank). When dx_local is not null also backpropagates d(loss_sum) * grad_scale:
  /// accumulates dW and writes dx_local [Tl, H] summed over tp. Scratch keys "head.*",
  /// "tp.x_full" (SP), "tp.dx_full", "tp.dx_local".
  double forward(const float* x_local, const int32_t* targets, int64_t T, float grad_scale, float* dx_local,
                 Workspace& scratch) const;
  /// Logits [vocab] of one token x [H]; tp = 1 only (else twinkle::Error).
  std::vector<float> logits(const float* x) const;

 private:
  const TensorTable* table_ = nullptr;
  TensorParallel tp_;
  VocabShard shard_;
  int64_t H_ = 0, chunk_ = 1024;
  size_t weight_ = kNoParam;
};

}  // namespace twinkle::parallel
