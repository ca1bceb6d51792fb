// Reference ring-attention pieces (the AttentionBlockOp of twinkle/kernels/ops.h): one query block against
// one key block with explicit segment ids and global positions as the explicit softmax(scale q k^T + mask) v
// in double (query i sees key j iff the segments agree, k_pos <= q_pos and, with a window, q_pos - k_pos <
// window; GQA as HF repeat_kv), the log-sum-exp merge and delta = rowsum(dO * O), in double; plain loops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

namespace {

void check_block(const char* fn, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t D, int64_t window) {
  check(Tq >= 0 && Tk >= 0 && Hq > 0 && Hkv > 0 && D > 0 && window >= 0,
        std::string(fn) + ": sizes must be >= 0, heads and head_dim > 0, window >= 0");
  check(Hq % Hkv == 0, std::string(fn) + ": Hq " + std::to_string(Hq) + " is not a multiple of Hkv " +
                           std::to_string(Hkv));
}

bool sees(const int32_t* qs, const int32_t* qp, int64_t i, const int32_t* ks, const int32_t* kp, int64_t j,
          int64_t window) {
  return qs[i] == ks[j] && kp[j] <= qp[i] && (window <= 0 || static_cast<int64_t>(qp[i]) - kp[j] < window);
}

double dot(const float* a, const float* b, int64_t D) {
  double s = 0.0;
  for (int64_t d = 0; d < D; ++d) s += static_cast<double>(a[d]) * b[d];
  return s;
}

}  // namespace

void attention_block_forward(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                             const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, float* out,
                             float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_block("attention_block_forward", Tq, Tk, Hq, Hkv, D, window);
  const int64_t rep = Hq / Hkv;
  std::vector<double> s(static_cast<size_t>(Tk)), acc(static_cast<size_t>(D));
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t h = 0; h < Hq; ++h) {
      const float* qi = q + (i * Hq + h) * D;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < Tk; ++j) {
        const bool vis = sees(q_seg, q_pos, i, k_seg, k_pos, j, window);
        s[static_cast<size_t>(j)] = vis ? scale * dot(qi, k + (j * Hkv + h / rep) * D, D)
                                        : -std::numeric_limits<double>::infinity();
        if (vis && s[static_cast<size_t>(j)] > mx) mx = s[static_cast<size_t>(j)];
      }
      float* o = out + (i * Hq + h) * D;
      if (mx == -std::numeric_limits<double>::infinity()) {
        for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
        lse[i * Hq + h] = -std::numeric_limits<float>::infinity();
        continue;
      }
      double l = 0.0;
      for (auto& a : acc) a = 0.0;
      for (int64_t j = 0; j < Tk; ++j) {
        if (!sees(q_seg, q_pos, i, k_seg, k_pos, j, window)) continue;
        const double p = std::exp(s[static_cast<size_t>(j)] - mx);
        l += p;
        const float* vj = v + (j * Hkv + h / rep) * D;
        for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += p * vj[d];
      }
      for (int64_t d = 0; d < D; ++d) o[d] = static_cast<float>(acc[static_cast<size_t>(d)] / l);
      lse[i * Hq + h] = static_cast<float>(mx + std::log(l));
    }
}

void attention_block_backward(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                              const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, const float* lse,
                              const float* delta, const float* dout, float* dq, float* dk, float* dv, int64_t Hq,
                              int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_block("attention_block_backward", Tq, Tk, Hq, Hkv, D, window);
  const int64_t rep = Hq / Hkv;
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t r = i * Hq + h;
      const float* qi = q + r * D;
      const float* gi = dout + r * D;
      for (int64_t j = 0; j < Tk; ++j) {
        if (!sees(q_seg, q_pos, i, k_seg, k_pos, j, window)) continue;
        const int64_t c = j * Hkv + h / rep;
        const float* kj = k + c * D;
        const float* vj = v + c * D;
        const double p = std::exp(scale * dot(qi, kj, D) - lse[r]);
        const double ds = p * (dot(gi, vj, D) - delta[r]);
        for (int64_t d = 0; d < D; ++d) {
          dq[r * D + d] += static_cast<float>(scale * ds * kj[d]);
          dk[c * D + d] += static_cast<float>(scale * ds * qi[d]);
          dv[c * D + d] += static_cast<float>(p * gi[d]);
        }
      }
    }
}

void attention_lse_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t T, int64_t H,
                         int64_t D) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < T * H; ++r) {
    const double la = lse[r], lb = lse_b[r];
    if (lse_b[r] == ninf) continue;
    if (lse[r] == ninf) {
      for (int64_t d = 0; d < D; ++d) out[r * D + d] = out_b[r * D + d];
      lse[r] = lse_b[r];
      continue;
    }
    const double m = std::max(la, lb), l = m + std::log(std::exp(la - m) + std::exp(lb - m));
    for (int64_t d = 0; d < D; ++d)
      out[r * D + d] = static_cast<float>(out[r * D + d] * std::exp(la - l) + out_b[r * D + d] * std::exp(lb - l));
    lse[r] = static_cast<float>(l);
  }
}

void attention_softmax_delta(const float* out, const float* dout, float* delta, int64_t T, int64_t H, int64_t D) {
  for (int64_t r = 0; r < T * H; ++r) delta[r] = static_cast<float>(dot(out + r * D, dout + r * D, D));
}

}  // namespace twinkle::kernels::cpu::reference
