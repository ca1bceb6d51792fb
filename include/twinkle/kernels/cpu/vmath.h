// twinkle/kernels/cpu/vmath.h — scalar math written so that GCC/Clang auto-vectorize it inside
// `#pragma omp simd` loops without -ffast-math (glibc's expf only vectorizes under fast-math).
//
// Accuracy (checked in tests/unit/kernels/test_kernels_basic.cpp against std::exp / std::exp2):
// relative error <= 2e-7 over the normal range. Results below 2^-126 (x < -87.33 for exp,
// x < -126 for exp2, -inf included) flush to 0; results above 2^127.5 (x > 88.376 for exp,
// x >= 127.5 for exp2) give +inf, i.e. the top half binade of float is treated as overflow
// (softmax / cross-entropy / sigmoid arguments never get there); NaN propagates.
// Method: Cody–Waite range reduction x = n*ln2 + r, |r| <= ln2/2, then a degree-7 Taylor polynomial
// for e^r and a 2^n scale built from the exponent bits (textbook, e.g. Muller, "Elementary Functions").
//
// With AVX-512 the same functions also exist on 16 lanes (exp16, exp2_16, sigmoid16): clamp, round
// (vrndscaleps), the same polynomial and vscalefps for the 2^n scale (the maskz_ forms with a full mask
// avoid GCC 12's -Wmaybe-uninitialized false positive on _mm512_undefined_ps) — about half the instructions
// of the auto-vectorized scalar form; the hot loops (softmax, cross entropy, SwiGLU) use them.
// They differ from the scalar forms only in the flushed / overflow ranges (vscalefps produces
// subnormals and overflows at the true float limit).
#pragma once
#include <bit>
#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu::vmath {

/// e^r for |r| <= ln2/2 (degree-7 Taylor, Horner form).
inline float exp_poly(float r) {
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p;
}

/// 2^n for integral-valued float n in [-126, 128] (128 gives +inf).
inline float pow2i(float n) {
  int32_t e = static_cast<int32_t>(n) + 127;
  return std::bit_cast<float>(e << 23);
}

/// e^x in float.
inline float exp(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693145751953125f;       // exact in float, low bits zero
  const float kLn2Lo = 1.42860682030941723212e-6f;
  const float kHi = 88.37626f;  // 127.5 * ln2: n <= 127 below it
  float xc = x < -87.33654f ? -87.33654f : x;
  xc = xc > kHi ? kHi : xc;
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to nearest integer
  float n = (xc * kLog2e + kRound) - kRound;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float y = exp_poly(r) * pow2i(n);
  y = x > kHi ? std::bit_cast<float>(0x7f800000) : y;
  return x < -87.33654f ? 0.0f : y;  // NaN: both comparisons false -> poly(NaN) = NaN
}

/// 2^x in float.
inline float exp2(float x) {
  const float kLn2 = 0.693147180559945309f;
  float xc = x < -126.0f ? -126.0f : x;
  xc = xc > 128.0f ? 128.0f : xc;
  const float kRound = 12582912.0f;
  float n = (xc + kRound) - kRound;
  float r = (xc - n) * kLn2;  // exact subtraction; |r| <= ln2/2
  float y = exp_poly(r) * pow2i(n);
  return x < -126.0f ? 0.0f : y;
}

/// Logistic sigmoid 1/(1+e^-x) (0 for x < -87.3; 1 for large x).
inline float sigmoid(float x) { return 1.0f / (1.0f + vmath::exp(-x)); }

#ifdef __AVX512F__
/// 16-lane e^x (same accuracy as vmath::exp). -inf -> 0, +inf -> +inf, NaN -> NaN.
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(89.0f);
  x = _mm512_maskz_max_ps(0xFFFF, lo, x);  // max/min return the second operand for NaN: NaN propagates
  x = _mm512_maskz_min_ps(0xFFFF, hi, x);
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(0xFFFF, p, n);
}

/// 16-lane 2^x (same accuracy as vmath::exp2). -inf -> 0.
inline __m512 exp2_16(__m512 x) {
  x = _mm512_maskz_max_ps(0xFFFF, _mm512_set1_ps(-150.0f), x);
  x = _mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(129.0f), x);
  const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, x, _MM_FROUND_TO_NEAREST_INT);
  const __m512 r = _mm512_mul_ps(_mm512_sub_ps(x, n), _mm512_set1_ps(0.693147180559945309f));
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(0xFFFF, p, n);
}

/// 16-lane 1/(1+e^-x).
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/// Mask of the first `n` (0..16) lanes.
inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}
#endif

}  // namespace twinkle::kernels::cpu::vmath
