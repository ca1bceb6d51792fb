// Grouped GEMM over experts' contiguous row blocks (see twinkle/kernels/cpu/grouped_gemm.h).
#include "twinkle/kernels/cpu/grouped_gemm.h"

#include <string>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/gemm.h"

namespace twinkle::kernels::cpu {

namespace {

void check(const char* fn, const int64_t* counts, int64_t E, int64_t w_stride, int64_t N, int64_t K) {
  if (E < 0 || N < 1 || K < 1 || w_stride < N * K)
    throw Error(std::string(fn) + ": need E >= 0, N, K >= 1 and w_stride >= N*K, got E=" + std::to_string(E) +
                " N=" + std::to_string(N) + " K=" + std::to_string(K) + " w_stride=" + std::to_string(w_stride));
  for (int64_t e = 0; e < E; ++e)
    if (counts[e] < 0)
      throw Error(std::string(fn) + ": counts[" + std::to_string(e) + "] = " + std::to_string(counts[e]) + " < 0");
}

}  // namespace

void grouped_linear_forward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                            float* Y, int64_t N, int64_t K, bool accumulate) {
  check("grouped_linear_forward", counts, E, w_stride, N, K);
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = counts[e];
    if (m > 0) linear_forward(X + row * K, W + e * w_stride, Y + row * N, m, N, K, accumulate);
    row += m;
  }
}

void grouped_linear_backward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                             const float* dY, float* dX, float* dW, int64_t N, int64_t K, bool accumulate_dx) {
  check("grouped_linear_backward", counts, E, w_stride, N, K);
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = counts[e];
    if (m > 0)
      linear_backward(X + row * K, W + e * w_stride, dY + row * N, dX ? dX + row * K : nullptr,
                      dW ? dW + e * w_stride : nullptr, m, N, K, accumulate_dx);
    row += m;
  }
}

}  // namespace twinkle::kernels::cpu
