// twinkle/kernels/cpu/grouped_linear.h — grouped GEMM for MoE experts (Megatron-core GroupedMLP /
// MindSpeed npu_gmm semantics): rows [offsets[g], offsets[g+1]) of X are multiplied by W[g]^T.
// This version loops over the groups with one oneDNN GEMM each.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// X [M, K], W [G, N, K], offsets [G+1] (offsets[0] = 0, non-decreasing, M = offsets[G]); Y [M, N] OVERWRITTEN.
/// Throws twinkle::Error naming the group if offsets decrease or offsets[0] != 0.
void grouped_linear_forward(const float* X, const float* W, float* Y, const int64_t* offsets, int64_t G, int64_t N,
                            int64_t K);

/// dX [M, K] OVERWRITTEN; dW [G, N, K] ACCUMULATED (skipped when null). Same errors.
void grouped_linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW,
                             const int64_t* offsets, int64_t G, int64_t N, int64_t K);

}  // namespace twinkle::kernels::cpu
