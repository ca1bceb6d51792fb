// Causal depthwise conv1d + SiLU on packed sequences (twinkle/kernels/cpu/causal_conv1d.h).
#include "twinkle/kernels/cpu/causal_conv1d.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu {

namespace {

void check_args(const int32_t* cu, int64_t n_seqs, int64_t C, int64_t K) {
  check(K >= 1, "causal_conv1d: kernel size K " + std::to_string(K) + " < 1");
  check(C >= 0, "causal_conv1d: channels C " + std::to_string(C) + " < 0");
  check(n_seqs >= 0, "causal_conv1d: n_seqs " + std::to_string(n_seqs) + " < 0");
  for (int64_t s = 0; s < n_seqs; ++s)
    check(cu[s] >= 0 && cu[s + 1] >= cu[s], "causal_conv1d: cu_seqlens[" + std::to_string(s + 1) + "] = " +
                                                std::to_string(cu[s + 1]) + " is below cu_seqlens[" +
                                                std::to_string(s) + "] = " + std::to_string(cu[s]));
}

// wt [K, C]: the taps transposed, so that a token's channels read one contiguous row per tap.
std::vector<float> transpose_taps(const float* w, int64_t C, int64_t K) {
  std::vector<float> wt(static_cast<size_t>(K * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K; ++j) wt[j * C + c] = w[c * K + j];
  return wt;
}

// pre[c] = bias[c] + sum_j wt[j, c] x[t - (K-1) + j, c] over the taps inside [t0, t].
inline void pre_activation(const float* x, const float* wt, const float* bias, float* pre, int64_t t, int64_t t0,
                           int64_t C, int64_t K) {
  if (bias)
    std::copy(bias, bias + C, pre);
  else
    std::fill(pre, pre + C, 0.0f);
  for (int64_t j = std::max<int64_t>(0, t0 - t + K - 1); j < K; ++j) {
    const float* xr = x + (t - (K - 1) + j) * C;
    const float* wr = wt + j * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) pre[c] += wr[c] * xr[c];
  }
}

inline float sigmoidf(float a) { return 1.0f / (1.0f + std::exp(-a)); }

// The token ranges of the segments, as one list of (t, segment start, segment end).
struct Tok {
  int64_t t, t0, t1;
};
std::vector<Tok> tokens_of(const int32_t* cu, int64_t n_seqs) {
  std::vector<Tok> v;
  for (int64_t s = 0; s < n_seqs; ++s)
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) v.push_back({t, cu[s], cu[s + 1]});
  return v;
}

}  // namespace

void causal_conv1d_forward(const float* x, const float* w, const float* bias, float* y, const int32_t* cu,
                           int64_t n_seqs, int64_t C, int64_t K, bool silu) {
  check_args(cu, n_seqs, C, K);
  const auto wt = transpose_taps(w, C, K);
  const auto toks = tokens_of(cu, n_seqs);
  const int64_t n = static_cast<int64_t>(toks.size());
#pragma omp parallel for schedule(static) if (n * C > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const Tok& tk = toks[i];
    float* yr = y + tk.t * C;
    pre_activation(x, wt.data(), bias, yr, tk.t, tk.t0, C, K);
    if (silu) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = yr[c] * sigmoidf(yr[c]);
    }
  }
}

void causal_conv1d_backward(const float* x, const float* w, const float* bias, const float* dy, float* dx, float* dw,
                            float* dbias, const int32_t* cu, int64_t n_seqs, int64_t C, int64_t K, bool silu) {
  check_args(cu, n_seqs, C, K);
  const auto wt = transpose_taps(w, C, K);
  const auto toks = tokens_of(cu, n_seqs);
  const int64_t n = static_cast<int64_t>(toks.size());
  // 1. dpre [n, C] (in the order of toks) = dy * silu'(pre), the pre-activation recomputed
  std::vector<float> dpre(static_cast<size_t>(n * C));
  const bool par = n * C > 32768;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < n; ++i) {
    const Tok& tk = toks[i];
    float* d = dpre.data() + i * C;
    const float* dyr = dy + tk.t * C;
    if (!silu) {
      std::copy(dyr, dyr + C, d);
      continue;
    }
    pre_activation(x, wt.data(), bias, d, tk.t, tk.t0, C, K);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float a = d[c], s = sigmoidf(a);
      d[c] = dyr[c] * s * (1.0f + a * (1.0f - s));
    }
  }
  // 2. dx[t] = sum_j w[:, j] dpre[t + (K-1) - j] over the outputs inside the segment (toks index i + (K-1) - j)
#pragma omp parallel for schedule(static) if (par)
  for (int64_t i = 0; i < n; ++i) {
    const Tok& tk = toks[i];
    float* dxr = dx + tk.t * C;
    std::fill(dxr, dxr + C, 0.0f);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t dst = tk.t + (K - 1) - j;
      if (dst >= tk.t1) continue;
      const float* d = dpre.data() + (i + (K - 1) - j) * C;
      const float* wr = wt.data() + j * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dxr[c] += wr[c] * d[c];
    }
  }
  // 3. dw[c, j] += sum_t dpre[t, c] x[t - (K-1) + j, c], dbias[c] += sum_t dpre[t, c]: blocks of kBlock
  //    tokens summed in float, the blocks added in order in double
  if (!dw && !dbias) return;
  constexpr int64_t kBlock = 256;
  const int64_t nb = (n + kBlock - 1) / kBlock, W = (K + 1) * C;  // K tap rows, then the bias row
  std::vector<float> part(static_cast<size_t>(nb * W), 0.0f);
#pragma omp parallel for schedule(static) if (par)
  for (int64_t b = 0; b < nb; ++b) {
    float* p = part.data() + b * W;
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) {
      const Tok& tk = toks[i];
      const float* d = dpre.data() + i * C;
      for (int64_t j = std::max<int64_t>(0, tk.t0 - tk.t + K - 1); j < K; ++j) {
        const float* xr = x + (tk.t - (K - 1) + j) * C;
        float* pj = p + j * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) pj[c] += d[c] * xr[c];
      }
      float* pb = p + K * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) pb[c] += d[c];
    }
  }
#pragma omp parallel for schedule(static) if (C * K > 4096)
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j <= K; ++j) {
      double s = 0.0;
      for (int64_t b = 0; b < nb; ++b) s += part[b * W + j * C + c];
      if (j < K && dw) dw[c * K + j] += static_cast<float>(s);
      if (j == K && dbias) dbias[c] += static_cast<float>(s);
    }
  }
}

}  // namespace twinkle::kernels::cpu
