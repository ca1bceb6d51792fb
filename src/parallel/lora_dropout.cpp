#include "twinkle/parallel/lora_dropout.h"

#include <cmath>

#include "twinkle/core/hash.h"
#include "twinkle/kernels/cpu/lora.h"

namespace twinkle::parallel {

namespace {

thread_local const LoraDropout* g_current = nullptr;

}  // namespace

uint64_t lora_dropout_seed(uint64_t seed, int64_t step) {
  return splitmix64(splitmix64(seed ^ 0x6c6f7261ull /* "lora" */) ^ static_cast<uint64_t>(step));
}

uint64_t lora_token_key(int64_t global_row, int64_t position) {
  return (static_cast<uint64_t>(global_row) << 32) | static_cast<uint64_t>(position & 0xffffffff);
}

uint64_t lora_module_key(const std::string& module) {
  return fnv1a64(module);
}

uint64_t lora_dropout_threshold(float p) {
  return static_cast<uint64_t>(std::llround(static_cast<double>(p) * 16777216.0));
}

void lora_dropout_mask(const LoraDropout& d, uint64_t module_key, int64_t feature0, int64_t in_l, uint8_t* m) {
  kernels::cpu::lora_dropout_mask(d.token_key, d.T, d.seed, module_key, feature0, in_l, lora_dropout_threshold(d.p), m);
}

const LoraDropout* current_lora_dropout() { return g_current; }

LoraDropoutScope::LoraDropoutScope(const LoraDropout* d) : prev_(g_current) { g_current = d; }
LoraDropoutScope::~LoraDropoutScope() { g_current = prev_; }

}  // namespace twinkle::parallel
