#include "twinkle/kernels/cpu/grouped_linear.h"

#include <string>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/gemm.h"

namespace twinkle::kernels::cpu {

namespace {
void check_offsets(const char* fn, const int64_t* offsets, int64_t G) {
  check(G >= 0 && (G == 0 || offsets[0] == 0), std::string(fn) + ": offsets[0] must be 0");
  for (int64_t g = 0; g < G; ++g)
    check(offsets[g + 1] >= offsets[g], std::string(fn) + ": offsets decrease at group " + std::to_string(g));
}
}  // namespace

void grouped_linear_forward(const float* X, const float* W, float* Y, const int64_t* offsets, int64_t G, int64_t N,
                            int64_t K) {
  check_offsets("grouped_linear_forward", offsets, G);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], m = offsets[g + 1] - r0;
    if (m > 0) linear_forward(X + r0 * K, W + g * N * K, Y + r0 * N, m, N, K);
  }
}

void grouped_linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW,
                             const int64_t* offsets, int64_t G, int64_t N, int64_t K) {
  check_offsets("grouped_linear_backward", offsets, G);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], m = offsets[g + 1] - r0;
    if (m > 0)
      linear_backward(X + r0 * K, W + g * N * K, dY + r0 * N, dX + r0 * K, dW ? dW + g * N * K : nullptr, m, N, K);
  }
}

}  // namespace twinkle::kernels::cpu
