// twinkle/kernels/ops.h — the compute ops of a training step, as typed function-pointer tables.
//
// Every op is a struct of function pointers with a registry name (kName). An implementation of an op
// (the `reference` or `fused` CPU set, the CUDA set of src/kernels/cuda, a user's own kernel) fills the struct
// and is registered under (device, implementation name) in twinkle/kernels/registry.h; the model and
// optimizer call ops only through a KernelTable resolved from that registry.
//
// Pointers point into the memory of the table's device (host memory for "cpu", device memory for
// "cuda"), f32 row-major unless stated; an argument documented as host memory (the grouped GEMM's
// counts, the MoE ops' statistics, the RopeTable) is host memory on every device. Signatures are those of
// the CPU kernels in twinkle/kernels/cpu/*.h, whose headers give the full semantics and sources (HF
// transformers Qwen3, Megatron-core, PyTorch). Fused ops name their unfused equivalent below; an
// implementation must agree with the float64 PyTorch references of tests/reference/kernels_ref.py
// (tests/unit/kernels/kernel_conformance.cpp checks every registered implementation).
#pragma once
#include <cstdint>

#include "twinkle/kernels/cpu/rope.h"

namespace twinkle::kernels {

using RopeTable = cpu::RopeTable;

/// torch.nn.Embedding / Megatron VocabParallelEmbedding lookup (twinkle/kernels/cpu/embedding.h).
struct EmbeddingOp {
  static constexpr const char* kName = "embedding";
  /// out [T, H] = table[ids - vstart] (zero rows for ids outside [vstart, vstart + Vl)); ids pre-validated.
  void (*forward)(const float* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t vstart,
                  int64_t Vl);
  /// dtable [Vl, H] += scatter of dout [T, H] at in-shard ids (deterministic).
  void (*backward)(const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H, int64_t vstart,
                   int64_t Vl);
};

/// HF Qwen3RMSNorm (twinkle/kernels/cpu/rmsnorm.h): y = w * x * rsqrt(mean(x^2) + eps).
struct RmsNormOp {
  static constexpr const char* kName = "rms_norm";
  /// x, y [rows, dim] (y may alias x); w [dim]; rstd [rows] saved for backward.
  void (*forward)(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps);
  /// dx [rows, dim] OVERWRITTEN (may alias dy); dw [dim] ACCUMULATED (may be null).
  void (*backward)(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                   int64_t rows, int64_t dim);
};

/// Residual add + RMSNorm (the pre-norm block boundary h = x + r; y = RMSNorm(h); MindSpeed's
/// npu_add_rms_norm contract). Unfused: add, then rms_norm.
struct AddRmsNormOp {
  static constexpr const char* kName = "add_rms_norm";
  /// h [rows, dim] = x + r (h may alias x or r); y = w * h * rstd; rstd [rows].
  void (*forward)(const float* x, const float* r, float* h, const float* w, float* y, float* rstd, int64_t rows,
                  int64_t dim, float eps);
  /// Given the saved h and rstd, the gradient dy of y and dres of h from the residual path:
  /// dh = rms_norm backward(dy) + dres, OVERWRITTEN (may alias dres); dw ACCUMULATED (may be null).
  /// dh is the gradient of both x and r.
  void (*backward)(const float* h, const float* w, const float* rstd, const float* dy, const float* dres, float* dh,
                   float* dw, int64_t rows, int64_t dim);
};

/// Qwen3's per-head q_norm / k_norm followed by RoPE (HF Qwen3Attention.forward:
/// apply_rotary_pos_emb(q_norm(q), k_norm(k))), one pass per head row. Unfused: rms_norm on
/// [tokens*heads, head_dim] rows, then rope.
struct QkNormRopeOp {
  static constexpr const char* kName = "qk_norm_rope";
  /// x, y [tokens, heads, head_dim] (y may alias x); w [head_dim]; rstd [tokens*heads]; pos [tokens].
  /// Throws twinkle::Error (naming the token) if a position is outside the table.
  void (*forward)(const float* x, const float* w, float* y, float* rstd, const int32_t* pos, const RopeTable& t,
                  int64_t tokens, int64_t heads, int64_t head_dim, float eps);
  /// dx OVERWRITTEN (may alias dy); dw ACCUMULATED (may be null). x is the forward's input (pre-norm).
  void (*backward)(const float* x, const float* w, const float* rstd, const int32_t* pos, const RopeTable& t,
                   const float* dy, float* dx, float* dw, int64_t tokens, int64_t heads, int64_t head_dim);
};

/// HF apply_rotary_pos_emb, in place (twinkle/kernels/cpu/rope.h).
struct RopeOp {
  static constexpr const char* kName = "rope";
  void (*forward)(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim);
  void (*backward)(float* dx, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads,
                   int64_t head_dim);
};

/// HF Qwen3MLP act: h = silu(gate) * up (twinkle/kernels/cpu/swiglu.h).
struct SwigluOp {
  static constexpr const char* kName = "swiglu";
  void (*forward)(const float* gate, const float* up, float* h, int64_t n);
  /// dgate, dup OVERWRITTEN.
  void (*backward)(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n);
};

/// gate_proj and up_proj as ONE GEMM over the concatenated weight Wgu [2I, H] (gate rows, then up rows),
/// then SwiGLU on its [T, 2I] output with MindSpeed's npu_swiglu contract (silu(first half) * second
/// half). Unfused: linear(gate), linear(up), swiglu.
struct GateUpSwigluOp {
  static constexpr const char* kName = "gate_up_swiglu";
  /// gu [T, 2I] = X [T, H] Wgu^T (saved for backward); a [T, I] = silu(gu[:, :I]) * gu[:, I:].
  void (*forward)(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I, int64_t H);
  /// Given the saved gu and da [T, I]: dgu [T, 2I] (scratch, OVERWRITTEN with the gradient of gu; the
  /// CPU "bf16" set rounds that gradient straight into its bf16 GEMM operand and never touches dgu,
  /// which may then be null; the CUDA one writes it: see uses_dgu), dX [T, H] (OVERWRITTEN unless accumulate_dx), dWgu [2I, H]
  /// ACCUMULATED (skipped when null).
  void (*backward)(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu, float* dX,
                   float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx);
  /// Whether backward writes dgu: false lets a caller pass null instead of a [T, 2I] fp32 buffer.
  bool uses_dgu;
};

/// Causal GQA attention over packed sequences (twinkle/kernels/cpu/attention.h; SDPA semantics);
/// window > 0: a query sees only its last `window` keys (transformers' sliding window), 0 = none.
struct AttentionOp {
  static constexpr const char* kName = "attention";
  /// q [T, Hq, D], k, v [T, Hkv, D] -> out [T, Hq, D], lse [T, Hq]; T = cu_seqlens[n_seqs].
  void (*forward)(const float* q, const float* k, const float* v, float* out, float* lse, const int32_t* cu_seqlens,
                  int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window);
  /// dq, dk, dv OVERWRITTEN.
  void (*backward)(const float* q, const float* k, const float* v, const float* out, const float* lse,
                   const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens, int64_t n_seqs,
                   int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window);
};

/// torch.nn.functional.linear without bias, weights in HF [out, in] layout (twinkle/kernels/cpu/gemm.h).
struct LinearOp {
  static constexpr const char* kName = "linear";
  /// Y [M, N] (+)= X [M, K] W[N, K]^T.
  void (*forward)(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate);
  /// dX [M, K] (+)= dY W (overwritten unless accumulate_dx); dW [N, K] += dY^T X (skipped when null).
  void (*backward)(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                   int64_t K, bool accumulate_dx);
};

/// Grouped linear: the MoE experts' grouped GEMM (Megatron-core GroupedMLP / TEGroupedLinear, MindSpeed
/// npu_gmm; twinkle/kernels/cpu/grouped_gemm.h): the consecutive row blocks X_e of X [R, K] given by
/// counts [E] (R = sum counts, expert order) use W_e = W + e * w_stride ([N, K], w_stride >= N*K).
struct GroupedLinearOp {
  static constexpr const char* kName = "grouped_linear";
  /// Y_e [counts[e], N] (+)= X_e W_e^T (OVERWRITTEN unless accumulate). Throws twinkle::Error on a count < 0.
  void (*forward)(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E, float* Y,
                  int64_t N, int64_t K, bool accumulate);
  /// dX_e (+)= dY_e W_e (OVERWRITTEN unless accumulate_dx; skipped when dX is null);
  /// dW_e += dY_e^T X_e (skipped when dW is null; an expert without rows leaves dW_e untouched).
  void (*backward)(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                   const float* dY, float* dX, float* dW, int64_t N, int64_t K, bool accumulate_dx);
};

/// Token cross entropy in Megatron's vocab-parallel pieces (twinkle/kernels/cpu/cross_entropy.h).
struct CrossEntropyOp {
  static constexpr const char* kName = "cross_entropy";
  void (*local_max)(const float* logits, int64_t T, int64_t Vl, int64_t valid, float* row_max);
  void (*local_sumexp_target)(const float* logits, const int32_t* labels, const float* global_max, int64_t T,
                              int64_t Vl, int64_t valid, int64_t vstart, float* sum_exp, float* target_logit);
  /// dlogits OVERWRITTEN (may alias logits); row_scale may be null (= 1).
  void (*backward)(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl, int64_t valid,
                   int64_t vstart, const float* row_scale, float* dlogits);
  /// Single shard: sum over non-ignored rows of -log softmax; lse [T]. Throws on a label outside [0, V).
  double (*forward)(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse);
};

/// lm head + cross entropy without materializing the [T, V] logits at once (single vocab shard;
/// Liger / Apple Cut-Cross-Entropy idea). Unfused: linear, cross_entropy, linear backward.
struct LinearCrossEntropyOp {
  static constexpr const char* kName = "linear_cross_entropy";
  /// X [T, H], W [V, H], labels [T] (global ids or -100). Returns the SUM of the token losses (as
  /// CrossEntropyOp::forward on X W^T) and writes lse [T]. When dX is non-null also the backward of
  /// grad_scale * (that sum): dX [T, H] OVERWRITTEN, dW [V, H] ACCUMULATED (dW may be null).
  /// chunk_rows bounds the rows whose logits exist at once (<= 0: the implementation's choice).
  /// Throws twinkle::Error on a label outside [0, V) other than -100.
  double (*forward_backward)(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H,
                             float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows);
};

/// torch.optim.AdamW step (twinkle/kernels/cpu/adamw.h); the gradient enters as g * grad_scale (the
/// clip_grad_norm_ coefficient, 1 for none), bit-identical to scaling g in place first.
struct AdamwOp {
  static constexpr const char* kName = "adamw";
  void (*step)(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, int64_t step, float grad_scale);
};

/// Gradient-norm pieces of torch.nn.utils.clip_grad_norm_ (twinkle/kernels/cpu/reduce.h).
struct NormsOp {
  static constexpr const char* kName = "norms";
  /// sum x^2 in double, independent of the thread count.
  double (*sum_squares)(const float* x, int64_t n);
  /// x *= s.
  void (*scale)(float* x, int64_t n, float s);
};

/// Element-wise adds (residual gradients, accumulation) and the bias of a linear layer
/// (torch.nn.functional.linear's `+ bias` and its gradient; Megatron's ColumnParallelLinear /
/// RowParallelLinear add it after the GEMM, parallel/column_parallel_linear.h).
struct AddOp {
  static constexpr const char* kName = "add";
  /// y += x.
  void (*add_inplace)(float* y, const float* x, int64_t n);
  /// out = a + b (out may alias a or b).
  void (*add)(float* out, const float* a, const float* b, int64_t n);
  /// y[r, c] += b[c] for r < rows: y [rows, cols] row-major f32, b [cols] f32 (the bias broadcast over tokens).
  void (*add_bias_rows)(float* y, const float* b, int64_t rows, int64_t cols);
  /// db[c] += sum_r dy[r, c]: dy [rows, cols] f32, db [cols] f32; each column summed over r = 0..rows-1 in
  /// order in double, then added (bias gradients are sums of many terms that largely cancel, e.g.
  /// k_proj.bias under the q/k norms). Nothing when db is null (a frozen bias).
  void (*bias_grad_rows)(const float* dy, float* db, int64_t rows, int64_t cols);
};

/// PEFT's LoRA term of a linear layer, y += scaling * (dropout(x) A^T) B^T (peft/tuners/lora/layer.py
/// Linear.forward: result + lora_B(lora_A(dropout(x))) * scaling), and lora_dropout with masks that do not
/// depend on the layout (the rule of twinkle/parallel/lora_dropout.h). x [T, in], A [r, in], B [out, r]
/// (HF / PEFT layouts), f32 row-major; h, dh [T, r] are the caller's scratch. LoRA's GEMMs stay fp32 under
/// mixed precision (not in kernels::mixed_precision_ops()). Callers: twinkle/parallel/lora.h.
struct LoraOp {
  static constexpr const char* kName = "lora";
  /// m [T, in_l] (uint8, 1 = kept): element (t, i) of module `module_key` is kept iff
  /// splitmix64(splitmix64(splitmix64(seed ^ module_key) ^ splitmix64(token_key[t])) + (feature0 + i) *
  /// 0x9e3779b97f4a7c15) >> 40 >= threshold (threshold = round(p * 2^24); twinkle/core/hash.h's splitmix64);
  /// token_key [T] (u64) are the tokens' global identities (parallel::lora_token_key).
  void (*dropout_mask)(const uint64_t* token_key, int64_t T, uint64_t seed, uint64_t module_key, int64_t feature0,
                       int64_t in_l, uint64_t threshold, uint8_t* m);
  /// xd[i] = m[i] ? x[i] * keep_scale : 0 for i < n (torch.nn.functional.dropout, keep_scale = 1 / (1 - p)).
  void (*dropout_apply)(const float* x, const uint8_t* m, float keep_scale, float* xd, int64_t n);
  /// The dropout's backward: dx[i] += g[i] * keep_scale where m[i] (dx unchanged elsewhere).
  void (*dropout_backward)(const float* g, const uint8_t* m, float keep_scale, float* dx, int64_t n);
  /// h = x A^T (OVERWRITTEN), then y [T, out] += scaling * h B^T.
  void (*forward)(const float* x, const float* A, const float* B, float* h, float* y, int64_t T, int64_t in,
                  int64_t out, int64_t r, float scaling);
  /// Recomputes h = x A^T; dB [out, r] += scaling dy^T h (skipped when null); dh = scaling dy B (OVERWRITTEN);
  /// dA [r, in] += dh^T x (skipped when null); dx [T, in] = dh A (+= when accumulate_dx). dy [T, out].
  void (*backward)(const float* x, const float* A, const float* B, const float* dy, float* h, float* dh, float* dx,
                   bool accumulate_dx, float* dA, float* dB, int64_t T, int64_t in, int64_t out, int64_t r,
                   float scaling);
};

/// The Qwen3-MoE top-k softmax router (twinkle/kernels/cpu/moe_router.h: transformers'
/// Qwen3MoeSparseMoeBlock routing, Megatron-core's topk_softmax_with_capacity; ties to the lower expert
/// index). logits / probs [T, E], topk_idx / topk_w [T, k]; fp32 (i32 indices). Throws twinkle::Error
/// unless T >= 0, E >= 1 and 1 <= k <= E.
struct MoeRouterOp {
  static constexpr const char* kName = "moe_router";
  /// probs = softmax(logits) over all E (sums in double); topk_idx the k largest, descending, ties to the
  /// lower index; topk_w their probabilities, renormalised to sum 1 when norm_topk_prob.
  void (*forward)(const float* logits, float* probs, int32_t* topk_idx, float* topk_w, int64_t T, int64_t E,
                  int64_t k, bool norm_topk_prob);
  /// dlogits [T, E] OVERWRITTEN (may alias dprobs or dlogits_extra): the gradient of dtopk_w [T, k] through the
  /// renormalisation and the full softmax, plus dprobs [T, E] (the aux loss, on the probabilities) through the
  /// softmax, plus dlogits_extra [T, E] (the z-loss) as is; each of the three may be null (= 0).
  void (*backward)(const float* probs, const int32_t* topk_idx, const float* topk_w, const float* dtopk_w,
                   const float* dprobs, const float* dlogits_extra, float* dlogits, int64_t T, int64_t E, int64_t k,
                   bool norm_topk_prob);
};

/// Dropless MoE token permutation in Megatron-core's order (twinkle/kernels/cpu/moe_permute.h: rows sorted
/// by expert, tokens ascending inside an expert; moe_utils.py permute / unpermute) and transformers'
/// probability-weighted combine. Slot s = t*k + j is token t's j-th routed copy; R = T*k rows.
struct MoePermuteOp {
  static constexpr const char* kName = "moe_permute";
  /// The routing plan of topk_idx [T, k] (entries in [0, E), distinct per token, else twinkle::Error naming
  /// the token): row_of_slot [R], slot_of_row [R] (i32, the model's device) and counts [E] (i64 rows per
  /// expert, in HOST memory on every device: the grouped GEMM's counts are host values; a device
  /// implementation copies them back and so synchronizes, as Megatron's tokens_per_expert does).
  void (*sort_by_expert)(const int32_t* topk_idx, int64_t T, int64_t k, int64_t E, int64_t* counts,
                         int32_t* row_of_slot, int32_t* slot_of_row);
  /// out [rows, H] = x [slot_of_row[r] / k] (rows = T*k).
  void (*permute_forward)(const float* x, const int32_t* slot_of_row, float* out, int64_t rows, int64_t k, int64_t H);
  /// dx [T, H] = sum_j dout[row_of_slot[t*k + j]] in j order (OVERWRITTEN, or added to when accumulate).
  void (*permute_backward)(const float* dout, const int32_t* row_of_slot, float* dx, int64_t T, int64_t k, int64_t H,
                           bool accumulate);
  /// out [T, H] = sum_j topk_w[t, j] * y[row_of_slot[t*k + j]] (j in order, float sums; OVERWRITTEN).
  void (*unpermute_forward)(const float* y, const int32_t* row_of_slot, const float* topk_w, float* out, int64_t T,
                            int64_t k, int64_t H);
  /// dy[row_of_slot[s]] = topk_w[s] * dout[t] ([R, H] OVERWRITTEN); dtopk_w[s] = <dout[t], y[row_of_slot[s]]>
  /// ([T, k] OVERWRITTEN, dot products in double).
  void (*unpermute_backward)(const float* y, const int32_t* row_of_slot, const float* topk_w, const float* dout,
                             float* dy, float* dtopk_w, int64_t T, int64_t k, int64_t H);
  /// out [rows] = key[slot_of_row[r] / k] (u64: the LoRA dropout token keys of the permuted rows).
  void (*permute_keys)(const uint64_t* key, const int32_t* slot_of_row, uint64_t* out, int64_t rows, int64_t k);
};

/// The router losses and load statistics (twinkle/kernels/cpu/moe_aux_loss.h: Switch / GShard load
/// balancing in transformers' and Megatron-core's forms, ST-MoE's z-loss). token_mask [T] (u8, 1 = real
/// token) lives on the model's device and may be null (every token real); probs / logits [T, E] as the
/// router's. Statistics the host reduces (prob_sum, counts) are HOST arrays on every device.
struct MoeRouterLossOp {
  static constexpr const char* kName = "moe_router_loss";
  /// Over the real tokens: counts[e] += slots routed to e, prob_sum[e] += sum_t probs[t, e] (tokens in
  /// order, in double; both host, NOT cleared). Returns the number of real tokens.
  int64_t (*routing_stats)(const float* probs, const int32_t* topk_idx, const uint8_t* token_mask, int64_t T,
                           int64_t E, int64_t k, double* prob_sum, int64_t* counts);
  /// dprobs[t, e] += float(coeff_scale * counts[e]) for the real tokens; counts [E] host i64.
  void (*aux_loss_backward)(const int64_t* counts, const uint8_t* token_mask, int64_t T, int64_t E,
                            double coeff_scale, float* dprobs);
  /// lse [T] = logsumexp_e logits[t, e] (every token); returns sum over the real tokens of lse^2, summed in
  /// double (the summation order is the implementation's).
  double (*z_loss_forward)(const float* logits, const uint8_t* token_mask, int64_t T, int64_t E, float* lse);
  /// dlogits[t, e] += float(2 * scale * lse[t] * probs[t, e]) for the real tokens.
  void (*z_loss_backward)(const float* probs, const float* lse, const uint8_t* token_mask, int64_t T, int64_t E,
                          double scale, float* dlogits);
};

/// Context parallelism's ring attention pieces (twinkle/kernels/cpu/attention_block.h: FlashAttention-2 on
/// one query block against one key block with explicit global positions and segment ids; Liu et al. 2023's
/// log-sum-exp merge; Megatron-core / TransformerEngine context_parallel.py AttnFuncWithCPAndKVP2P). Query i
/// sees key j iff q_seg[i] == k_seg[j], k_pos[j] <= q_pos[i] and (window 0 or q_pos[i] - k_pos[j] < window).
/// q / out [Tq, Hq, D], k / v [Tk, Hkv, D], lse / delta [Tq, Hq] f32; seg / pos i32; all on the model's device.
/// Throws twinkle::Error if Hq % Hkv != 0, a size is negative, a head size <= 0 or window < 0.
struct AttentionBlockOp {
  static constexpr const char* kName = "attention_block";
  /// out, lse OVERWRITTEN; a query that sees no key of the block gets out = 0, lse = -inf.
  void (*forward)(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                  const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, float* out, float* lse,
                  int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window);
  /// Given the FINAL lse and delta of the queries: dq, dk, dv ACCUMULATED (dk / dv summed over a group's heads).
  void (*backward)(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                   const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, const float* lse,
                   const float* delta, const float* dout, float* dq, float* dk, float* dv, int64_t Hq, int64_t Hkv,
                   int64_t D, float scale, int64_t window);
  /// lse' = log(exp(lse) + exp(lse_b)), out' = out exp(lse - lse') + out_b exp(lse_b - lse'), in place on
  /// out [T, H, D] / lse [T, H]; an lse of -inf is an empty partial.
  void (*lse_merge)(float* out, float* lse, const float* out_b, const float* lse_b, int64_t T, int64_t H, int64_t D);
  /// delta [T, H] = sum_d dout * out (FlashAttention-2's D_i), OVERWRITTEN.
  void (*softmax_delta)(const float* out, const float* dout, float* delta, int64_t T, int64_t H, int64_t D);
};

/// Gated DeltaNet's short causal depthwise convolution with SiLU on packed sequences
/// (twinkle/kernels/cpu/causal_conv1d.h: transformers' Qwen3_5GatedDeltaNet conv1d + causal_conv1d_fn, FLA /
/// causal-conv1d's varlen path). x, y [T, C] token-major f32, w [C, K], bias [C] or null; a segment of
/// cu_seqlens [n_seqs + 1] sees none of the tokens before its start. CPU only so far (cpu_only_ops()).
struct CausalConv1dOp {
  static constexpr const char* kName = "causal_conv1d";
  /// y [T, C] OVERWRITTEN (no alias of x); silu: SiLU after the sum.
  void (*forward)(const float* x, const float* w, const float* bias, float* y, const int32_t* cu_seqlens,
                  int64_t n_seqs, int64_t C, int64_t K, bool silu);
  /// dx [T, C] OVERWRITTEN; dw [C, K], dbias [C] ACCUMULATED (each may be null).
  void (*backward)(const float* x, const float* w, const float* bias, const float* dy, float* dx, float* dw,
                   float* dbias, const int32_t* cu_seqlens, int64_t n_seqs, int64_t C, int64_t K, bool silu);
};

/// The gated delta rule and its gates (twinkle/kernels/cpu/gated_delta_rule.h: transformers'
/// torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule and Qwen3_5GatedDeltaNet's g / beta;
/// FLA's chunk_gated_delta_rule). q, k [T, Hk, Dk], v / out [T, Hv, Dv] (Hv % Hk == 0, value head h reads
/// key head h / (Hv / Hk)), g, beta [T, Hv], states [n_seqs, Hv, Dk, Dv]; the state restarts at every
/// segment of cu_seqlens [n_seqs + 1]. The "reference" set runs the token recurrence in double, "fused"
/// the chunked WY form (64-token chunks) on GEMMs. CPU only so far (cpu_only_ops()).
struct GatedDeltaRuleOp {
  static constexpr const char* kName = "gated_delta_rule";
  /// out OVERWRITTEN; h0 (initial states) may be null (zero); ht (final states) written when non-null.
  void (*forward)(const float* q, const float* k, const float* v, const float* g, const float* beta,
                  const float* h0, float* out, float* ht, const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hk,
                  int64_t Hv, int64_t Dk, int64_t Dv, float scale, bool qk_l2norm);
  /// dq, dk, dv, dg, dbeta OVERWRITTEN; dh0 OVERWRITTEN when non-null; dht may be null (= 0).
  void (*backward)(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   const float* h0, const float* dout, const float* dht, float* dq, float* dk, float* dv, float* dg,
                   float* dbeta, float* dh0, const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hk, int64_t Hv,
                   int64_t Dk, int64_t Dv, float scale, bool qk_l2norm);
  /// g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b); a, b, g, beta [T, H], A_log, dt_bias [H].
  void (*gates_forward)(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,
                        float* beta, int64_t T, int64_t H);
  /// da, db OVERWRITTEN; dA_log, ddt_bias ACCUMULATED (each may be null).
  void (*gates_backward)(const float* a, const float* b, const float* A_log, const float* dt_bias, const float* dg,
                         const float* dbeta, float* da, float* db, float* dA_log, float* ddt_bias, int64_t T,
                         int64_t H);
};

/// transformers' Qwen3_5RMSNormGated (twinkle/kernels/cpu/gated_rmsnorm.h): y = w * x * rsqrt(mean(x^2) + eps)
/// * silu(z) on rows of head_v_dim, the weight as is (not 1 + w). CPU only so far (cpu_only_ops()).
struct GatedRmsNormOp {
  static constexpr const char* kName = "gated_rms_norm";
  /// x, z, y [rows, dim] (y may alias x or z); w [dim]; rstd [rows] saved for the backward.
  void (*forward)(const float* x, const float* z, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,
                  float eps);
  /// dx, dz OVERWRITTEN (dx may alias dy); dw ACCUMULATED (may be null).
  void (*backward)(const float* x, const float* z, const float* w, const float* rstd, const float* dy, float* dx,
                   float* dz, float* dw, int64_t rows, int64_t dim);
};

/// Every op above, once: X(op struct, KernelTable field). The registry's OpImpl variant, op_names(), the
/// KernelTable fields and KernelTable::set are generated from this list (twinkle/kernels/registry.h), so a
/// new op is its struct above, one entry here and its implementations (each kernel set's register list).
// clang-format off
#define TWINKLE_KERNEL_OPS(X)                                                                                    \
  X(EmbeddingOp, embedding) X(RmsNormOp, rms_norm) X(AddRmsNormOp, add_rms_norm) X(QkNormRopeOp, qk_norm_rope)  \
  X(RopeOp, rope) X(SwigluOp, swiglu) X(GateUpSwigluOp, gate_up_swiglu) X(AttentionOp, attention)               \
  X(LinearOp, linear) X(GroupedLinearOp, grouped_linear) X(CrossEntropyOp, cross_entropy)                       \
  X(LinearCrossEntropyOp, linear_cross_entropy) X(AdamwOp, adamw) X(NormsOp, norms) X(AddOp, add)              \
  X(LoraOp, lora) X(MoeRouterOp, moe_router) X(MoePermuteOp, moe_permute) X(MoeRouterLossOp, moe_router_loss)   \
  X(AttentionBlockOp, attention_block) X(CausalConv1dOp, causal_conv1d) X(GatedDeltaRuleOp, gated_delta_rule)    \
  X(GatedRmsNormOp, gated_rms_norm)
// clang-format on

}  // namespace twinkle::kernels
