#include "twinkle/parallel/lora_dropout.h"

#include <cmath>

#include "twinkle/core/hash.h"

namespace twinkle::parallel {

namespace {

uint64_t mix(uint64_t x) { return splitmix64(x); }

thread_local const LoraDropout* g_current = nullptr;

}  // namespace

uint64_t lora_dropout_seed(uint64_t seed, int64_t step) {
  return mix(mix(seed ^ 0x6c6f7261ull /* "lora" */) ^ static_cast<uint64_t>(step));
}

uint64_t lora_token_key(int64_t global_row, int64_t position) {
  return (static_cast<uint64_t>(global_row) << 32) | static_cast<uint64_t>(position & 0xffffffff);
}

uint64_t lora_module_key(const std::string& module) {
  return fnv1a64(module);
}

void lora_dropout_mask(const LoraDropout& d, uint64_t module_key, int64_t feature0, int64_t in_l, uint8_t* m) {
  const uint64_t thr = static_cast<uint64_t>(std::llround(static_cast<double>(d.p) * 16777216.0));
  const uint64_t base = mix(d.seed ^ module_key);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < d.T; ++t) {
    const uint64_t h = mix(base ^ mix(d.token_key[t]));
    uint8_t* row = m + t * in_l;
    for (int64_t i = 0; i < in_l; ++i)
      row[i] = (mix(h + static_cast<uint64_t>(feature0 + i) * 0x9e3779b97f4a7c15ull) >> 40) >= thr ? 1 : 0;
  }
}

const LoraDropout* current_lora_dropout() { return g_current; }

LoraDropoutScope::LoraDropoutScope(const LoraDropout* d) : prev_(g_current) { g_current = d; }
LoraDropoutScope::~LoraDropoutScope() { g_current = prev_; }

}  // namespace twinkle::parallel
