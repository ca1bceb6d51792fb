// twinkle/model/qwen3_activations.h — the activations one pipeline stage saves for backward.
//
// One typed struct per block instead of named workspace lookups (llm.c train_gpt2.c
// ActivationTensors): every buffer a backward reads is a field written by the matching
// forward, for one micro-batch slot. The buffers of a slot are carved from one 64-byte
// aligned allocation sized for the largest micro-batch seen so far (25% headroom), so
// steps reuse memory (fresh pages cost 12-17 us each, ../shared/spec/machine-figures.md).
// Shapes below: T tokens of the micro-batch, Tl = T/tp under sequence parallelism (else T),
// H hidden, local sizes nq = heads/tp * head_dim, nkv = kv_heads/tp * head_dim, I = intermediate/tp.
#pragma once
#include <cstdint>
#include <vector>

#include "twinkle/core/tensor.h"

namespace twinkle {

/// Self-attention (Qwen3Attention) of one layer.
struct AttentionActivations {
  float* x_full = nullptr;    ///< [T, H] all-gathered normed input (sequence parallelism only)
  const float* x = nullptr;   ///< the [T, H] input the q/k/v GEMMs read (x_full, or the layer's ln1)
  float* q_pre = nullptr;     ///< [T, nq]  q_proj output (before q_norm)
  float* k_pre = nullptr;     ///< [T, nkv] k_proj output (before k_norm)
  float* v = nullptr;         ///< [T, nkv]
  float* q = nullptr;         ///< [T, nq]  after q_norm and RoPE
  float* k = nullptr;         ///< [T, nkv] after k_norm and RoPE
  float* rstd_q = nullptr;    ///< [T * heads/tp]
  float* rstd_k = nullptr;    ///< [T * kv_heads/tp]
  float* ctx = nullptr;       ///< [T, nq]  attention output (o_proj input)
  float* lse = nullptr;       ///< [T, heads/tp] log-sum-exp of each query row
};

/// SwiGLU MLP (Qwen3MLP) of one layer.
struct MlpActivations {
  float* x_full = nullptr;    ///< [T, H] all-gathered normed input (sequence parallelism only)
  const float* x = nullptr;   ///< the [T, H] input the gate/up GEMMs read
  float* gu = nullptr;        ///< [T, 2I] gate | up per row (fused GEMM); two [T, I] blocks otherwise
  float* act = nullptr;       ///< [T, I] silu(gate) * up (down_proj input)
};

/// One decoder layer: out = h + mlp(ln2(h)), h = x + attn(ln1(x)).
struct DecoderLayerActivations {
  float* ln1 = nullptr;       ///< [Tl, H]
  float* rstd1 = nullptr;     ///< [Tl]
  AttentionActivations attn;
  float* h = nullptr;         ///< [Tl, H] residual after attention
  float* ln2 = nullptr;       ///< [Tl, H]
  float* rstd2 = nullptr;     ///< [Tl]
  MlpActivations mlp;
  float* out = nullptr;       ///< [Tl, H] layer output (the next layer's input)
};

/// Sizes that fix the buffers of a stage.
struct ActivationDims {
  int64_t hidden = 0, q_width = 0, kv_width = 0, q_heads = 0, kv_heads = 0, intermediate = 0;
  int64_t layers = 0;           ///< decoder layers of the stage
  int tp = 1;
  bool sequence_parallel = false;
  bool last_stage = false;      ///< holds the final norm and its saved gradient
};

/// Everything one micro-batch slot of a stage keeps between its forward and backward.
struct StageActivations {
  int64_t T = 0;                ///< tokens of the micro-batch whose activations are held (0: none)
  float* x0 = nullptr;          ///< [Tl, H] stage input (embedding output or received hidden state)
  std::vector<DecoderLayerActivations> layers;
  float* final_norm = nullptr;  ///< [Tl, H] final RMSNorm output (last stage)
  float* rstd_final = nullptr;  ///< [Tl]
  float* d_final_norm = nullptr;///< [Tl, H] d(loss)/d(final_norm), from the fused head backward (last stage)

  /// Points every field at buffers for a micro-batch of T tokens (reallocating, with
  /// headroom, only when T exceeds the capacity) and records T. Contents are unspecified.
  void reserve(const ActivationDims& d, int64_t T);
  /// Throws twinkle::Error unless this slot holds the activations of a T-token micro-batch
  /// (a backward for a micro-batch that was not run forward in this slot).
  void check_holds(int64_t T, int slot) const;
  size_t bytes() const { return storage_.defined() ? storage_.nbytes() : 0; }

 private:
  Tensor storage_;
  int64_t capacity_ = 0;  ///< tokens the storage is carved for
};

}  // namespace twinkle
