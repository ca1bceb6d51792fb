// twinkle/kernels/cpu/causal_conv1d.h — the short causal depthwise convolution of a Gated DeltaNet layer
// (with SiLU), forward and backward, on packed sequences; fp32 data, fp32 sums of K products.
//
// Semantics: transformers' Qwen3_5GatedDeltaNet (models/qwen3_5/modeling_qwen3_5.py; the same in
// qwen3_next) runs causal_conv1d_fn: torch.nn.functional.conv1d(x, weight.unsqueeze(1), bias,
// padding=K-1, groups=C)[..., :T] followed by SiLU (config.hidden_act), on the [B, C, T] transpose of the
// in_proj_qkv output; the layer's nn.Conv1d has bias=False and kernel_size = linear_conv_kernel_dim (4).
// Per channel c and token t of one sequence:
//   y[t, c] = act(bias[c] + sum_{j<K} w[c, j] * x[t - (K-1) + j, c]),   x[t' < 0] = 0.
// Packed rows: the tokens of each segment [cu_seqlens[s], cu_seqlens[s+1]) see only their own segment's
// earlier tokens (the zero padding restarts at every segment start), as FLA / causal-conv1d's varlen
// path (seq_idx / cu_seqlens) does for a packed batch. Tokens outside every segment are not touched.
// Layout: token-major x, y [T, C] (the projection's output as it comes from the GEMM, no transpose).
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Forward. x, y [T, C] f32 row-major (y must not alias x); w [C, K] (HF conv1d.weight [C, 1, K]);
/// bias [C] or null (Qwen3.5: null); silu: apply SiLU (HF activation "silu") after the sum, else identity.
/// cu_seqlens [n_seqs + 1] i32, non-decreasing. Throws twinkle::Error naming the argument for K < 1, C < 0,
/// n_seqs < 0 or decreasing cu_seqlens.
void causal_conv1d_forward(const float* x, const float* w, const float* bias, float* y, const int32_t* cu_seqlens,
                           int64_t n_seqs, int64_t C, int64_t K, bool silu);

/// Backward of causal_conv1d_forward given x and dy [T, C] (the pre-activation is recomputed):
/// dx [T, C] OVERWRITTEN on the segments' tokens (must not alias dy or x); dw [C, K] and dbias [C]
/// ACCUMULATED (each may be null: frozen). Weight sums over tokens: fixed blocks of tokens summed in
/// float, the blocks added in order in double (independent of the thread count).
void causal_conv1d_backward(const float* x, const float* w, const float* bias, const float* dy, float* dx, float* dw,
                            float* dbias, const int32_t* cu_seqlens, int64_t n_seqs, int64_t C, int64_t K, bool silu);

}  // namespace twinkle::kernels::cpu
