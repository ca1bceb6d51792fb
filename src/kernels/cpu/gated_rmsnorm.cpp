// Gated RMSNorm forward / backward (twinkle/kernels/cpu/gated_rmsnorm.h).
#include "twinkle/kernels/cpu/gated_rmsnorm.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "rms_rstd.h"

namespace twinkle::kernels::cpu {

namespace {
inline float sigmoidf(float a) { return 1.0f / (1.0f + std::exp(-a)); }
}  // namespace

void gated_rmsnorm_forward(const float* x, const float* z, const float* w, float* y, float* rstd, int64_t rows,
                           int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const float rs = rms_rstd(ss, dim, eps);  // HF: variance in fp32, rsqrt(var + eps)
    rstd[r] = rs;
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) yr[j] = w[j] * (xr[j] * rs) * (zr[j] * sigmoidf(zr[j]));
  }
}

void gated_rmsnorm_backward(const float* x, const float* z, const float* w, const float* rstd, const float* dy,
                            float* dx, float* dz, float* dw, int64_t rows, int64_t dim) {
  const bool par = rows * dim > 16384;
  const int nt = par ? omp_get_max_threads() : 1;
  std::vector<float> part(dw ? static_cast<size_t>(nt) * dim : 0, 0.0f);
#pragma omp parallel num_threads(nt) if (par)
  {
    float* pw = dw ? part.data() + static_cast<size_t>(omp_get_thread_num()) * dim : nullptr;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      const float* zr = z + r * dim;
      const float* dyr = dy + r * dim;
      float* dxr = dx + r * dim;
      float* dzr = dz + r * dim;
      const float rs = rstd[r];
      double dot = 0.0;  // sum g * n, g = dy * w * silu(z), n = x * rstd
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < dim; ++j) {
        const float s = zr[j] * sigmoidf(zr[j]);
        dot += static_cast<double>(dyr[j] * w[j] * s) * (xr[j] * rs);
      }
      const float c = static_cast<float>(dot / static_cast<double>(dim));
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) {
        const float sg = sigmoidf(zr[j]), s = zr[j] * sg, n = xr[j] * rs, d = dyr[j];
        if (pw) pw[j] += d * n * s;
        dzr[j] = d * w[j] * n * sg * (1.0f + zr[j] * (1.0f - sg));
        dxr[j] = rs * (d * w[j] * s - n * c);
      }
    }
  }
  if (dw)
    for (int t = 0; t < nt; ++t) {
      const float* pw = part.data() + static_cast<size_t>(t) * dim;
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) dw[j] += pw[j];
    }
}

}  // namespace twinkle::kernels::cpu
