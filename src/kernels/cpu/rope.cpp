#include "twinkle/kernels/cpu/rope.h"

#include <cmath>
#include <string>

#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu {

RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, double theta) {
  check(head_dim > 0 && head_dim % 2 == 0,
        "make_rope_table: head_dim must be positive and even, got " + std::to_string(head_dim));
  check(max_pos >= 0, "make_rope_table: max_pos must be >= 0, got " + std::to_string(max_pos));
  check(theta > 0, "make_rope_table: rope_theta must be > 0");
  RopeTable t;
  t.max_pos = max_pos;
  t.head_dim = head_dim;
  const int64_t half = head_dim / 2;
  // HF Qwen3RotaryEmbedding (default rope): inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)),
  // every step rounded to float32; freqs = pos.float() * inv_freq (float32); cos/sin of that float32 angle.
  std::vector<float> inv_freq(half);
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float pw = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
    inv_freq[i] = static_cast<float>(1.0 / static_cast<double>(pw));
  }
  t.cos.resize(static_cast<size_t>(max_pos * half));
  t.sin.resize(static_cast<size_t>(max_pos * half));
#pragma omp parallel for schedule(static) if (max_pos * half > 65536)
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float ang = static_cast<float>(p) * inv_freq[i];
      t.cos[p * half + i] = static_cast<float>(std::cos(static_cast<double>(ang)));
      t.sin[p * half + i] = static_cast<float>(std::sin(static_cast<double>(ang)));
    }
  }
  return t;
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
