// Internal to src/kernels: moe_sort_by_expert's check of one token's top-k experts (twinkle/kernels/cpu/
// moe_permute.h), with its messages defined once for the CPU kernel (src/kernels/cpu/moe_permute.cpp) and the
// CUDA one (src/kernels/cuda/moe.cu, which reports the token its device check found bad).
#pragma once
#include <cstdint>
#include <string>

#include "twinkle/core/error.h"

namespace twinkle::kernels::detail {

/// Throws twinkle::Error naming token t (and the slot) when one of its experts idx [k] lies outside [0, E)
/// or appears twice; returns otherwise.
inline void check_token_routing(const int32_t* idx, int64_t t, int64_t k, int64_t E) {
  for (int64_t j = 0; j < k; ++j) {
    if (idx[j] < 0 || idx[j] >= E)
      throw Error("moe_sort_by_expert: token " + std::to_string(t) + " slot " + std::to_string(j) +
                  " routes to expert " + std::to_string(idx[j]) + ", outside [0, " + std::to_string(E) + ")");
    for (int64_t i = 0; i < j; ++i)
      if (idx[i] == idx[j])
        throw Error("moe_sort_by_expert: token " + std::to_string(t) + " routes to expert " +
                    std::to_string(idx[j]) + " twice");
  }
}

}  // namespace twinkle::kernels::detail
