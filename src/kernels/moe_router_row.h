// Internal to src/kernels: one token's top-k softmax routing (twinkle/kernels/cpu/moe_router.h), defined once
// for the CPU fused kernel (src/kernels/cpu/moe_router.cpp) and the CUDA one (src/kernels/cuda/moe.cu), so
// both compute the same floats in the same order.
#pragma once
#include <cmath>
#include <cstdint>

#include "twinkle/core/host_device.h"

namespace twinkle::kernels::detail {

/// Token row x [E] -> p [E] (softmax: the max, float exponentials summed in double, one float
/// reciprocal), idx / w [k] (top-k by repeated selection: strictly greater wins, so equal values go to
/// the lower expert, torch.topk's order; renormalised in float when norm_topk_prob, as transformers'
/// routing_weights /= routing_weights.sum(-1)). k passes over E; k and E are small (<= 8 of 128).
TWINKLE_HOST_DEVICE inline void moe_route_row(const float* x, float* p, int32_t* idx, float* w, int64_t E, int64_t k,
                                              bool norm_topk_prob) {
  float mx = x[0];
  for (int64_t e = 1; e < E; ++e) mx = x[e] > mx ? x[e] : mx;
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    const float v = expf(x[e] - mx);
    p[e] = v;
    sum += v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t e = 0; e < E; ++e) p[e] *= inv;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= idx[i] == e;
      if (taken) continue;
      if (best < 0 || p[e] > p[best]) best = e;
    }
    idx[j] = static_cast<int32_t>(best);
    w[j] = p[best];
  }
  if (norm_topk_prob) {
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) s += w[j];
    for (int64_t j = 0; j < k; ++j) w[j] /= s;
  }
}

}  // namespace twinkle::kernels::detail
