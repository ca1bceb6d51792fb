#include "twinkle/kernels/cpu/reduce.h"

#include <cstddef>
#include <vector>

namespace twinkle::kernels::cpu {

double sum_squares(const float* x, int64_t n) {
  // Fixed blocks of 64K elements, partial sums combined in block order: the result is bitwise the
  // same for any thread count (gradient norms, and so clipping, stay reproducible).
  constexpr int64_t kBlock = 65536;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(static_cast<size_t>(nb));
#pragma omp parallel for schedule(static) if (nb > 1)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t e = (b + 1) * kBlock < n ? (b + 1) * kBlock : n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b * kBlock; i < e; ++i) s += static_cast<double>(x[i]) * x[i];
    part[b] = s;
  }
  double s = 0.0;
  for (double v : part) s += v;
  return s;
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_out(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] += b[c];
  }
}

void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols) {
  if (db == nullptr) return;
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dy + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc[static_cast<size_t>(c)] += d[c];
  }
  for (int64_t c = 0; c < cols; ++c) db[c] += static_cast<float>(acc[static_cast<size_t>(c)]);
}

void axpy(float* y, const float* x, int64_t n, float a) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace twinkle::kernels::cpu
