// src/kernels/cpu/ce_rows.h — the per-row pieces of the softmax cross entropy shared by
// cross_entropy.cpp (one row of a [T, V] logits matrix at a time) and linear_cross_entropy.cpp
// (one row of a [rows, <= 512] vocab block at a time). Internal to the CPU kernels.
#pragma once
#include <cstdint>
#include <limits>

#include "twinkle/kernels/cpu/vmath.h"

namespace twinkle::kernels::cpu::ce_rows {

/// max_{j < n} x[j] (-inf when n == 0; NaNs are skipped). With AVX-512 four independent running maxima
/// over 64 columns a step: one running maximum is a chain of dependent max instructions, 2-4x slower
/// than the loads allow on a 512-column row. The maximum does not depend on the order.
inline float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#ifdef __AVX512F__
  // (maskz forms with a full mask: GCC 12 warns about the undefined pass-through of the plain ones)
  auto vmax = [](__m512 v, __m512 a) { return _mm512_maskz_max_ps(0xFFFF, v, a); };  // a when v is NaN
  const __m512 ninf = _mm512_set1_ps(m);
  __m512 a0 = ninf, a1 = ninf, a2 = ninf, a3 = ninf;
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    a0 = vmax(_mm512_loadu_ps(x + j), a0);
    a1 = vmax(_mm512_loadu_ps(x + j + 16), a1);
    a2 = vmax(_mm512_loadu_ps(x + j + 32), a2);
    a3 = vmax(_mm512_loadu_ps(x + j + 48), a3);
  }
  for (; j < n; j += 16) a0 = vmax(_mm512_mask_loadu_ps(ninf, vmath::tail_mask(n - j), x + j), a0);
  alignas(64) float t[16];
  _mm512_store_ps(t, vmax(vmax(a0, a1), vmax(a2, a3)));
  for (float v : t) m = v > m ? v : m;
#else
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
#endif
  return m;
}

#ifdef __AVX512F__
inline double hsum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  double s = 0.0;
  for (float x : t) s += x;
  return s;
}
#endif

/// Columns per float partial sum of row_sumexp.
constexpr int64_t kSumBlock = 512;

/// sum_{j < n} exp(x[j] - mx): float partial sums over blocks of kSumBlock columns, the blocks summed in
/// double (one block when n <= kSumBlock). With kStore, out[j] = exp(x[j] - mx) too (out may be x).
template <bool kStore>
inline double row_exp_sum(const float* x, float* out, int64_t n, float mx) {
  double total = 0.0;
#ifdef __AVX512F__
  const __m512 m = _mm512_set1_ps(mx);
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const int64_t e = b + kSumBlock < n ? b + kSumBlock : n;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = b; j < e; j += 16) {
      const __mmask16 k = vmath::tail_mask(e - j);
      const __m512 v = vmath::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m));
      if constexpr (kStore) _mm512_mask_storeu_ps(out + j, k, v);
      acc = _mm512_mask_add_ps(acc, k, acc, v);
    }
    total += hsum(acc);
  }
#else
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const int64_t e = b + kSumBlock < n ? b + kSumBlock : n;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = b; j < e; ++j) {
      const float v = vmath::exp(x[j] - mx);
      if constexpr (kStore) out[j] = v;
      s += v;
    }
    total += s;
  }
#endif
  return total;
}

/// sum_{j < n} exp(x[j] - mx), summed as row_exp_sum says.
inline double row_sumexp(const float* x, int64_t n, float mx) { return row_exp_sum<false>(x, nullptr, n, mx); }

/// x[j] = exp(x[j] - mx) for j < n, in place; returns their sum with row_sumexp's summation order.
inline double row_exp_inplace_sum(float* x, int64_t n, float mx) { return row_exp_sum<true>(x, x, n, mx); }

/// Headroom of row_exp_inplace_sum_ref: columns up to 32 above ref are taken against ref, so every result
/// is <= e^32 and a 512-column float sum < 2^56. (In linear_cross_entropy's backward a stored value is
/// scaled by grad_scale * exp(r - lse); where that factor is subnormal, the probabilities it scales are
/// below e^32 * 2^-126, nothing against the row's largest, as with the block maximum as r.)
constexpr float kRefHeadroom = 32.0f;

/// For one block of n <= kSumBlock columns: x[j] = exp(x[j] - r) in place, returning their sum (one float
/// partial sum, as row_exp_inplace_sum's for such a block), where r is `ref` unless some x[j] - ref
/// exceeds kRefHeadroom: then r is the block's maximum (the columns already done are rescaled by
/// exp(ref - r), a rare path) and `ref` is set to it. One pass over the row where row_max +
/// row_exp_inplace_sum take two. The caller picks `ref` as a value near the row's maximum and not above
/// it (linear_cross_entropy: the label's logit), so every result and the sum stay finite, and columns
/// more than ~87 below r, which flush to 0, are negligible against the column that gave ref (exp(0) = 1
/// in the row's sum). The test is on the difference x[j] - r (the value exp takes), so it holds for any
/// magnitude of ref. NaN columns give a NaN sum, as in row_exp_inplace_sum.
inline double row_exp_inplace_sum_ref(float* x, int64_t n, float& ref) {
#ifdef __AVX512F__
  const __m512 head = _mm512_set1_ps(kRefHeadroom);
  __m512 r = _mm512_set1_ps(ref), acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = vmath::tail_mask(n - j);
    const __m512 xv = _mm512_maskz_loadu_ps(k, x + j);
    __m512 d = _mm512_sub_ps(xv, r);
    if (_mm512_mask_cmp_ps_mask(k, d, head, _CMP_GT_OQ)) [[unlikely]] {
      const float m = row_max(x + j, n - j);  // the block's maximum: the columns before j are <= ref + 32 < m
      const float f = vmath::exp(ref - m);
      for (int64_t i = 0; i < j; ++i) x[i] *= f;
      acc = _mm512_mul_ps(acc, _mm512_set1_ps(f));
      ref = m;
      r = _mm512_set1_ps(m);
      d = _mm512_sub_ps(xv, r);
    }
    const __m512 v = vmath::exp16(d);
    _mm512_mask_storeu_ps(x + j, k, v);
    acc = _mm512_mask_add_ps(acc, k, acc, v);
  }
  return hsum(acc);
#else
  const float m = row_max(x, n);
  if (m - ref > kRefHeadroom) ref = m;
  return row_exp_inplace_sum(x, n, ref);
#endif
}

/// d[j] = x[j] * sc for j < n (d may alias x).
inline void row_scale_to(const float* x, float* d, int64_t n, float sc) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) d[j] = x[j] * sc;
}

/// d[j] = sc * exp(x[j] - l) for j < n (d may alias x).
inline void row_softmax_scaled(const float* x, float* d, int64_t n, float l, float sc) {
#ifdef __AVX512F__
  const __m512 lv = _mm512_set1_ps(l), sv = _mm512_set1_ps(sc);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = vmath::tail_mask(n - j);
    const __m512 v = vmath::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), lv));
    _mm512_mask_storeu_ps(d + j, k, _mm512_mul_ps(sv, v));
  }
#else
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) d[j] = sc * vmath::exp(x[j] - l);
#endif
}

}  // namespace twinkle::kernels::cpu::ce_rows
