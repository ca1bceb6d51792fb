#include "twinkle/kernels/cpu/adamw.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <string>

#include "twinkle/core/error.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu {

namespace {

struct AdamFactors {
  float b1, b2, one_m_b1, one_m_b2, decay, step_size, bias2_sqrt, eps, grad_scale;
};

inline void adamw_scalar(float* p, const float* g, float* m, float* v, int64_t b, int64_t e, const AdamFactors& f) {
  for (int64_t i = b; i < e; ++i) {
    const float gi = g[i] * f.grad_scale;
    const float mi = f.b1 * m[i] + f.one_m_b1 * gi;
    const float vi = f.b2 * v[i] + f.one_m_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / f.bias2_sqrt + f.eps;
    p[i] = p[i] * f.decay - f.step_size * (mi / denom);
  }
}

// One chunk [b, e). GCC does not vectorize std::sqrt without -fno-math-errno, hence the intrinsics.
inline void adamw_chunk(float* p, const float* g, float* m, float* v, int64_t b, int64_t e, const AdamFactors& f) {
#ifdef __AVX512F__
  const __m512 b1 = _mm512_set1_ps(f.b1), b2 = _mm512_set1_ps(f.b2), c1 = _mm512_set1_ps(f.one_m_b1),
               c2 = _mm512_set1_ps(f.one_m_b2), dec = _mm512_set1_ps(f.decay), ss = _mm512_set1_ps(f.step_size),
               bs = _mm512_set1_ps(f.bias2_sqrt), ep = _mm512_set1_ps(f.eps), gs = _mm512_set1_ps(f.grad_scale);
  int64_t i = b;
  for (; i + 16 <= e; i += 16) {
    const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gs);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(c1, gi));
    const __m512 vi =
        _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)), _mm512_mul_ps(_mm512_mul_ps(c2, gi), gi));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_sqrt_ps(0xFFFF, vi), bs), ep);
    const __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(p + i), dec),
                                    _mm512_mul_ps(ss, _mm512_div_ps(mi, denom)));
    _mm512_storeu_ps(p + i, pi);
  }
  adamw_scalar(p, g, m, v, i, e, f);
#else
  adamw_scalar(p, g, m, v, b, e, f);
#endif
}

// The double a config value most likely had before it was rounded to float: the shortest decimal
// that round-trips the float (0.999f -> 0.999). Matters for 1 - beta2, where float(0.999) would
// carry a 1.3e-5 relative error into (1 - beta2) and the bias correction.
double decimal_of(float x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf) - 1, x);
  if (res.ec != std::errc()) return x;
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float grad_scale) {
  check(step >= 1, "adamw_step: step must be >= 1 (1-based), got " + std::to_string(step));
  const double b1 = decimal_of(beta1), b2 = decimal_of(beta2);
  AdamFactors f;
  f.b1 = beta1;
  f.b2 = beta2;
  f.one_m_b1 = static_cast<float>(1.0 - b1);
  f.one_m_b2 = static_cast<float>(1.0 - b2);
  f.decay = static_cast<float>(1.0 - decimal_of(lr) * decimal_of(weight_decay));
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step));
  f.step_size = static_cast<float>(decimal_of(lr) / bias1);
  f.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  f.eps = eps;
  f.grad_scale = grad_scale;
  constexpr int64_t kChunk = 16384;
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (nc > 4)
  for (int64_t c = 0; c < nc; ++c) adamw_chunk(p, g, m, v, c * kChunk, std::min(n, (c + 1) * kChunk), f);
}

}  // namespace twinkle::kernels::cpu
