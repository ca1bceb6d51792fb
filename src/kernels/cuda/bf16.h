// Internal to src/kernels/cuda: fp32 -> bf16 rounding for the "bf16" kernel set of device "cuda"
// (twinkle/kernels/cuda/kernels.h). bf16 values are carried as their bit patterns (uint16_t: the upper
// half of the fp32 bits), which is what cuBLAS reads as CUDA_R_16BF; no cuda_bf16.h type is needed.
// Rounding: round-to-nearest-even, NaN kept a quiet NaN, denormals kept (the bits of twinkle::f32_to_bf16,
// core/dtype.h, and PyTorch's tensor.to(torch.bfloat16)).
#pragma once
#include <cstdint>

#include "cuda_common.h"

namespace twinkle::cuda::ops {

#if defined(__CUDACC__) || defined(TWINKLE_CUDA_SHIM)  // device code (nvcc, or the host emulation)
/// The bf16 bit pattern nearest to x (ties to even); a NaN becomes the quiet NaN of its sign.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float x) {
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/// x rounded to the nearest bf16 value, held in fp32 (exact: the low 16 bits are zero).
__device__ __forceinline__ float bf16_round(float x) {
  return __uint_as_float(static_cast<unsigned>(f32_to_bf16_bits(x)) << 16);
}
#endif

/// dst[i] = f32_to_bf16_bits(src[i]) for i < n (device pointers; queued on the backend's stream).
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace twinkle::cuda::ops
