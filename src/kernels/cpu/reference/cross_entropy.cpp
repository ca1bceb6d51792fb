// Reference token cross entropy (torch.nn.functional.cross_entropy, ignore_index = -100) in Megatron's
// vocab-parallel pieces (megatron/core/tensor_parallel/cross_entropy.py), in double; and the unfused
// lm head + cross entropy (linear, cross entropy, linear backward on the whole [T, V] logits).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

namespace {
constexpr int32_t kIgnore = -100;
}

void ce_local_max(const float* logits, int64_t T, int64_t Vl, int64_t valid, float* row_max) {
  for (int64_t t = 0; t < T; ++t) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < valid; ++j) m = std::max(m, logits[t * Vl + j]);
    row_max[t] = m;
  }
}

void ce_local_sumexp_target(const float* logits, const int32_t* labels, const float* global_max, int64_t T,
                            int64_t Vl, int64_t valid, int64_t vstart, float* sum_exp, float* target_logit) {
  for (int64_t t = 0; t < T; ++t) {
    double s = 0.0;
    for (int64_t j = 0; j < valid; ++j) s += std::exp(static_cast<double>(logits[t * Vl + j]) - global_max[t]);
    sum_exp[t] = static_cast<float>(s);
    const int64_t c = static_cast<int64_t>(labels[t]) - vstart;
    target_logit[t] = (labels[t] != kIgnore && c >= 0 && c < valid) ? logits[t * Vl + c] : 0.0f;
  }
}

// d/dlogit_j of (lse - logit_label) = softmax_j - [j == label].
void ce_backward(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl, int64_t valid,
                 int64_t vstart, const float* row_scale, float* dlogits) {
  for (int64_t t = 0; t < T; ++t) {
    const double sc = row_scale ? row_scale[t] : 1.0;
    for (int64_t j = 0; j < Vl; ++j) {
      double d = 0.0;
      if (labels[t] != kIgnore && j < valid)
        d = sc * (std::exp(static_cast<double>(logits[t * Vl + j]) - lse[t]) - (labels[t] == vstart + j ? 1.0 : 0.0));
      dlogits[t * Vl + j] = static_cast<float>(d);
    }
  }
}

double cross_entropy_forward(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse) {
  double loss = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    check(labels[t] == kIgnore || (labels[t] >= 0 && labels[t] < V),
          "cross_entropy: label " + std::to_string(labels[t]) + " of row " + std::to_string(t) +
              " is outside [0, " + std::to_string(V) + ") and not -100");
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(logits[t * V + j]));
    double s = 0.0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[t * V + j] - mx);
    const double l = mx + std::log(s);
    lse[t] = static_cast<float>(l);
    if (labels[t] != kIgnore) loss += l - logits[t * V + labels[t]];
  }
  return loss;
}

double linear_cross_entropy(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H,
                            float grad_scale, float* lse, float* dX, float* dW, int64_t /*chunk_rows: unfused*/) {
  std::vector<float> logits(static_cast<size_t>(T * V));
  linear_forward(X, W, logits.data(), T, V, H, false);
  const double loss = cross_entropy_forward(logits.data(), labels, T, V, lse);
  if (dX) {
    std::vector<float> scale(static_cast<size_t>(T), grad_scale);
    ce_backward(logits.data(), labels, lse, T, V, V, 0, scale.data(), logits.data());
    linear_backward(X, W, logits.data(), dX, dW, T, V, H, false);
  }
  return loss;
}

}  // namespace twinkle::kernels::cpu::reference
