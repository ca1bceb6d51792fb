#include "twinkle/kernels/cpu/swiglu.h"

#include "twinkle/kernels/cpu/vmath.h"

namespace twinkle::kernels::cpu {

namespace {

inline void fwd_row(const float* g, const float* u, float* h, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    h[i] = gi * vmath::sigmoid(gi) * u[i];
  }
}

inline void bwd_row(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], d = dh[i];
    const float s = vmath::sigmoid(gi);
    const float silu = gi * s;
    dg[i] = d * ui * (s + silu * (1.0f - s));
    du[i] = d * silu;
  }
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

}  // namespace twinkle::kernels::cpu
