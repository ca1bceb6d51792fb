// Top-k softmax router (see twinkle/kernels/cpu/moe_router.h).
#include "twinkle/kernels/cpu/moe_router.h"

#include <cmath>
#include <string>
#include <vector>

#include "../moe_router_row.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu {

namespace {

void check_sizes(const char* fn, int64_t T, int64_t E, int64_t k) {
  if (T < 0 || E < 1 || k < 1 || k > E)
    throw Error(std::string(fn) + ": need T >= 0, E >= 1 and 1 <= k <= E, got T=" + std::to_string(T) +
                " E=" + std::to_string(E) + " k=" + std::to_string(k));
}

}  // namespace

void moe_router_forward(const float* logits, float* probs, int32_t* topk_idx, float* topk_w, int64_t T, int64_t E,
                        int64_t k, bool norm_topk_prob) {
  check_sizes("moe_router_forward", T, E, k);
#pragma omp parallel for schedule(static) if (T * E > 16384)
  for (int64_t t = 0; t < T; ++t)
    detail::moe_route_row(logits + t * E, probs + t * E, topk_idx + t * k, topk_w + t * k, E, k, norm_topk_prob);
}

void moe_router_backward(const float* probs, const int32_t* topk_idx, const float* topk_w, const float* dtopk_w,
                         const float* dprobs, const float* dlogits_extra, float* dlogits, int64_t T, int64_t E,
                         int64_t k, bool norm_topk_prob) {
  check_sizes("moe_router_backward", T, E, k);
#pragma omp parallel for schedule(static) if (T * E > 16384)
  for (int64_t t = 0; t < T; ++t) {
    const float* p = probs + t * E;
    const int32_t* idx = topk_idx + t * k;
    const float* w = topk_w + t * k;
    // dp = dprobs + (the top-k slots' gradient, on the selected experts only); no per-token buffer.
    double dsel[64];
    double* ds = k <= 64 ? dsel : nullptr;
    std::vector<double> dsel_big;
    if (!ds) {
      dsel_big.assign(static_cast<size_t>(k), 0.0);
      ds = dsel_big.data();
    }
    for (int64_t j = 0; j < k; ++j) ds[j] = 0.0;
    if (dtopk_w) {
      const float* dw = dtopk_w + t * k;
      if (norm_topk_prob) {
        // w_j = p_j / s  =>  dp_j = (dw_j - sum_i dw_i w_i) / s
        double s = 0.0, dot = 0.0;
        for (int64_t j = 0; j < k; ++j) s += p[idx[j]];
        for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(dw[j]) * w[j];
        for (int64_t j = 0; j < k; ++j) ds[j] = (dw[j] - dot) / s;
      } else {
        for (int64_t j = 0; j < k; ++j) ds[j] = dw[j];
      }
    }
    double dot = 0.0;
    const float* dpr = dprobs ? dprobs + t * E : nullptr;
    if (dpr)
      for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(dpr[e]) * p[e];
    for (int64_t j = 0; j < k; ++j) dot += ds[j] * p[idx[j]];
    float* dl = dlogits + t * E;
    const float* ex = dlogits_extra ? dlogits_extra + t * E : nullptr;
    for (int64_t e = 0; e < E; ++e) {
      const double dpe = dpr ? dpr[e] : 0.0;
      const double extra = ex ? ex[e] : 0.0;
      dl[e] = static_cast<float>(p[e] * (dpe - dot) + extra);
    }
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += static_cast<float>(p[idx[j]] * ds[j]);
  }
}

}  // namespace twinkle::kernels::cpu
