// twinkle/core/hash.h — the two 64-bit hashes every seeded draw is built from.
//
// The seeded random init (Qwen3Model::init_random: a generator per tensor name), LoRA's init
// (qwen3_lora.cpp), LoRA dropout masks (parallel/lora_dropout.h, src/kernels/lora_mask_row.h), the
// dataloader's epoch shuffle (data/dataloader.cpp) and the dataset mixture's sampling and shuffle
// (data/mixture.cpp) derive their streams from these, so every layout draws the same numbers. The
// PyTorch references take twinkle's draws as inputs (the adapter twinkle saved at init, the masks of
// the dropout test hook) or start from a checkpoint of their own; tests/reference/kernels_ref.py
// reimplements splitmix64 and the mask rule from the paper.
#pragma once
#include <cstdint>
#include <string_view>

// splitmix64 is also called from device code (the CUDA LoRA dropout mask, src/kernels/cuda/lora.cu).
#include "twinkle/core/host_device.h"

namespace twinkle {

/// 64-bit FNV-1a of the bytes of `s` (offset basis 14695981039346656037, prime 1099511628211;
/// Fowler, Noll, Vo: http://www.isthe.com/chongo/tech/comp/fnv/).
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

/// splitmix64's golden gamma, 2^64 / phi rounded to odd (Vigna's splitmix64.c); the LoRA dropout mask
/// also steps by it from one feature to the next (src/kernels/lora_mask_row.h).
inline constexpr uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ull;

/// The splitmix64 generator's output function applied to x + golden gamma (Steele, Lea, Flood,
/// "Fast splittable pseudorandom number generators", OOPSLA 2014; Vigna's splitmix64.c).
TWINKLE_HOST_DEVICE constexpr uint64_t splitmix64(uint64_t x) {
  x += kSplitmix64Gamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace twinkle
