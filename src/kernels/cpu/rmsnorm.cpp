#include "twinkle/kernels/cpu/rmsnorm.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "rms_rstd.h"

namespace twinkle::kernels::cpu {

void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const float rs = rms_rstd(ss, dim, eps);  // HF: variance in fp32, rsqrt(var + eps)
    rstd[r] = rs;
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) yr[j] = w[j] * (xr[j] * rs);
  }
}

void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                      int64_t rows, int64_t dim) {
  const bool par = rows * dim > 16384;
  const int nt = par ? omp_get_max_threads() : 1;
  // Per-thread partial dw, reduced in thread order (deterministic for a fixed thread count).
  std::vector<float> part(dw ? static_cast<size_t>(nt) * dim : 0, 0.0f);
#pragma omp parallel num_threads(nt) if (par)
  {
    const int tid = omp_get_thread_num();
    float* pw = dw ? part.data() + static_cast<size_t>(tid) * dim : nullptr;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      const float* dyr = dy + r * dim;
      float* dxr = dx + r * dim;
      const float rs = rstd[r];
      double dot = 0.0;  // sum(g * xh), g = dy*w, xh = x*rstd
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(dyr[j] * w[j]) * (xr[j] * rs);
      const float c = static_cast<float>(dot / static_cast<double>(dim));
      if (pw) {
#pragma omp simd
        for (int64_t j = 0; j < dim; ++j) {
          const float xh = xr[j] * rs;
          const float g = dyr[j];
          pw[j] += g * xh;
          dxr[j] = rs * (g * w[j] - xh * c);
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < dim; ++j) {
          const float xh = xr[j] * rs;
          dxr[j] = rs * (dyr[j] * w[j] - xh * c);
        }
      }
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
