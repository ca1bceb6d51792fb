// The CPU "fused" LoraOp (twinkle/kernels/cpu/lora.h).
#include "twinkle/kernels/cpu/lora.h"

#include "../lora_mask_row.h"
#include "twinkle/kernels/cpu/gemm.h"

namespace twinkle::kernels::cpu {

void lora_dropout_mask(const uint64_t* token_key, int64_t T, uint64_t seed, uint64_t module_key, int64_t feature0,
                       int64_t in_l, uint64_t threshold, uint8_t* m) {
  const uint64_t base = detail::lora_mask_base(seed, module_key);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const uint64_t h = detail::lora_mask_token(base, token_key[t]);
    uint8_t* row = m + t * in_l;
    for (int64_t i = 0; i < in_l; ++i) row[i] = detail::lora_mask_keep(h, feature0 + i, threshold);
  }
}

void lora_dropout_apply(const float* x, const uint8_t* m, float keep_scale, float* xd, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) xd[i] = m[i] ? x[i] * keep_scale : 0.0f;
}

void lora_dropout_backward(const float* g, const uint8_t* m, float keep_scale, float* dx, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    if (m[i]) dx[i] += g[i] * keep_scale;
}

void lora_forward(const float* x, const float* A, const float* B, float* h, float* y, int64_t T, int64_t in,
                  int64_t out, int64_t r, float scaling) {
  linear_forward(x, A, h, T, r, in);                                        // h = x A^T
  sgemm(false, true, T, out, r, scaling, h, r, B, r, 1.0f, y, out);         // y += s h B^T
}

void lora_backward(const float* x, const float* A, const float* B, const float* dy, float* h, float* dh, float* dx,
                   bool accumulate_dx, float* dA, float* dB, int64_t T, int64_t in, int64_t out, int64_t r,
                   float scaling) {
  linear_forward(x, A, h, T, r, in);
  if (dB) sgemm(true, false, out, r, T, scaling, dy, out, h, r, 1.0f, dB, r);  // dB += s dy^T h
  sgemm(false, false, T, r, out, scaling, dy, out, B, r, 0.0f, dh, r);         // dh = s dy B
  if (dA) sgemm(true, false, r, in, T, 1.0f, dh, r, x, in, 1.0f, dA, in);      // dA += dh^T x
  sgemm(false, false, T, in, r, 1.0f, dh, r, A, in, accumulate_dx ? 1.0f : 0.0f, dx, in);  // dx (+)= dh A
}

}  // namespace twinkle::kernels::cpu
