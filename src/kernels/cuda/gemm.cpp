// CUDA GEMM ops through cuBLAS in fp32 without TF32 (CUBLAS_DEFAULT_MATH; runtime.h): linear,
// grouped linear (MoE experts: every expert's GEMM over its contiguous rows in one cublasSgemmGroupedBatched call,
// counts on the host),
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

namespace {

// Row-major problems C [M, N] = alpha op(A) op(B) + beta C (gemm_rm's arguments), one per expert with rows,
// run as ONE cublasSgemmGroupedBatched call (each problem its own group of size 1; the matrix pointer arrays
// uploaded to device scratch, stream-ordered). Each problem is gemm_rm's column-major swap, so the sums are
// those of the per-expert sgemm calls.
struct GroupedGemm {
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  std::vector<const float*> A, B;
  std::vector<float*> C;

  void add(bool tA, bool tB, int64_t M, int64_t N, int64_t K, float al, const float* a, int64_t la, const float* b,
           int64_t lb, float be, float* c, int64_t lc) {
    const int64_t lim = int64_t{1} << 31;
    check(M < lim && N < lim && K < lim && la < lim && lb < lim && lc < lim,
          "cuda grouped GEMM: a dimension exceeds the 32-bit range of cuBLAS");
    // column-major C^T = op(B)^T op(A)^T: cuBLAS's A is our B (gemm_rm)
    ta.push_back(tB ? CUBLAS_OP_T : CUBLAS_OP_N);
    tb.push_back(tA ? CUBLAS_OP_T : CUBLAS_OP_N);
    m.push_back(static_cast<int>(N));
    n.push_back(static_cast<int>(M));
    k.push_back(static_cast<int>(K));
    A.push_back(b);
    lda.push_back(static_cast<int>(lb));
    B.push_back(a);
    ldb.push_back(static_cast<int>(la));
    C.push_back(c);
    ldc.push_back(static_cast<int>(lc));
    alpha.push_back(al);
    beta.push_back(be);
    size.push_back(1);
  }

  void run(const char* what) {
    const size_t g = size.size();
    if (g == 0) return;
    if (g == 1) {  // one problem: the plain GEMM (no pointer upload)
      TWINKLE_CUBLAS_CHECK(detail::cublas().sgemm(detail::handle(), ta[0], tb[0], m[0], n[0], k[0], &alpha[0], A[0],
                                                  lda[0], B[0], ldb[0], &beta[0], C[0], ldc[0]));
      TWINKLE_CUDA_LAUNCHED(what);
      return;
    }
    std::vector<const void*> ptrs;
    ptrs.reserve(3 * g);
    for (const float* p : A) ptrs.push_back(p);
    for (const float* p : B) ptrs.push_back(p);
    for (float* p : C) ptrs.push_back(p);
    Scratch dev(ptrs.size() * sizeof(void*));
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(dev.p, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice,
                                       detail::stream()));
    void** base = dev.as<void*>();
    TWINKLE_CUBLAS_CHECK(detail::cublas().sgemm_grouped_batched(
        detail::handle(), ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
        reinterpret_cast<const float* const*>(base), lda.data(), reinterpret_cast<const float* const*>(base + g),
        ldb.data(), beta.data(), reinterpret_cast<float* const*>(base + 2 * g), ldc.data(), static_cast<int>(g),
        size.data()));
    TWINKLE_CUDA_LAUNCHED(what);
  }
};

void check_counts(const char* fn, const int64_t* counts, int64_t E) {
  for (int64_t e = 0; e < E; ++e)
    check(counts[e] >= 0, std::string(fn) + " (cuda): count " + std::to_string(counts[e]) + " of expert " +
                              std::to_string(e) + " is negative");
}

}  // namespace

// The experts' GEMMs as one grouped call per product (Megatron-core's GroupedMLP / TEGroupedLinear over all local
// experts); experts without rows are left out (their dW untouched, as the CPU set).
void grouped_linear_forward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                            float* Y, int64_t N, int64_t K, bool accumulate) {
  check_counts("grouped_linear_forward", counts, E);
  GroupedGemm g;
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (counts[e] > 0 && N > 0 && K > 0)
      g.add(false, true, counts[e], N, K, 1.0f, X + r * K, K, W + e * w_stride, K, accumulate ? 1.0f : 0.0f, Y + r * N,
            N);
    else if (counts[e] > 0 && N > 0)  // K = 0: Y = 0 (or unchanged)
      linear_forward(X + r * K, W + e * w_stride, Y + r * N, counts[e], N, K, accumulate);
    r += counts[e];
  }
  g.run("grouped_linear_forward (cublasSgemmGroupedBatched)");
}

void grouped_linear_backward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                             const float* dY, float* dX, float* dW, int64_t N, int64_t K, bool accumulate_dx) {
  check_counts("grouped_linear_backward", counts, E);
  GroupedGemm gx, gw;
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = counts[e];
    if (c > 0 && N > 0 && K > 0) {
      if (dX) gx.add(false, false, c, K, N, 1.0f, dY + r * N, N, W + e * w_stride, K, accumulate_dx ? 1.0f : 0.0f,
                     dX + r * K, K);
      if (dW) gw.add(true, false, N, K, c, 1.0f, dY + r * N, N, X + r * K, K, 1.0f, dW + e * w_stride, K);
    } else if (c > 0) {
      linear_backward(X + r * K, W + e * w_stride, dY + r * N, dX ? dX + r * K : nullptr,
                      dW ? dW + e * w_stride : nullptr, c, N, K, accumulate_dx);
    }
    r += c;
  }
  gx.run("grouped_linear_backward dX (cublasSgemmGroupedBatched)");
  gw.run("grouped_linear_backward dW (cublasSgemmGroupedBatched)");
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
