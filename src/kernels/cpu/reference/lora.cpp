// Reference LoraOp: the formulas of ops.h as plain loops with double sums (PEFT's LoRA term and its
// gradients; the dropout mask of twinkle/parallel/lora_dropout.h element by element).
#include <vector>

#include "reference.h"
#include "twinkle/core/hash.h"

namespace twinkle::kernels::cpu::reference {

void lora_dropout_mask(const uint64_t* token_key, int64_t T, uint64_t seed, uint64_t module_key, int64_t feature0,
                       int64_t in_l, uint64_t threshold, uint8_t* m) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < in_l; ++i) {
      const uint64_t tok = splitmix64(splitmix64(seed ^ module_key) ^ splitmix64(token_key[t]));
      const uint64_t u = splitmix64(tok + static_cast<uint64_t>(feature0 + i) * 0x9e3779b97f4a7c15ull) >> 40;
      m[t * in_l + i] = u >= threshold ? 1 : 0;
    }
}

void lora_dropout_apply(const float* x, const uint8_t* m, float keep_scale, float* xd, int64_t n) {
  for (int64_t i = 0; i < n; ++i) xd[i] = m[i] ? static_cast<float>(static_cast<double>(x[i]) * keep_scale) : 0.0f;
}

void lora_dropout_backward(const float* g, const uint8_t* m, float keep_scale, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (m[i]) dx[i] = static_cast<float>(dx[i] + static_cast<double>(g[i]) * keep_scale);
}

void lora_forward(const float* x, const float* A, const float* B, float* h, float* y, int64_t T, int64_t in,
                  int64_t out, int64_t r, float scaling) {
  std::vector<double> hd(static_cast<size_t>(r));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < r; ++j) {  // h[t, j] = sum_i x[t, i] A[j, i]
      double s = 0.0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(x[t * in + i]) * A[j * in + i];
      hd[j] = s;
      h[t * r + j] = static_cast<float>(s);
    }
    for (int64_t o = 0; o < out; ++o) {  // y[t, o] += scaling sum_j h[t, j] B[o, j]
      double s = 0.0;
      for (int64_t j = 0; j < r; ++j) s += hd[j] * B[o * r + j];
      y[t * out + o] = static_cast<float>(y[t * out + o] + scaling * s);
    }
  }
}

void lora_backward(const float* x, const float* A, const float* B, const float* dy, float* h, float* dh, float* dx,
                   bool accumulate_dx, float* dA, float* dB, int64_t T, int64_t in, int64_t out, int64_t r,
                   float scaling) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < r; ++j) {
      double s = 0.0, d = 0.0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(x[t * in + i]) * A[j * in + i];
      for (int64_t o = 0; o < out; ++o) d += static_cast<double>(dy[t * out + o]) * B[o * r + j];
      h[t * r + j] = static_cast<float>(s);
      dh[t * r + j] = static_cast<float>(scaling * d);
    }
  if (dB)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < r; ++j) {
        double s = 0.0;
        for (int64_t t = 0; t < T; ++t) s += static_cast<double>(dy[t * out + o]) * h[t * r + j];
        dB[o * r + j] = static_cast<float>(dB[o * r + j] + scaling * s);
      }
  if (dA)
    for (int64_t j = 0; j < r; ++j)
      for (int64_t i = 0; i < in; ++i) {
        double s = 0.0;
        for (int64_t t = 0; t < T; ++t) s += static_cast<double>(dh[t * r + j]) * x[t * in + i];
        dA[j * in + i] = static_cast<float>(dA[j * in + i] + s);
      }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < in; ++i) {
      double s = accumulate_dx ? dx[t * in + i] : 0.0;
      for (int64_t j = 0; j < r; ++j) s += static_cast<double>(dh[t * r + j]) * A[j * in + i];
      dx[t * in + i] = static_cast<float>(s);
    }
}

}  // namespace twinkle::kernels::cpu::reference
