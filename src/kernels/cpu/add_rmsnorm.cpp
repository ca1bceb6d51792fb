#include "twinkle/kernels/cpu/add_rmsnorm.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "rms_rstd.h"

namespace twinkle::kernels::cpu {

void add_rmsnorm_forward(const float* x, const float* r, float* h, const float* w, float* y, float* rstd,
                         int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 16384)
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * dim;
    const float* rr = r + i * dim;
    float* hr = h + i * dim;
    float* yr = y + i * dim;
    double ss = 0.0;  // x + r recomputed in the second pass (the rows are in L1 by then) instead of re-read from h
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < dim; ++j) {
      const float v = xr[j] + rr[j];
      ss += static_cast<double>(v) * v;
    }
    const float rs = rms_rstd(ss, dim, eps);  // HF: variance in fp32, rsqrt(var + eps)
    rstd[i] = rs;
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) {
      const float v = xr[j] + rr[j];
      hr[j] = v;
      yr[j] = w[j] * (v * rs);
    }
  }
}

void add_rmsnorm_backward(const float* h, const float* w, const float* rstd, const float* dy, const float* dres,
                          float* dh, float* dw, int64_t rows, int64_t dim) {
  const bool par = rows * dim > 16384;
  const int nt = par ? omp_get_max_threads() : 1;
  std::vector<float> part(dw ? static_cast<size_t>(nt) * dim : 0, 0.0f);
#pragma omp parallel num_threads(nt) if (par)
  {
    const int tid = omp_get_thread_num();
    float* pw = dw ? part.data() + static_cast<size_t>(tid) * dim : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const float* hr = h + i * dim;
      const float* dyr = dy + i * dim;
      const float* dr = dres + i * dim;
      float* dhr = dh + i * dim;
      const float rs = rstd[i];
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(dyr[j] * w[j]) * (hr[j] * rs);
      const float c = static_cast<float>(dot / static_cast<double>(dim));
      if (pw) {
#pragma omp simd
        for (int64_t j = 0; j < dim; ++j) pw[j] += dyr[j] * (hr[j] * rs);
      }
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) dhr[j] = rs * (dyr[j] * w[j] - (hr[j] * rs) * c) + dr[j];
    }
  }
  if (dw) {
    for (int t = 0; t < nt; ++t) {
      const float* pw = part.data() + static_cast<size_t>(t) * dim;
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) dw[j] += pw[j];
    }
  }
}

}  // namespace twinkle::kernels::cpu
