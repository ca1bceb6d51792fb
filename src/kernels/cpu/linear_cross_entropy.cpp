#include "twinkle/kernels/cpu/linear_cross_entropy.h"

#include <algorithm>
#include <vector>

#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/gemm.h"

namespace twinkle::kernels::cpu {

double linear_cross_entropy(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H,
                            float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows) {
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(chunk_rows > 0 ? chunk_rows : 1024, T));
  thread_local std::vector<float> logits, scale;  // grow-only, kept between calls
  if (logits.size() < static_cast<size_t>(chunk * V)) logits.resize(static_cast<size_t>(chunk * V));
  if (scale.size() < static_cast<size_t>(chunk)) scale.resize(static_cast<size_t>(chunk));
  double loss = 0.0;
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c = std::min(chunk, T - c0);
    linear_forward(X + c0 * H, W, logits.data(), c, V, H);
    loss += cross_entropy_forward(logits.data(), labels + c0, c, V, lse + c0);
    if (dX) {
      std::fill(scale.begin(), scale.begin() + c, grad_scale);
      ce_backward(logits.data(), labels + c0, lse + c0, c, V, V, 0, scale.data(), logits.data());
      linear_backward(X + c0 * H, W, logits.data(), dX + c0 * H, dW, c, V, H);
    }
  }
  return loss;
}

}  // namespace twinkle::kernels::cpu
