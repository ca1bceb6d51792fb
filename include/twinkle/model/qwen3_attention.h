// twinkle/model/qwen3_attention.h — Qwen3 self-attention of one decoder layer, tensor-parallel.
//
// HF transformers models/qwen3/modeling_qwen3.py Qwen3Attention: q/k/v projections, per-head
// RMSNorm on q and k (q_norm/k_norm, before RoPE), rotate_half RoPE, causal grouped-query
// attention (scale head_dim^-0.5) on packed segments, with the layer's sliding window when the
// config gives it one (Qwen3Config layer_types / max_window_layers), o projection. Parallel layout as
// Megatron-core's SelfAttention: q/k/v one ColumnParallelLinear (heads split over tp),
// o a RowParallelLinear.
#pragma once
#include <cstdint>

#include "twinkle/core/workspace.h"
#include "twinkle/io/model_config.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/rms_norm.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/column_parallel_linear.h"
#include "twinkle/parallel/row_parallel_linear.h"

namespace twinkle {

class Qwen3Attention {
 public:
  Qwen3Attention() = default;
  /// Adds model.layers.{layer}.self_attn.{q,k,v}_proj (+bias), o_proj (+bias), q_norm, k_norm
  /// to `table`, in that order. `rope` must outlive the layer.
  Qwen3Attention(parallel::TensorTable& table, const parallel::TensorParallel& tp, const ModelConfig& cfg,
                 int64_t layer, const kernels::cpu::RopeTable* rope);

  /// x_local [Tl, H] (the normed input). Saves into `a` and returns the o projection's
  /// reduced output rows [Tl, H] (bias included) in `scratch` (RowParallelLinear::forward).
  const float* forward(const float* x_local, const StageBatch& b, AttentionActivations& a, Workspace& scratch) const;
  /// dy_local [Tl, H] = d(output). Accumulates the parameter gradients and returns
  /// d(x_local) [Tl, H] in `scratch` (ColumnParallelLinear::backward).
  const float* backward(const float* dy_local, const StageBatch& b, const AttentionActivations& a,
                        Workspace& scratch) const;

  /// Selective recompute (Megatron's recompute_modules "core_attn"): runs the core attention
  /// again from the saved a.q, a.k, a.v into a.ctx and a.lse (the flash kernel, or the cp
  /// ring / Ulysses with the same communication). Bit-identical to what forward wrote.
  void recompute_core(const StageBatch& b, AttentionActivations& a) const;

  parallel::ColumnParallelLinear qkv_proj;  ///< parts q_proj, k_proj, v_proj
  parallel::RowParallelLinear o_proj;
  RMSNorm q_norm, k_norm;                   ///< per head, over head_dim

 private:
  const kernels::cpu::RopeTable* rope_ = nullptr;
  int64_t layer_ = 0, D_ = 0, hq_ = 0, hkv_ = 0;  // local heads
  int64_t window_ = 0;  // sliding window of this layer (ModelConfig::attention_window), 0 = none
};

}  // namespace twinkle
