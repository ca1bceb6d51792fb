// MoE token permutation (see twinkle/kernels/cpu/moe_permute.h).
#include "twinkle/kernels/cpu/moe_permute.h"

#include <cstring>
#include <string>

#include "../moe_routing_check.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu {

void moe_sort_by_expert(const int32_t* topk_idx, int64_t T, int64_t k, int64_t E, int64_t* counts,
                        int32_t* row_of_slot, int32_t* slot_of_row) {
  if (T < 0 || k < 1 || E < 1 || k > E)
    throw Error("moe_sort_by_expert: need T >= 0, E >= 1 and 1 <= k <= E, got T=" + std::to_string(T) +
                " k=" + std::to_string(k) + " E=" + std::to_string(E));
  for (int64_t e = 0; e < E; ++e) counts[e] = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* idx = topk_idx + t * k;
    kernels::detail::check_token_routing(idx, t, k, E);
    for (int64_t j = 0; j < k; ++j) ++counts[idx[j]];
  }
  // Counting sort without a scratch buffer: counts[e] becomes the next free row of expert e
  // (its exclusive prefix), is advanced while the slots are placed in ascending token order
  // (which keeps tokens sorted inside an expert), and ends at the next expert's offset; the
  // counts are then recovered as differences.
  int64_t off = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = counts[e];
    counts[e] = off;
    off += c;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = t * k + j;
      const int64_t r = counts[topk_idx[s]]++;
      row_of_slot[s] = static_cast<int32_t>(r);
      slot_of_row[r] = static_cast<int32_t>(s);
    }
  for (int64_t e = E - 1; e > 0; --e) counts[e] -= counts[e - 1];
}

void moe_permute_forward(const float* x, const int32_t* slot_of_row, float* out, int64_t rows, int64_t k, int64_t H) {
#pragma omp parallel for schedule(static) if (rows * H > 65536)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * H, x + (slot_of_row[r] / k) * H, static_cast<size_t>(H) * sizeof(float));
}

void moe_permute_keys(const uint64_t* key, const int32_t* slot_of_row, uint64_t* out, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; ++r) out[r] = key[slot_of_row[r] / k];
}

void moe_permute_backward(const float* dout, const int32_t* row_of_slot, float* dx, int64_t T, int64_t k, int64_t H,
                          bool accumulate) {
#pragma omp parallel for schedule(static) if (T * k * H > 65536)
  for (int64_t t = 0; t < T; ++t) {
    float* d = dx + t * H;
    if (!accumulate)
      for (int64_t h = 0; h < H; ++h) d[h] = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float* g = dout + static_cast<int64_t>(row_of_slot[t * k + j]) * H;
#pragma omp simd
      for (int64_t h = 0; h < H; ++h) d[h] += g[h];
    }
  }
}

void moe_unpermute_forward(const float* y, const int32_t* row_of_slot, const float* topk_w, float* out, int64_t T,
                           int64_t k, int64_t H) {
#pragma omp parallel for schedule(static) if (T * k * H > 65536)
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * H;
    for (int64_t h = 0; h < H; ++h) o[h] = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float w = topk_w[t * k + j];
      const float* src = y + static_cast<int64_t>(row_of_slot[t * k + j]) * H;
#pragma omp simd
      for (int64_t h = 0; h < H; ++h) o[h] += w * src[h];
    }
  }
}

void moe_unpermute_backward(const float* y, const int32_t* row_of_slot, const float* topk_w, const float* dout,
                            float* dy, float* dtopk_w, int64_t T, int64_t k, int64_t H) {
#pragma omp parallel for schedule(static) if (T * k * H > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* g = dout + t * H;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = row_of_slot[t * k + j];
      const float w = topk_w[t * k + j];
      const float* src = y + r * H;
      float* d = dy + r * H;
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (int64_t h = 0; h < H; ++h) {
        d[h] = w * g[h];
        dot += static_cast<double>(g[h]) * src[h];
      }
      dtopk_w[t * k + j] = static_cast<float>(dot);
    }
  }
}

}  // namespace twinkle::kernels::cpu
