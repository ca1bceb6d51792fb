// twinkle/model/qwen3_activations.h — the activations one pipeline stage saves for backward.
//
// One typed struct per block instead of named workspace lookups (llm.c train_gpt2.c
// ActivationTensors): every buffer a backward reads is a field written by the matching
// forward, for one micro-batch slot. The buffers of a slot are carved from one 64-byte
// aligned allocation sized for the largest micro-batch seen so far (25% headroom), so
// steps reuse memory (fresh pages cost 12-17 us each on the development machine).
// Shapes below: T tokens of the micro-batch, Tl = T/tp under sequence parallelism (else T),
// H hidden, local sizes nq = heads/tp * head_dim, nkv = kv_heads/tp * head_dim, I = intermediate/tp.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "twinkle/core/tensor.h"
#include "twinkle/core/workspace.h"

namespace twinkle {

namespace parallel {
class AlltoAllDispatcher;  // parallel/moe_dispatcher.h
}

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

/// Sparse MoE block (Qwen3MoeBlock) of one layer; T = this rank's token rows (Tl under SP),
/// R = T * top_k routed rows, E experts, I = moe_intermediate_size. Under expert parallelism
/// (ep > 1) the expert buffers gate/up/act/y hold the Rr rows this rank's local experts
/// received, and the permutation lives in `dispatcher` (xp, row_of_slot, slot_of_row and
/// counts are unused). The buffers live on the model's device, in `buf` (grow-only, so their
/// capacity is kept across steps while each expert's row count changes with the routing); the
/// pointers below are valid until the next forward of this slot.
struct MoeActivations {
  const float* x = nullptr;          ///< [T, H] block input (the layer's ln2)
  int64_t T = 0;                     ///< token rows of the saved forward
  float* logits = nullptr;           ///< [T, E] router logits
  float* probs = nullptr;            ///< [T, E] softmax over all experts
  float* lse = nullptr;              ///< [T] logsumexp of the logits (z-loss)
  float* topk_w = nullptr;           ///< [T, k] combine weights
  int32_t* topk_idx = nullptr;       ///< [T, k] selected experts
  int32_t* row_of_slot = nullptr;    ///< [R] permuted row of slot t*k+j
  int32_t* slot_of_row = nullptr;    ///< [R]
  std::vector<int64_t> counts;       ///< [E] rows per expert (all tokens, padding included); host memory
  float* xp = nullptr;               ///< [R, H] permuted input
  float* gate = nullptr;             ///< [R, I]
  float* up = nullptr;               ///< [R, I]
  float* act = nullptr;              ///< [R, I]
  float* y = nullptr;                ///< [R, H] expert outputs (before the combine)
  /// [R] the LoRA dropout token keys of the expert rows (lora_dropout.h; null without dropout on
  /// expert LoRA pairs), in the experts' row order (sent along by the dispatcher under ep).
  uint64_t* lora_keys = nullptr;
  /// The device memory behind the pointers above (named buffers: twinkle/core/workspace.h).
  Workspace buf;
  /// ep > 1: the alltoall dispatcher of this (layer, micro-batch slot) — its routing plan, the
  /// experts' input rows and their outputs in slot order live until this slot's backward; its
  /// transient all-to-all rows are in the stage's scratch (parallel/moe_dispatcher.h).
  std::shared_ptr<parallel::AlltoAllDispatcher> dispatcher;
  std::vector<int64_t> real_counts;  ///< [E] slots routed to each expert from real tokens (host)
  std::vector<double> real_prob_sum; ///< [E] sum of probs over real tokens (host)
  /// Router-loss gradients, set by the model after the stage forward (0 / null: none):
  /// dprobs[t, e] += aux_coeff_scale * aux_counts[e] (host counts) and the z-loss with scale z_scale.
  const int64_t* aux_counts = nullptr;
  double aux_coeff_scale = 0.0;
  double z_scale = 0.0;
};

/// One decoder layer: out = h + mlp(ln2(h)), h = x + attn(ln1(x)).
struct DecoderLayerActivations {
  float* ln1 = nullptr;       ///< [Tl, H]
  float* rstd1 = nullptr;     ///< [Tl]
  AttentionActivations attn;
  float* h = nullptr;         ///< [Tl, H] residual after attention
  float* ln2 = nullptr;       ///< [Tl, H]
  float* rstd2 = nullptr;     ///< [Tl]
  MlpActivations mlp;         ///< dense layers
  MoeActivations moe;         ///< MoE layers
  float* out = nullptr;       ///< [Tl, H] layer output (the next layer's input)
};

/// Activation recompute (Megatron's recompute_granularity; Twinkle's MegatronModel option):
/// None keeps every buffer below per micro-batch slot; Selective drops the core attention's
/// output and log-sum-exp (attn.ctx, attn.lse: Megatron's recompute_modules "core_attn") and
/// runs the attention again in backward from the saved q, k, v; Full keeps only each dense
/// layer's output (the next layer's input, Megatron's uniform method with one layer per chunk)
/// and runs the whole layer forward again in backward, collectives included. Sparse MoE layers
/// keep all their buffers under Full (not recomputed yet). Every mode gives bit-identical
/// results: the recomputation runs the same kernels on the same inputs.
enum class Recompute { None, Selective, Full };

/// Parses "none" | "selective" | "full"; throws twinkle::Error naming recompute_granularity.
Recompute parse_recompute(const std::string& name);

/// Sizes that fix the buffers of a stage.
struct ActivationDims {
  int64_t hidden = 0, q_width = 0, kv_width = 0, q_heads = 0, kv_heads = 0, intermediate = 0;
  int64_t layers = 0;           ///< decoder layers of the stage
  std::vector<bool> moe_layer;  ///< per stage layer: a sparse MoE block (no dense MLP buffers); empty = all dense
  int tp = 1;
  bool sequence_parallel = false;
  bool last_stage = false;      ///< holds the final norm and its saved gradient
  Device device = Device::CPU;  ///< where the slot's buffers live (the model's device)
  Recompute recompute = Recompute::None;
  /// Whether stage layer i keeps only its output (Full recompute of a dense layer).
  bool recomputed(size_t i) const {
    return recompute == Recompute::Full && !(i < moe_layer.size() && moe_layer[i]);
  }
};

/// Floats StageActivations::reserve allocates for a micro-batch of T tokens (its capacity
/// T + T/4 + 16 tokens, 64-byte aligned buffers; MoE blocks' buffers not included). For
/// `twinkle plan` (train/plan.h).
int64_t stage_activation_floats(const ActivationDims& d, int64_t T);
/// Floats RecomputeBuffers::reserve allocates for T tokens (0 under Recompute::None).
int64_t recompute_buffer_floats(const ActivationDims& d, int64_t T);

/// The buffers a recomputed layer runs in, one set per stage (not per slot): under Full a
/// whole dense layer's (its `out` too, so recomputing never touches the slot's saved output),
/// under Selective the core attention's ctx and lse. Empty under None.
struct RecomputeBuffers {
  DecoderLayerActivations layer;
  /// Points the fields at buffers for T tokens (grows with headroom like StageActivations).
  void reserve(const ActivationDims& d, int64_t T);
  size_t bytes() const { return storage_.defined() ? storage_.nbytes() : 0; }

