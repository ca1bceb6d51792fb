// A synthetic training row for the MPI test programs of tests/dist: `len` tokens with ids
// 100 + (seed*37 + t*11) % 1000, the first token unlabelled, positions 0..len-1, all attended.
// The same (len, seed) gives the same row on every rank.
#pragma once
#include <cstdint>

#include "twinkle/train/megatron_model.h"

namespace twinkle_test {

inline twinkle::EncodedRow synthetic_row(int64_t len, int32_t seed) {
  twinkle::EncodedRow r;
  for (int64_t t = 0; t < len; ++t) {
    const int32_t id = static_cast<int32_t>(100 + (seed * 37 + t * 11) % 1000);
    r.input_ids.push_back(id);
    r.labels.push_back(t == 0 ? twinkle::kIgnoreIndex : id);
    r.position_ids.push_back(static_cast<int32_t>(t));
    r.attention_mask.push_back(1);
  }
  r.length = len;
  return r;
}

}  // namespace twinkle_test
