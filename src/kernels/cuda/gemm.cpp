// CUDA GEMM ops through cuBLAS in fp32 without TF32 (CUBLAS_DEFAULT_MATH; runtime.h): linear,
// grouped linear (MoE experts: one GEMM per expert over its contiguous rows, counts on the host),
// gate|up + SwiGLU, and lm head + cross entropy in token chunks. Semantics: twinkle/kernels/cpu/gemm.h,
// grouped_gemm.h, gate_up_swiglu.h, linear_cross_entropy.h (torch.nn.functional.linear, HF [out, in]
// weights).
#include <algorithm>
#include <string>
#include <vector>

#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

// Row-major C [M, N] = alpha * op(A) op(B) + beta * C, op(A) [M, K], op(B) [K, N]; lda/ldb/ldc are the
// row-major leading dimensions. A row-major matrix is its column-major transpose, so this is the
// column-major C^T = op(B)^T op(A)^T with the same transpose flags and the operands swapped.
void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // C = beta * C
    if (beta == 0.0f) {
      TWINKLE_CUDA_CHECK(cudaMemset2DAsync(C, static_cast<size_t>(ldc) * sizeof(float), 0,
                                           static_cast<size_t>(N) * sizeof(float), static_cast<size_t>(M),
                                           detail::stream()));
    }
    return;  // beta is 1 at every call site otherwise
  }
  const int64_t lim = int64_t{1} << 31;
  check(M < lim && N < lim && K < lim && lda < lim && ldb < lim && ldc < lim,
        "cuda GEMM: a dimension exceeds the 32-bit range of cuBLAS");
  TWINKLE_CUBLAS_CHECK(detail::cublas().sgemm(
      detail::handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
      static_cast<int>(M), static_cast<int>(K), &alpha, B, static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C,
      static_cast<int>(ldc)));
  TWINKLE_CUDA_LAUNCHED("cublasSgemm");
}


void linear_forward(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate) {
  gemm_rm(false, true, M, N, K, 1.0f, X, K, W, K, accumulate ? 1.0f : 0.0f, Y, N);
}

void linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                     int64_t K, bool accumulate_dx) {
  if (dX) gemm_rm(false, false, M, K, N, 1.0f, dY, N, W, K, accumulate_dx ? 1.0f : 0.0f, dX, K);
  if (dW) gemm_rm(true, false, N, K, M, 1.0f, dY, N, X, K, 1.0f, dW, K);
}

void grouped_linear_forward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                            float* Y, int64_t N, int64_t K, bool accumulate) {
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    check(counts[e] >= 0, "grouped_linear_forward (cuda): count " + std::to_string(counts[e]) + " of expert " +
                              std::to_string(e) + " is negative");
    linear_forward(X + r * K, W + e * w_stride, Y + r * N, counts[e], N, K, accumulate);
    r += counts[e];
  }
}

void grouped_linear_backward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                             const float* dY, float* dX, float* dW, int64_t N, int64_t K, bool accumulate_dx) {
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    check(counts[e] >= 0, "grouped_linear_backward (cuda): count " + std::to_string(counts[e]) + " of expert " +
                              std::to_string(e) + " is negative");
    const int64_t c = counts[e];
    if (c > 0)
      linear_backward(X + r * K, W + e * w_stride, dY + r * N, dX ? dX + r * K : nullptr,
                      dW ? dW + e * w_stride : nullptr, c, N, K, accumulate_dx);
    r += c;
  }
}

void gate_up_swiglu_forward(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I, int64_t H) {
  linear_forward(X, Wgu, gu, T, 2 * I, H, false);
  swiglu_forward_rows(gu, 2 * I, gu + I, 2 * I, a, I, T, I);
}

void gate_up_swiglu_backward(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                             float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx) {
  swiglu_backward_rows(gu, 2 * I, gu + I, 2 * I, da, I, dgu, 2 * I, dgu + I, 2 * I, T, I);
  linear_backward(X, Wgu, dgu, dX, dWgu, T, 2 * I, H, accumulate_dx);
}

double linear_cross_entropy(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H,
                            float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows) {
  if (T <= 0) return 0.0;
  check_labels(labels, T, V, "linear_cross_entropy");
  // default chunk: logits of at most 64 Mi floats (256 MiB) at once
  const int64_t dflt = std::max<int64_t>(1, (int64_t{1} << 26) / std::max<int64_t>(V, 1));
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(chunk_rows > 0 ? chunk_rows : dflt, T));
  Scratch logits(static_cast<size_t>(chunk * V) * sizeof(float));
  Scratch row_loss(static_cast<size_t>(T) * sizeof(double));
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c = std::min(chunk, T - c0);
    linear_forward(X + c0 * H, W, logits.as<float>(), c, V, H, false);
    ce_forward_rows(logits.as<float>(), labels + c0, c, V, lse + c0, row_loss.as<double>() + c0);
    if (dX) {
      ce_backward_const(logits.as<float>(), labels + c0, lse + c0, c, V, grad_scale, logits.as<float>());
      linear_backward(X + c0 * H, W, logits.as<float>(), dX + c0 * H, dW, c, V, H, false);
    }
  }
  return sum_row_losses(row_loss.as<double>(), T);
}

double sum_row_losses(const double* row_loss, int64_t T) {
  std::vector<double> host(static_cast<size_t>(T));
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(host.data(), row_loss, host.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                     detail::stream()));
  TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  double loss = 0.0;  // row order, as the CPU kernel
  for (double v : host) loss += v;
  return loss;
}

}  // namespace twinkle::cuda::ops
