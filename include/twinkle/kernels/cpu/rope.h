// twinkle/kernels/cpu/rope.h — rotary position embedding, HF rotate_half convention.
//
// Semantics: HF apply_rotary_pos_emb / rotate_half (transformers/models/qwen3/modeling_qwen3.py)
// and Qwen3RotaryEmbedding. For pair i in [0, D/2):
//   angle = pos * inv_freq_i; c = cos(angle) * s_att, s = sin(angle) * s_att; x1 = x[i], x2 = x[i+D/2];
//   out[i] = x1*c - x2*s; out[i+D/2] = x2*c + x1*s.
// inv_freq and the attention scaling s_att come from the RoPE variant (transformers 5
// modeling_rope_utils.py, ROPE_INIT_FUNCTIONS): default inv_freq_i = theta^(-2i/D), s_att = 1;
// linear, dynamic (NTK) and yarn, see RopeVariant.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
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

/// A RoPE variant with its parameters as transformers 5 resolves them (modeling_rope_utils.py
/// _compute_{linear_scaling,dynamic_ntk,yarn}_parameters; the config fields are resolved by
/// twinkle/io/model_config.h).
struct RopeVariant {
  std::string type = "default";  ///< "default" | "linear" | "dynamic" | "yarn"
  double factor = 1.0;
  int64_t max_position_embeddings = 0;           ///< dynamic: the scale's reference length
  int64_t original_max_position_embeddings = 0;  ///< yarn: pre-training context length
  std::optional<double> attention_factor;        ///< yarn: explicit s_att
  std::optional<double> mscale, mscale_all_dim;  ///< yarn: s_att = m(f, mscale) / m(f, mscale_all_dim) when both non-zero
  double beta_fast = 32.0, beta_slow = 1.0;      ///< yarn ramp bounds (rotations)
  bool truncate = true;                          ///< yarn: floor/ceil the correction range
};

/// inv_freq [head_dim/2] (float32 arithmetic, as transformers) and the attention scaling s_att:
///  * default: inv_freq_i = 1 / theta^(2i/D), s_att = 1.
///  * linear:  default / factor, s_att = 1.
///  * dynamic: theta' = theta * (factor*L/M - (factor-1))^(D/(D-2)) with L = max(seq_len, M),
///    M = max_position_embeddings (so for every sequence with positions < M it equals
///    default: transformers only recomputes inv_freq once max(position)+1 > M); s_att = 1.
///  * yarn: ramp r_i = clamp((i - lo)/(hi - lo), 0, 1) over [lo, hi] = the correction range
///    of beta_fast / beta_slow rotations at original_max_position_embeddings
///    (dim * ln(orig / (rot*2*pi)) / (2 ln theta), floored/ceiled when truncate, clipped to
///    [0, D-1]; hi += 0.001 when lo == hi); inv_freq = interp*r + extrap*(1-r) with extrap =
///    default, interp = default/factor; s_att = attention_factor, else
///    m(factor, mscale)/m(factor, mscale_all_dim) when both are non-zero, else m(factor), with
///    m(f, s) = 1 if f <= 1 else 0.1*s*ln(f) + 1.
/// Throws twinkle::Error naming the variant for an unknown type, factor <= 0, head_dim odd or
/// < 4 for dynamic (exponent D/(D-2)), or yarn without original_max_position_embeddings.
std::pair<std::vector<float>, float> rope_frequencies(const RopeVariant& v, int64_t head_dim, double theta,
                                                     int64_t seq_len = 0);

/// Table of `v` for positions [0, max_pos): cos/sin of float32(pos) * inv_freq, each
/// multiplied (in float32) by s_att, as Qwen3RotaryEmbedding.forward. Errors as above.
RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, double theta, const RopeVariant& v);

/// x [tokens, heads, head_dim] f32 rotated IN PLACE; pos [tokens] positions (int32).
/// Throws twinkle::Error (naming the token index and position) if a pos < 0 or >= t.max_pos,
/// or if head_dim != t.head_dim.
void rope_forward(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim);

/// Backward: dx [tokens, heads, head_dim] in place gets the transpose of the forward map
/// (angle -> -angle; the same s_att scale). Same errors as rope_forward.
void rope_backward(float* dx, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads,
                   int64_t head_dim);

}  // namespace twinkle::kernels::cpu
