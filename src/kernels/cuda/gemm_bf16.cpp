// The CUDA "bf16" kernel set's GEMM ops (mixed precision, Qwen3ModelOptions::mixed_precision = "bf16"):
// linear, grouped linear, gate|up + SwiGLU and lm head + cross entropy with every GEMM input rounded to
// bf16 (bf16.h: round-to-nearest-even into device scratch) and cublasGemmEx summing in fp32
// (CUDA_R_16BF A / B, CUDA_R_32F C, CUBLAS_COMPUTE_32F: tensor cores with fp32 accumulation; the experts'
// grouped GEMMs: one launch of grouped_gemm_bf16.cu's tensor-core kernel per product, the same numbers) — the
// rounding points of the CPU set, twinkle/kernels/cpu/bf16_ops.h (activations, weights and output
// gradients rounded; SwiGLU, log-sum-exp, cross entropy and the weight gradients' accumulation fp32; the
// GEMM output not rounded), so a CUDA bf16 run differs from a CPU bf16 run only in fp32 summation order.
// The bf16 copy of a weight is made from the fp32 parameter at each use (as the CPU set; Megatron's
// Float16Module keeps one refreshed after each optimizer step: the same numbers).
#include <algorithm>
#include <string>
#include <vector>

#include "bf16.h"
#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

// Row-major C [M, N] = op(A) op(B) + beta * C on bf16 A / B (bit patterns) and fp32 C, as gemm.cpp's
// gemm_rm: the column-major C^T = op(B)^T op(A)^T with the operands swapped. beta is 0 or 1.
void gemm_rm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (beta == 0.0f)
      TWINKLE_CUDA_CHECK(cudaMemset2DAsync(C, static_cast<size_t>(ldc) * sizeof(float), 0,
                                           static_cast<size_t>(N) * sizeof(float), static_cast<size_t>(M),
                                           detail::stream()));
    return;
  }
  const int64_t lim = int64_t{1} << 31;
  check(M < lim && N < lim && K < lim && lda < lim && ldb < lim && ldc < lim,
        "cuda bf16 GEMM: a dimension exceeds the 32-bit range of cuBLAS");
  const float alpha = 1.0f;
  TWINKLE_CUBLAS_CHECK(detail::cublas().gemm_ex(
      detail::handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
      static_cast<int>(M), static_cast<int>(K), &alpha, B, CUDA_R_16BF, static_cast<int>(ldb), A, CUDA_R_16BF,
      static_cast<int>(lda), &beta, C, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  TWINKLE_CUDA_LAUNCHED("cublasGemmEx (bf16)");
}

// The bf16 copy of n contiguous fp32 device values, in scratch returned at scope exit.
struct Bf16Copy {
  Scratch s;
  Bf16Copy(const float* src, int64_t n) : s(static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(uint16_t)) {
    f32_to_bf16(src, s.as<uint16_t>(), n);
  }
  const uint16_t* get() const { return s.as<uint16_t>(); }
};

}  // namespace

void linear_forward_bf16(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K,
                         bool accumulate) {
  if (M <= 0 || N <= 0) return;
  const Bf16Copy x(X, M * K), w(W, N * K);
  gemm_rm_bf16(false, true, M, N, K, x.get(), K, w.get(), K, accumulate ? 1.0f : 0.0f, Y, N);
}

void linear_backward_bf16(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M,
                          int64_t N, int64_t K, bool accumulate_dx) {
  if (M <= 0 || N <= 0 || K <= 0) {  // nothing to multiply: dX = 0 unless accumulating, dW unchanged
    if (dX && !accumulate_dx && M > 0 && K > 0)
      TWINKLE_CUDA_CHECK(cudaMemsetAsync(dX, 0, static_cast<size_t>(M * K) * sizeof(float), detail::stream()));
    return;
  }
  const Bf16Copy dy(dY, M * N);
  if (dX) {
    const Bf16Copy w(W, N * K);
    gemm_rm_bf16(false, false, M, K, N, dy.get(), N, w.get(), K, accumulate_dx ? 1.0f : 0.0f, dX, K);
  }
  if (dW) {
    const Bf16Copy x(X, M * K);
    gemm_rm_bf16(true, false, N, K, M, dy.get(), N, x.get(), K, 1.0f, dW, K);
  }
}

namespace {

// The rows of each expert (counts: host memory, checked non-negative); their sum.
int64_t grouped_rows(const char* fn, const int64_t* counts, int64_t E) {
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    check(counts[e] >= 0, std::string(fn) + " (cuda, bf16): count " + std::to_string(counts[e]) + " of expert " +
                              std::to_string(e) + " is negative");
    r += counts[e];
  }
  return r;
}

// The elements of the E experts' weights (expert e at e * w_stride, each N x K).
int64_t grouped_weight_elems(int64_t E, int64_t w_stride, int64_t N, int64_t K) {
  return E > 0 ? (E - 1) * w_stride + N * K : 0;
}

}  // namespace

