// twinkle/kernels/cpu/rope.h — rotary position embedding, HF rotate_half convention.
//
// Semantics: HF apply_rotary_pos_emb / rotate_half (transformers/models/qwen3/modeling_qwen3.py)
// with the default rope (Qwen3RotaryEmbedding, rope_type "default"). For pair i in [0, D/2):
//   inv_freq_i = theta^(-2i/D); angle = pos * inv_freq_i; x1 = x[i], x2 = x[i+D/2];
//   out[i] = x1*cos - x2*sin; out[i+D/2] = x2*cos + x1*sin.
#pragma once
#include <cstdint>
#include <vector>

namespace twinkle::kernels::cpu {

/// Precomputed cos/sin, each [max_pos, head_dim/2] row-major.
struct RopeTable {
  int64_t max_pos = 0, head_dim = 0;
  std::vector<float> cos, sin;
};

/// Builds the table the way HF does: inv_freq computed in float32 as 1/(theta^(arange(0,D,2)/D)),
/// freqs = float32(pos) * inv_freq in float32, then cos/sin (of the float32 angle).
/// Throws twinkle::Error if head_dim is odd or <= 0, or max_pos < 0.
RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, double theta);

/// x [tokens, heads, head_dim] f32 rotated IN PLACE; pos [tokens] positions (int32).
/// Throws twinkle::Error (naming the token index and position) if a pos < 0 or >= t.max_pos,
/// or if head_dim != t.head_dim.
void rope_forward(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim);

/// Backward: dx [tokens, heads, head_dim] in place gets the transpose (= inverse) rotation
/// (angle -> -angle). Same errors as rope_forward.
void rope_backward(float* dx, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads,
                   int64_t head_dim);

}  // namespace twinkle::kernels::cpu
