// twinkle/kernels/cpu/gemm.h — single-precision GEMM through oneDNN (dnnl_sgemm).
//
// oneDNN dispatches on the CPU it runs on (AVX-512 / AVX2 / SSE), so no
// OPENBLAS_CORETYPE-style setting is needed; see bench/README.md for the
// OpenBLAS / BLIS / oneDNN comparison that chose it. Threads: OpenMP
// (OMP_NUM_THREADS).
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
/// op(X) = X^T when the trans flag is set; lda/ldb/ldc are row strides (elements)
/// of A, B, C as stored. All pointers f32. Throws twinkle::Error if oneDNN fails.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// Y[M,N] (+)= X[M,K] * W[N,K]^T — a linear layer's forward (weights in HF [out,in] layout).
/// accumulate=false overwrites Y.
void linear_forward(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate = false);

/// Backward of linear_forward. dX[M,K] (+)= dY[M,N] * W[N,K] (overwritten unless accumulate_dx)
/// and dW[N,K] += dY^T * X (always accumulates; skipped when dW is null).
void linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                     int64_t K, bool accumulate_dx = false);

}  // namespace twinkle::kernels::cpu
