#include "twinkle/kernels/cpu/cross_entropy.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/vmath.h"
#include "ce_rows.h"

namespace twinkle::kernels::cpu {

namespace {

constexpr int64_t kParWork = 32768;  // elements below which rows run serially

using ce_rows::row_max;
using ce_rows::row_softmax_scaled;
using ce_rows::row_sumexp;

}  // namespace

int64_t count_valid_labels(const int32_t* labels, int64_t T) {
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t) n += labels[t] != kIgnoreIndex;
  return n;
}

void ce_local_max(const float* logits, int64_t T, int64_t Vl, int64_t valid, float* rmax) {
#pragma omp parallel for schedule(static) if (T * valid > kParWork)
  for (int64_t t = 0; t < T; ++t) rmax[t] = row_max(logits + t * Vl, valid);
}

void ce_local_sumexp_target(const float* logits, const int32_t* labels, const float* global_max, int64_t T,
                            int64_t Vl, int64_t valid, int64_t vstart, float* sum_exp, float* target_logit) {
#pragma omp parallel for schedule(static) if (T * valid > kParWork)
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * Vl;
    sum_exp[t] = static_cast<float>(row_sumexp(x, valid, global_max[t]));
    const int64_t lab = labels[t];
    target_logit[t] = (lab != kIgnoreIndex && lab >= vstart && lab < vstart + valid) ? x[lab - vstart] : 0.0f;
  }
}

void ce_backward(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl, int64_t valid,
                 int64_t vstart, const float* row_scale, float* dlogits) {
#pragma omp parallel for schedule(static) if (T * Vl > kParWork)
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * Vl;
    float* d = dlogits + t * Vl;
    const int64_t lab = labels[t];
    if (lab == kIgnoreIndex) {
#pragma omp simd
      for (int64_t j = 0; j < Vl; ++j) d[j] = 0.0f;
      continue;
    }
    const float sc = row_scale ? row_scale[t] : 1.0f;
    const float l = lse[t];
    row_softmax_scaled(x, d, valid, l, sc);
    for (int64_t j = valid; j < Vl; ++j) d[j] = 0.0f;
    if (lab >= vstart && lab < vstart + valid) d[lab - vstart] -= sc;
  }
}

double cross_entropy_forward(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse) {
  for (int64_t t = 0; t < T; ++t)
    if (labels[t] != kIgnoreIndex && (labels[t] < 0 || labels[t] >= V))
      throw Error("cross_entropy_forward: label " + std::to_string(labels[t]) + " of row " + std::to_string(t) +
                  " is outside [0, " + std::to_string(V) + ") and is not -100");
  std::vector<double> row_loss(static_cast<size_t>(T), 0.0);
#pragma omp parallel for schedule(static) if (T * V > kParWork)
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * V;
    const float mx = row_max(x, V);
    const double l = static_cast<double>(mx) + std::log(row_sumexp(x, V, mx));
    lse[t] = static_cast<float>(l);
    if (labels[t] != kIgnoreIndex) row_loss[t] = l - static_cast<double>(x[labels[t]]);
  }
  double loss = 0.0;  // summed in row order: independent of the thread count
  for (double v : row_loss) loss += v;
  return loss;
}

}  // namespace twinkle::kernels::cpu