 private:
  Tensor storage_;
  int64_t capacity_ = 0;
};

/// Router statistics of one micro-batch over this stage's MoE layers (real tokens only),
/// filled by Qwen3Model::forward: what the `global` load-balancing loss, the logged aux / z
/// values and the expert load need.
struct MoeStageStats {
  std::vector<double> prob_sum;   ///< [E] sum over MoE layers and real tokens of the softmax probs
  std::vector<int64_t> counts;    ///< [E] routed slots per expert over MoE layers and real tokens
  int64_t n = 0;                  ///< (MoE layers) x (real tokens): transformers' N
  int64_t layers = 0;             ///< MoE layers of the stage
  double aux_per_layer = 0;       ///< sum over layers of Megatron's per-layer aux value (coefficient 1)
  double z = 0;                   ///< sum over layers of the mean z-loss (coefficient 1)
  std::vector<double> reduce_buf; ///< per-layer statistics summed over the tp shards (scratch)
};

/// Everything one micro-batch slot of a stage keeps between its forward and backward.
struct StageActivations {
  int64_t T = 0;                ///< tokens of the micro-batch whose activations are held (0: none)
  float* x0 = nullptr;          ///< [Tl, H] stage input (embedding output or received hidden state)
  std::vector<DecoderLayerActivations> layers;
  float* final_norm = nullptr;  ///< [Tl, H] final RMSNorm output (last stage)
  float* rstd_final = nullptr;  ///< [Tl]
  float* d_final_norm = nullptr;///< [Tl, H] d(loss)/d(final_norm), from the fused head backward (last stage)
  MoeStageStats moe;            ///< MoE models: the router statistics of the micro-batch

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
