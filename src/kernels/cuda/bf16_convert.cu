// The fp32 -> bf16 conversion kernel of the CUDA "bf16" set (bf16.h): the GEMM operands' bf16 copies
// (gemm_bf16.cpp).
#include <algorithm>

#include "bf16.h"

namespace twinkle::cuda::ops {

namespace {

__global__ void k_f32_to_bf16(const float* __restrict__ src, uint16_t* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = f32_to_bf16_bits(src[i]);
}

}  // namespace

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (n <= 0) return;
  constexpr int64_t kThreads = 256;
  TWINKLE_LAUNCH(k_f32_to_bf16, grid_stride_blocks(n, kThreads), static_cast<unsigned>(kThreads), 0, src, dst, n);
  TWINKLE_CUDA_LAUNCHED("f32_to_bf16");
}

}  // namespace twinkle::cuda::ops
