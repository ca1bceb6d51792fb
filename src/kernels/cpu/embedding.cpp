#include "twinkle/kernels/cpu/embedding.h"

#include <cstring>
#include <string>

#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu {

void check_token_ids(const int32_t* ids, int64_t T, int64_t vocab_size) {
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= vocab_size)
      throw Error("token id " + std::to_string(ids[t]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
}

void embedding_forward(const float* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t vstart,
                       int64_t Vl) {
#pragma omp parallel for schedule(static) if (T * H > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = static_cast<int64_t>(ids[t]) - vstart;
    float* o = out + t * H;
    if (r >= 0 && r < Vl)
      std::memcpy(o, table + r * H, static_cast<size_t>(H) * sizeof(float));
    else
      std::memset(o, 0, static_cast<size_t>(H) * sizeof(float));
  }
}

void embedding_backward(const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H, int64_t vstart,
                        int64_t Vl) {
  // Column blocks of 64 floats: every block walks all tokens in order, so repeated ids never race
  // and the summation order is fixed.
  constexpr int64_t kBlock = 64;
  const int64_t nb = (H + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (T * H > 65536 && nb > 1)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t c0 = b * kBlock, c1 = c0 + kBlock < H ? c0 + kBlock : H;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t r = static_cast<int64_t>(ids[t]) - vstart;
      if (r < 0 || r >= Vl) continue;
      float* d = dtable + r * H;
      const float* g = dout + t * H;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

}  // namespace twinkle::kernels::cpu
