// MoE load-balancing loss, z-loss and load statistics (see twinkle/kernels/cpu/moe_aux_loss.h).
#include "twinkle/kernels/cpu/moe_aux_loss.h"

#include <algorithm>
#include <cmath>

namespace twinkle::kernels::cpu {

int64_t moe_routing_stats(const float* probs, const int32_t* topk_idx, const uint8_t* token_mask, int64_t T,
                          int64_t E, int64_t k, double* prob_sum, int64_t* counts) {
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (token_mask && !token_mask[t]) continue;
    ++n;
    const float* p = probs + t * E;
    for (int64_t e = 0; e < E; ++e) prob_sum[e] += p[e];
    for (int64_t j = 0; j < k; ++j) ++counts[topk_idx[t * k + j]];
  }
  return n;
}

double moe_aux_loss_value(const double* prob_sum, const int64_t* counts, int64_t E, double scale) {
  double s = 0.0;
  for (int64_t e = 0; e < E; ++e) s += static_cast<double>(counts[e]) * prob_sum[e];
  return scale * s;
}

double moe_aux_scale_global(int64_t E, int64_t n) {
  return n > 0 ? static_cast<double>(E) / (static_cast<double>(n) * static_cast<double>(n)) : 0.0;
}

double moe_aux_scale_per_layer(int64_t E, int64_t k, int64_t n) {
  return n > 0 ? static_cast<double>(E) / (static_cast<double>(k) * static_cast<double>(n) * static_cast<double>(n))
               : 0.0;
}

void moe_aux_loss_backward(const int64_t* counts, const uint8_t* token_mask, int64_t T, int64_t E,
                           double coeff_scale, float* dprobs) {
#pragma omp parallel for schedule(static) if (T * E > 65536)
  for (int64_t t = 0; t < T; ++t) {
    if (token_mask && !token_mask[t]) continue;
    float* d = dprobs + t * E;
    for (int64_t e = 0; e < E; ++e) d[e] += static_cast<float>(coeff_scale * static_cast<double>(counts[e]));
  }
}

double moe_z_loss_forward(const float* logits, const uint8_t* token_mask, int64_t T, int64_t E, float* lse) {
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (T * E > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * E;
    float mx = x[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, x[e]);
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += std::exp(static_cast<double>(x[e]) - mx);
    const double l = mx + std::log(s);
    lse[t] = static_cast<float>(l);
    if (!token_mask || token_mask[t]) total += l * l;
  }
  return total;
}

void moe_z_loss_backward(const float* probs, const float* lse, const uint8_t* token_mask, int64_t T, int64_t E,
                         double scale, float* dlogits) {
#pragma omp parallel for schedule(static) if (T * E > 65536)
  for (int64_t t = 0; t < T; ++t) {
    if (token_mask && !token_mask[t]) continue;
    const double c = 2.0 * scale * lse[t];
    for (int64_t e = 0; e < E; ++e) dlogits[t * E + e] += static_cast<float>(c * probs[t * E + e]);
  }
}

ExpertLoad moe_expert_load(const int64_t* counts, int64_t E) {
  ExpertLoad r;
  int64_t total = 0, mx = 0, mn = 0;
  for (int64_t e = 0; e < E; ++e) {
    total += counts[e];
    if (e == 0 || counts[e] > mx) mx = counts[e];
    if (e == 0 || counts[e] < mn) mn = counts[e];
  }
  if (total <= 0) return r;
  r.max_share = static_cast<double>(mx) / static_cast<double>(total);
  r.min_share = static_cast<double>(mn) / static_cast<double>(total);
  return r;
}

}  // namespace twinkle::kernels::cpu
