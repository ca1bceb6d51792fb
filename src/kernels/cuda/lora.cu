// The CUDA LoraOp (twinkle/kernels/ops.h): PEFT's LoRA term through cuBLAS fp32 GEMMs (gemm.cpp's gemm_rm,
// the scaling as alpha, the CPU set's call sequence) and lora_dropout as element-wise kernels; the mask
// rule of twinkle/parallel/lora_dropout.h as src/kernels/lora_mask_row.h defines it for the CPU kernel too
// (core/hash.h's splitmix64 on the device: bit-identical masks).
#include <algorithm>

#include "../lora_mask_row.h"
#include "cuda_common.h"
#include "ops_cuda.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return grid_stride_blocks(n, kThreads); }

// One thread per element (t, i), grid-stride.
__global__ void k_lora_mask(const uint64_t* __restrict__ token_key, int64_t T, uint64_t base, int64_t feature0,
                            int64_t in_l, uint64_t threshold, uint8_t* __restrict__ m) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < T * in_l;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / in_l, i = e - t * in_l;
    m[e] = ::twinkle::kernels::detail::lora_mask_keep(::twinkle::kernels::detail::lora_mask_token(base, token_key[t]),
                                                      feature0 + i, threshold);
  }
}

__global__ void k_lora_apply(const float* __restrict__ x, const uint8_t* __restrict__ m, float keep_scale,
                             float* __restrict__ xd, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    xd[i] = m[i] ? x[i] * keep_scale : 0.0f;
}

__global__ void k_lora_dropout_bwd(const float* __restrict__ g, const uint8_t* __restrict__ m, float keep_scale,
                                   float* __restrict__ dx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (m[i]) dx[i] += g[i] * keep_scale;
}

}  // namespace

void lora_dropout_mask(const uint64_t* token_key, int64_t T, uint64_t seed, uint64_t module_key, int64_t feature0,
                       int64_t in_l, uint64_t threshold, uint8_t* m) {
  if (T <= 0 || in_l <= 0) return;
  TWINKLE_LAUNCH(k_lora_mask, blocks_for(T * in_l), kThreads, 0, token_key, T,
                 ::twinkle::kernels::detail::lora_mask_base(seed, module_key), feature0, in_l, threshold, m);
  TWINKLE_CUDA_LAUNCHED("lora dropout mask");
}

void lora_dropout_apply(const float* x, const uint8_t* m, float keep_scale, float* xd, int64_t n) {
  if (n <= 0) return;
  TWINKLE_LAUNCH(k_lora_apply, blocks_for(n), kThreads, 0, x, m, keep_scale, xd, n);
  TWINKLE_CUDA_LAUNCHED("lora dropout apply");
}

void lora_dropout_backward(const float* g, const uint8_t* m, float keep_scale, float* dx, int64_t n) {
  if (n <= 0) return;
  TWINKLE_LAUNCH(k_lora_dropout_bwd, blocks_for(n), kThreads, 0, g, m, keep_scale, dx, n);
  TWINKLE_CUDA_LAUNCHED("lora dropout backward");
}

void lora_forward(const float* x, const float* A, const float* B, float* h, float* y, int64_t T, int64_t in,
                  int64_t out, int64_t r, float scaling) {
  gemm_rm(false, true, T, r, in, 1.0f, x, in, A, in, 0.0f, h, r);          // h = x A^T
  gemm_rm(false, true, T, out, r, scaling, h, r, B, r, 1.0f, y, out);      // y += s h B^T
}

void lora_backward(const float* x, const float* A, const float* B, const float* dy, float* h, float* dh, float* dx,
                   bool accumulate_dx, float* dA, float* dB, int64_t T, int64_t in, int64_t out, int64_t r,
                   float scaling) {
  gemm_rm(false, true, T, r, in, 1.0f, x, in, A, in, 0.0f, h, r);
  if (dB) gemm_rm(true, false, out, r, T, scaling, dy, out, h, r, 1.0f, dB, r);  // dB += s dy^T h
  gemm_rm(false, false, T, r, out, scaling, dy, out, B, r, 0.0f, dh, r);         // dh = s dy B
  if (dA) gemm_rm(true, false, r, in, T, 1.0f, dh, r, x, in, 1.0f, dA, in);      // dA += dh^T x
  gemm_rm(false, false, T, in, r, 1.0f, dh, r, A, in, accumulate_dx ? 1.0f : 0.0f, dx, in);  // dx (+)= dh A
}

}  // namespace twinkle::cuda::ops
