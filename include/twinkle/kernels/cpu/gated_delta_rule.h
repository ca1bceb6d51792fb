// twinkle/kernels/cpu/gated_delta_rule.h — the gated delta rule of a Gated DeltaNet layer (Yang, Kautz &
// Hatamizadeh 2024, "Gated Delta Networks", arXiv:2412.06464) in its chunked form, forward and backward,
// on packed sequences, fp32; and the layer's decay / learning-rate gates.
//
// Semantics: transformers' torch_chunk_gated_delta_rule (models/qwen3_5/modeling_qwen3_5.py, the same in
// qwen3_next; FLA's chunk_gated_delta_rule). Per value head h of one sequence, with its key head
// kh = h / (Hv / Hk) (transformers repeat_interleave's q and k over dim 2: consecutive value heads share a
// key head), q_t, k_t the (optionally L2-normalised) query / key, q_t scaled by `scale`, and the state
// S [Dk, Dv] starting at h0 (or 0):
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T,   o_t = S_t^T q_t.
// qk_l2norm: x / sqrt(sum x^2 + 1e-6) on every q and k head row (transformers' l2norm with
// use_qk_l2norm_in_kernel=True, which Qwen3.5 passes), before the scale (Qwen3.5: 1 / sqrt(Dk)).
// Chunked form (chunk size 64 as FLA / transformers; chunks start at each sequence's start, so every
// sequence may end in a shorter tail chunk): inside a chunk of L tokens, with gamma = cumsum(g),
// Gamma_ij = exp(gamma_i - gamma_j) (i >= j), the WY / UT representation
//   T = (I + strict_lower(diag(beta) K K^T * Gamma))^-1,  U = T diag(beta) V,  W = T diag(beta exp(gamma)) K,
//   Vn = U - W S0,  O = diag(exp(gamma)) Q S0 + lower(Q K^T * Gamma) Vn,
//   S1 = exp(gamma_L) S0 + (diag(exp(gamma_L - gamma)) K)^T Vn
// every product a GEMM (twinkle/kernels/cpu/gemm.h, one thread per (sequence, value head) task). The
// backward differentiates the same chunk products in reverse chunk order, recomputing the chunk-start
// states first (FLA's chunk_gated_delta_rule_bwd recomputes h likewise).
// Packed rows: the state restarts at every segment of cu_seqlens (h0 of that segment, or 0), as FLA's
// cu_seqlens path; tokens outside every segment are not touched.
// Layouts (transformers' [B, T, H, D] with the batch folded into the token axis: B rows of length L are
// cu_seqlens = 0, L, 2L, ...): q, k [T, Hk, Dk]; v, out [T, Hv, Dv]; g, beta [T, Hv]; states
// [n_seqs, Hv, Dk, Dv]; all f32 row-major.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// The chunk length of the fused kernels (FLA's BT, transformers' chunk_size default).
constexpr int64_t kGdnChunk = 64;

/// Forward. g is the log decay (<= 0), beta the write strength (transformers passes g and beta =
/// sigmoid(b) as computed by gdn_gates_forward). h0 [n_seqs, Hv, Dk, Dv] or null (zero initial state);
/// out OVERWRITTEN; ht [n_seqs, Hv, Dk, Dv] receives each sequence's final state when non-null
/// (output_final_state). Throws twinkle::Error naming the argument unless Hk >= 1, Hv % Hk == 0, Dk, Dv >= 1,
/// n_seqs >= 0 and cu_seqlens is non-decreasing.
void gated_delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              const float* h0, float* out, float* ht, const int32_t* cu_seqlens, int64_t n_seqs,
                              int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, float scale, bool qk_l2norm);

/// Backward of gated_delta_rule_forward given its inputs, dout [T, Hv, Dv] and dht (the gradient of the
/// final states, or null = 0): dq, dk [T, Hk, Dk] (summed over the value heads of a key head, in head
/// order), dv [T, Hv, Dv], dg, dbeta [T, Hv] OVERWRITTEN on the segments' tokens; dh0 [n_seqs, Hv, Dk, Dv]
/// OVERWRITTEN when non-null. Gradients are those of the unnormalised q and k when qk_l2norm. No output
/// aliases an input. Same errors as the forward.
void gated_delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                               const float* h0, const float* dout, const float* dht, float* dq, float* dk, float* dv,
                               float* dg, float* dbeta, float* dh0, const int32_t* cu_seqlens, int64_t n_seqs,
                               int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, float scale, bool qk_l2norm);

/// The gates of Qwen3_5GatedDeltaNet.forward, per token t and value head h (a, b [T, H] are in_proj_a /
/// in_proj_b outputs; A_log, dt_bias [H] parameters):
///   g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]),  beta[t, h] = sigmoid(b[t, h])
/// with torch.nn.functional.softplus's threshold (x > 20: x). g, beta [T, H] OVERWRITTEN.
void gdn_gates_forward(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,
                       float* beta, int64_t T, int64_t H);

/// Backward of gdn_gates_forward given dg, dbeta [T, H]: da, db [T, H] OVERWRITTEN; dA_log, ddt_bias [H]
/// ACCUMULATED (summed over tokens in order in double; each may be null: frozen).
void gdn_gates_backward(const float* a, const float* b, const float* A_log, const float* dt_bias, const float* dg,
                        const float* dbeta, float* da, float* db, float* dA_log, float* ddt_bias, int64_t T,
                        int64_t H);

}  // namespace twinkle::kernels::cpu
