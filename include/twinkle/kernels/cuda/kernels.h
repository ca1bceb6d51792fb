// twinkle/kernels/cuda/kernels.h — the CUDA implementations of the ops of twinkle/kernels/ops.h,
// registered by Registry::global() under device "cuda", implementation "fused" (in a CUDA build).
//
// Contract for device "cuda" (in addition to each op's contract in ops.h, whose semantics and sources
// are the same as the CPU kernels'): every float / int pointer argument is a DEVICE pointer
// (Device::CUDA memory, e.g. Tensor::zeros(..., Device::CUDA).raw()), except `counts` of
// grouped_linear (a host array: the per-expert GEMM loop runs on the host) and the RopeTable (a host
// object: its cos/sin are copied to the device once and cached by the table's address, size and
// first/last values). Work is queued on the backend's stream (twinkle/kernels/cuda/runtime.h); an op
// returns once its work is queued, except the ones that return a host value or validate their input
// (cross_entropy.forward, linear_cross_entropy, norms.sum_squares, qk_norm_rope / rope position checks),
// which synchronize. fp32 throughout; GEMMs through cuBLAS in fp32 without TF32; reductions of the
// CPU kernels that accumulate in double (RMSNorm's sum of squares, sum_squares, cross-entropy sums)
// accumulate in double here too.
#pragma once
#include <vector>

#include "twinkle/kernels/registry.h"

namespace twinkle::cuda {

/// Every CUDA op implementation, one per op of OpImpl (the "fused" set of device "cuda").
std::vector<kernels::OpImpl> fused_kernels();

}  // namespace twinkle::cuda