// The experts' GEMMs as one launch per product (grouped_gemm_bf16.cu), on bf16 copies of the rows, the weights
// and the output gradient made once per call.
void grouped_linear_forward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                                 float* Y, int64_t N, int64_t K, bool accumulate) {
  const int64_t R = grouped_rows("grouped_linear_forward", counts, E);
  if (R == 0 || N <= 0) return;
  check(K > 0 || accumulate, "grouped_linear_forward (cuda, bf16): K is 0");
  if (K <= 0) return;
  const Bf16Copy x(X, R * K), w(W, grouped_weight_elems(E, w_stride, N, K));
  std::vector<GroupedGemmProblem> p;
  for (int64_t e = 0, r = 0; e < E; r += counts[e], ++e)  // Y_e [c, N] = X_e [c, K] W_e^T
    p.push_back({r * K, e * w_stride, r * N, counts[e], N, K});
  grouped_gemm_bf16(false, true, p, x.get(), K, w.get(), K, accumulate, Y, N, "grouped_linear_forward (cuda, bf16)");
}

void grouped_linear_backward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts,
                                  int64_t E, const float* dY, float* dX, float* dW, int64_t N, int64_t K,
                                  bool accumulate_dx) {
  const int64_t R = grouped_rows("grouped_linear_backward", counts, E);
  if (R == 0 || N <= 0 || K <= 0) {  // nothing to multiply: dX = 0 unless accumulating, dW unchanged
    if (dX && !accumulate_dx && R > 0 && K > 0)
      TWINKLE_CUDA_CHECK(cudaMemsetAsync(dX, 0, static_cast<size_t>(R * K) * sizeof(float), detail::stream()));
    return;
  }
  const Bf16Copy dy(dY, R * N);
  if (dX) {  // dX_e [c, K] = dY_e [c, N] W_e [N, K]
    const Bf16Copy w(W, grouped_weight_elems(E, w_stride, N, K));
    std::vector<GroupedGemmProblem> p;
    for (int64_t e = 0, r = 0; e < E; r += counts[e], ++e) p.push_back({r * N, e * w_stride, r * K, counts[e], K, N});
    grouped_gemm_bf16(false, false, p, dy.get(), N, w.get(), K, accumulate_dx, dX, K,
                      "grouped_linear_backward dX (cuda, bf16)");
  }
  if (dW) {  // dW_e [N, K] += dY_e^T [N, c] X_e [c, K]
    const Bf16Copy x(X, R * K);
    std::vector<GroupedGemmProblem> p;
    for (int64_t e = 0, r = 0; e < E; r += counts[e], ++e) p.push_back({r * N, r * K, e * w_stride, N, K, counts[e]});
    grouped_gemm_bf16(true, false, p, dy.get(), N, x.get(), K, true, dW, K, "grouped_linear_backward dW (cuda, bf16)");
  }
}

void gate_up_swiglu_forward_bf16(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I,
                                 int64_t H) {
  linear_forward_bf16(X, Wgu, gu, T, 2 * I, H, false);
  swiglu_forward_rows(gu, 2 * I, gu + I, 2 * I, a, I, T, I);
}

void gate_up_swiglu_backward_bf16(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                                  float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx) {
  swiglu_backward_rows(gu, 2 * I, gu + I, 2 * I, da, I, dgu, 2 * I, dgu + I, 2 * I, T, I);  // fp32
  linear_backward_bf16(X, Wgu, dgu, dX, dWgu, T, 2 * I, H, accumulate_dx);
}

double linear_cross_entropy_bf16(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V,
                                 int64_t H, float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows) {
  if (T <= 0) return 0.0;
  check_labels(labels, T, V, "linear_cross_entropy");
  const int64_t dflt = std::max<int64_t>(1, (int64_t{1} << 26) / std::max<int64_t>(V, 1));  // as the fp32 op
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(chunk_rows > 0 ? chunk_rows : dflt, T));
  const Bf16Copy w(W, V * H);  // once per call: the logits and both backward GEMMs read it
  Scratch logits(static_cast<size_t>(chunk * V) * sizeof(float));
  Scratch dlogits(dX ? static_cast<size_t>(chunk * V) * sizeof(uint16_t) : 0);
  Scratch xb(static_cast<size_t>(chunk * H) * sizeof(uint16_t));
  Scratch row_loss(static_cast<size_t>(T) * sizeof(double));
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c = std::min(chunk, T - c0);
    f32_to_bf16(X + c0 * H, xb.as<uint16_t>(), c * H);
    gemm_rm_bf16(false, true, c, V, H, xb.as<uint16_t>(), H, w.get(), H, 0.0f, logits.as<float>(), V);
    ce_forward_rows(logits.as<float>(), labels + c0, c, V, lse + c0, row_loss.as<double>() + c0);
    if (dX) {  // the backward (ops.h: only with dX; dW may be null)
      ce_backward_const(logits.as<float>(), labels + c0, lse + c0, c, V, grad_scale, logits.as<float>());  // fp32
      f32_to_bf16(logits.as<float>(), dlogits.as<uint16_t>(), c * V);
      gemm_rm_bf16(false, false, c, H, V, dlogits.as<uint16_t>(), V, w.get(), H, 0.0f, dX + c0 * H, H);
      if (dW) gemm_rm_bf16(true, false, V, H, c, dlogits.as<uint16_t>(), V, xb.as<uint16_t>(), H, 1.0f, dW, H);
    }
  }
  return sum_row_losses(row_loss.as<double>(), T);
}

}  // namespace twinkle::cuda::ops
