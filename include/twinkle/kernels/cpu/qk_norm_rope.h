// twinkle/kernels/cpu/qk_norm_rope.h — Qwen3's per-head q_norm / k_norm followed by RoPE in one pass
// over each head row (HF transformers/models/qwen3/modeling_qwen3.py, Qwen3Attention.forward:
// q = q_norm(q.view(hidden_shape)); apply_rotary_pos_emb(q, k, cos, sin)). Equals rmsnorm_forward on
// [tokens*heads, head_dim] rows followed by rope_forward (rmsnorm.h, rope.h), same fp32 rounding.
#pragma once
#include <cstdint>

#include "twinkle/kernels/cpu/rope.h"

namespace twinkle::kernels::cpu {

/// x, y [tokens, heads, head_dim] (y may alias x); w [head_dim]; rstd [tokens*heads] saved; pos [tokens].
/// Throws twinkle::Error (naming the token and position) if a position is outside [0, t.max_pos) or
/// head_dim != t.head_dim.
void qk_norm_rope_forward(const float* x, const float* w, float* y, float* rstd, const int32_t* pos,
                          const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim, float eps);

/// Backward given the forward's input x (pre-norm), rstd and dy: the inverse rotation of dy, then the
/// RMSNorm backward. dx OVERWRITTEN (may alias dy); dw ACCUMULATED (may be null). Same errors.
void qk_norm_rope_backward(const float* x, const float* w, const float* rstd, const int32_t* pos, const RopeTable& t,
                           const float* dy, float* dx, float* dw, int64_t tokens, int64_t heads, int64_t head_dim);

}  // namespace twinkle::kernels::cpu
