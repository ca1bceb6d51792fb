#include "twinkle/kernels/cpu/gemm.h"

#include <dnnl.h>

#include <string>

#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success) throw Error("dnnl_sgemm failed with status " + std::to_string(static_cast<int>(st)));
}

void linear_forward(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate) {
  sgemm(false, true, M, N, K, 1.0f, X, K, W, K, accumulate ? 1.0f : 0.0f, Y, N);
}

void linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                     int64_t K, bool accumulate_dx) {
  if (dX) sgemm(false, false, M, K, N, 1.0f, dY, N, W, K, accumulate_dx ? 1.0f : 0.0f, dX, K);
  if (dW) sgemm(true, false, N, K, M, 1.0f, dY, N, X, K, 1.0f, dW, K);
}

}  // namespace twinkle::kernels::cpu
