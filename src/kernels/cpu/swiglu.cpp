#include "twinkle/kernels/cpu/swiglu.h"

#include "twinkle/kernels/cpu/vmath.h"

namespace twinkle::kernels::cpu {

namespace {

inline void fwd_row(const float* g, const float* u, float* h, int64_t n) {
#ifdef __AVX512F__
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = vmath::tail_mask(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(k, g + i), uv = _mm512_maskz_loadu_ps(k, u + i);
    _mm512_mask_storeu_ps(h + i, k, _mm512_mul_ps(_mm512_mul_ps(gv, vmath::sigmoid16(gv)), uv));
  }
#else
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    h[i] = gi * vmath::sigmoid(gi) * u[i];
  }
#endif
}

inline void bwd_row(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) {
#ifdef __AVX512F__
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = vmath::tail_mask(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(k, g + i), uv = _mm512_maskz_loadu_ps(k, u + i),
                 dv = _mm512_maskz_loadu_ps(k, dh + i);
    const __m512 s = vmath::sigmoid16(gv);
    const __m512 silu = _mm512_mul_ps(gv, s);
    const __m512 dsilu = _mm512_fmadd_ps(silu, _mm512_sub_ps(one, s), s);  // s + silu*(1-s)
    _mm512_mask_storeu_ps(dg + i, k, _mm512_mul_ps(_mm512_mul_ps(dv, uv), dsilu));
    _mm512_mask_storeu_ps(du + i, k, _mm512_mul_ps(dv, silu));
  }
#else
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], d = dh[i];
    const float s = vmath::sigmoid(gi);
    const float silu = gi * s;
    dg[i] = d * ui * (s + silu * (1.0f - s));
    du[i] = d * silu;
  }
#endif
}

constexpr int64_t kChunk = 4096;

}  // namespace

void swiglu_forward(const float* gate, const float* up, float* h, int64_t n) {
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (nc > 4)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t b = c * kChunk, e = b + kChunk < n ? b + kChunk : n;
    fwd_row(gate + b, up + b, h + b, e - b);
  }
}

void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (nc > 4)
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t b = c * kChunk, e = b + kChunk < n ? b + kChunk : n;
    bwd_row(gate + b, up + b, dh + b, dgate + b, dup + b, e - b);
  }
}

void swiglu_forward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* h, int64_t ld_h,
                         int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
  for (int64_t r = 0; r < rows; ++r) fwd_row(gate + r * ld_gate, up + r * ld_up, h + r * ld_h, cols);
}

void swiglu_backward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, const float* dh,
                          int64_t ld_dh, float* dgate, int64_t ld_dgate, float* dup, int64_t ld_dup, int64_t rows,
                          int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
  for (int64_t r = 0; r < rows; ++r)
    bwd_row(gate + r * ld_gate, up + r * ld_up, dh + r * ld_dh, dgate + r * ld_dgate, dup + r * ld_dup, cols);
}

void swiglu_backward_rows_serial(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, const float* dh,
                                 int64_t ld_dh, float* dgate, int64_t ld_dgate, float* dup, int64_t ld_dup,
                                 int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    bwd_row(gate + r * ld_gate, up + r * ld_up, dh + r * ld_dh, dgate + r * ld_dgate, dup + r * ld_dup, cols);
}

}  // namespace twinkle::kernels::cpu
