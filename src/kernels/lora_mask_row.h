// Internal to src/kernels: the LoRA dropout mask rule of LoraOp::dropout_mask (twinkle/kernels/ops.h;
// the layout-independent rule of twinkle/parallel/lora_dropout.h), defined once for the CPU fused kernel
// (src/kernels/cpu/lora.cpp) and the CUDA one (src/kernels/cuda/lora.cu), so both draw the same masks bit
// for bit. The reference set (src/kernels/cpu/reference/lora.cpp) keeps its own element-by-element
// transcription of ops.h's formula, and tests/reference/kernels_ref.py one written from the paper.
#pragma once
#include <cstdint>

#include "twinkle/core/hash.h"
#include "twinkle/core/host_device.h"

namespace twinkle::kernels::detail {

/// The module's base hash: splitmix64(seed ^ module_key).
TWINKLE_HOST_DEVICE constexpr uint64_t lora_mask_base(uint64_t seed, uint64_t module_key) {
  return splitmix64(seed ^ module_key);
}

/// A token's hash under the module's base: splitmix64(base ^ splitmix64(token_key)).
TWINKLE_HOST_DEVICE constexpr uint64_t lora_mask_token(uint64_t base, uint64_t token_key) {
  return splitmix64(base ^ splitmix64(token_key));
}

/// 1 (kept) or 0 for global input feature `feature` of the token with hash `token_hash`: the top 24 bits
/// of splitmix64(token_hash + feature * golden gamma) against `threshold` (round(p * 2^24)).
TWINKLE_HOST_DEVICE constexpr uint8_t lora_mask_keep(uint64_t token_hash, int64_t feature, uint64_t threshold) {
  return (splitmix64(token_hash + static_cast<uint64_t>(feature) * kSplitmix64Gamma) >> 40) >= threshold ? 1 : 0;
}

}  // namespace twinkle::kernels::detail
