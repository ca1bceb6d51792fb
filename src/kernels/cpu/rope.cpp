#include "twinkle/kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu {

namespace {

// 1 / theta^(arange(0, D, 2) / D), every step in float32 (transformers _compute_default_rope_parameters).
std::vector<float> default_inv_freq(int64_t head_dim, double theta) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float pw = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(1.0 / static_cast<double>(pw));
  }
  return inv_freq;
}

// YaRN's m(f, s) (transformers get_mscale).
double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

}  // namespace

std::pair<std::vector<float>, float> rope_frequencies(const RopeVariant& v, int64_t head_dim, double theta,
                                                      int64_t seq_len) {
  check(head_dim > 0 && head_dim % 2 == 0,
        "rope_frequencies: head_dim must be positive and even, got " + std::to_string(head_dim));
  check(theta > 0, "rope_frequencies: rope_theta must be > 0");
  const std::string what = "rope_frequencies: rope_type '" + v.type + "'";
  if (v.type == "default") return {default_inv_freq(head_dim, theta), 1.0f};
  check(v.type == "linear" || v.type == "dynamic" || v.type == "yarn",
        what + " is not supported (supported: default, linear, dynamic, yarn)");
  check(v.factor > 0, what + ": factor must be > 0, got " + std::to_string(v.factor));
  const int64_t half = head_dim / 2;
  if (v.type == "linear") {  // _compute_linear_scaling_rope_parameters: inv_freq /= factor
    std::vector<float> f = default_inv_freq(head_dim, theta);
    const float fac = static_cast<float>(v.factor);
    for (auto& x : f) x /= fac;
    return {f, 1.0f};
  }
  if (v.type == "dynamic") {  // _compute_dynamic_ntk_parameters
    check(head_dim > 2, what + ": head_dim must be > 2");
    check(v.max_position_embeddings > 0, what + ": max_position_embeddings must be > 0");
    const double M = static_cast<double>(v.max_position_embeddings);
    const double L = std::max(static_cast<double>(seq_len), M);
    const double base = theta * std::pow((v.factor * L / M) - (v.factor - 1.0),
                                         static_cast<double>(head_dim) / static_cast<double>(head_dim - 2));
    return {default_inv_freq(head_dim, base), 1.0f};
  }
  // yarn (_compute_yarn_parameters)
  check(v.original_max_position_embeddings > 0, what + ": original_max_position_embeddings must be > 0");
  const double f = v.factor;
  double att;
  if (v.attention_factor) {
    att = *v.attention_factor;
  } else if (v.mscale && v.mscale_all_dim && *v.mscale != 0 && *v.mscale_all_dim != 0) {
    att = yarn_mscale(f, *v.mscale) / yarn_mscale(f, *v.mscale_all_dim);
  } else {
    att = yarn_mscale(f, 1.0);
  }
  const double dim = static_cast<double>(head_dim);
  const double orig = static_cast<double>(v.original_max_position_embeddings);
  const double pi = 3.14159265358979323846;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(orig / (rotations * 2 * pi))) / (2 * std::log(theta));
  };
  double lo = correction_dim(v.beta_fast), hi = correction_dim(v.beta_slow);
  if (v.truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, dim - 1);
  if (lo == hi) hi += 0.001;  // transformers: prevent the singularity
  const float lo_f = static_cast<float>(lo), span_f = static_cast<float>(hi - lo);
  const float fac = static_cast<float>(f), base = static_cast<float>(theta);
  std::vector<float> out(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float pos_freq = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
    const float extrap = 1.0f / pos_freq;
    const float interp = 1.0f / (fac * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - lo_f) / span_f, 0.0f, 1.0f);
    const float extrap_w = 1.0f - ramp;
    out[static_cast<size_t>(i)] = interp * (1.0f - extrap_w) + extrap * extrap_w;
  }
  return {out, static_cast<float>(att)};
}

RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, double theta, const RopeVariant& v) {
  check(head_dim > 0 && head_dim % 2 == 0,
        "make_rope_table: head_dim must be positive and even, got " + std::to_string(head_dim));
  check(max_pos >= 0, "make_rope_table: max_pos must be >= 0, got " + std::to_string(max_pos));
  check(theta > 0, "make_rope_table: rope_theta must be > 0");
  auto [inv_freq, att] = rope_frequencies(v, head_dim, theta);
  RopeTable t;
  t.max_pos = max_pos;
  t.head_dim = head_dim;
  const int64_t half = head_dim / 2;
  // Qwen3RotaryEmbedding.forward: freqs = pos.float() * inv_freq (float32); cos/sin of that
  // float32 angle, times attention_scaling (float32).
  t.cos.resize(static_cast<size_t>(max_pos * half));
  t.sin.resize(static_cast<size_t>(max_pos * half));
#pragma omp parallel for schedule(static) if (max_pos * half > 65536)
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float ang = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      t.cos[p * half + i] = static_cast<float>(std::cos(static_cast<double>(ang))) * att;
      t.sin[p * half + i] = static_cast<float>(std::sin(static_cast<double>(ang))) * att;
    }
  }
  return t;
}

RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, double theta) {
  return make_rope_table(max_pos, head_dim, theta, RopeVariant{});
}

namespace {

void check_args(const char* fn, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t head_dim) {
  check(head_dim == t.head_dim, std::string(fn) + ": head_dim " + std::to_string(head_dim) +
                                    " differs from the table's " + std::to_string(t.head_dim));
  for (int64_t i = 0; i < tokens; ++i)
    if (pos[i] < 0 || pos[i] >= t.max_pos)
      throw Error(std::string(fn) + ": position " + std::to_string(pos[i]) + " of token " + std::to_string(i) +
                  " is outside the rope table [0, " + std::to_string(t.max_pos) + ")");
}

// sign = +1: forward rotation; -1: transpose (inverse) rotation.
void rope_apply(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim,
                float sign) {
  const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (tokens * heads * head_dim > 32768)
  for (int64_t tk = 0; tk < tokens; ++tk) {
    const float* c = t.cos.data() + static_cast<int64_t>(pos[tk]) * half;
    const float* s = t.sin.data() + static_cast<int64_t>(pos[tk]) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* xa = x + (tk * heads + h) * head_dim;
      float* xb = xa + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xa[i], x2 = xb[i];
        const float sn = sign * s[i];
        xa[i] = x1 * c[i] - x2 * sn;
        xb[i] = x2 * c[i] + x1 * sn;
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim) {
  check_args("rope_forward", pos, t, tokens, head_dim);
  rope_apply(x, pos, t, tokens, heads, head_dim, 1.0f);
}

void rope_backward(float* dx, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads,
                   int64_t head_dim) {
  check_args("rope_backward", pos, t, tokens, head_dim);
  rope_apply(dx, pos, t, tokens, heads, head_dim, -1.0f);
}

}  // namespace twinkle::kernels::cpu
