// twinkle/kernels/cpu/grouped_gemm.h — the experts' linear layers as one GEMM per expert over
// its contiguous block of permuted rows (Megatron-core's GroupedMLP / TEGroupedLinear,
// megatron/core/transformer/moe/experts.py; the `grouped_linear` op). No per-token loops: each
// expert with rows is a single sgemm (gemm.h) of [rows_e, K] x [N, K]^T.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Y[rows_e, N] = X_e[rows_e, K] * W_e[N, K]^T for each of the E experts, where X_e / Y_e are
/// the consecutive row blocks of X [R, K] / Y [R, N] given by counts [E] (R = sum counts, in
/// expert order) and W_e = W + e * w_stride (HF [out, in] layout, w_stride >= N*K elements).
/// Y is OVERWRITTEN (accumulate=false) or added to. counts must be >= 0 (else twinkle::Error).
void grouped_linear_forward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                            float* Y, int64_t N, int64_t K, bool accumulate = false);

/// Backward of grouped_linear_forward given dY [R, N]:
///   dX_e = dY_e * W_e   (dX [R, K] OVERWRITTEN unless accumulate_dx; skipped when dX is null)
///   dW_e += dY_e^T * X_e (dW + e * w_stride; always accumulates; skipped when dW is null;
///                         an expert with no rows leaves its dW_e untouched)
void grouped_linear_backward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                             const float* dY, float* dX, float* dW, int64_t N, int64_t K, bool accumulate_dx = false);

}  // namespace twinkle::kernels::cpu
