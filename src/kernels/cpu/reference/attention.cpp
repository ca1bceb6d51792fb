// Reference causal GQA attention over packed sequences: the explicit softmax(scale * q k^T + mask) v of
// torch.nn.functional.scaled_dot_product_attention with a block-diagonal causal mask, query head h using
// kv head h / (Hq / Hkv) (HF repeat_kv), in double; O(T^2) memory-free loops per (query, head).
#include <cmath>
#include <string>
#include <vector>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

namespace {
void check_args(const char* fn, const int32_t* cu, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D) {
  check(Hq > 0 && Hkv > 0 && D > 0 && n_seqs >= 0, std::string(fn) + ": dimensions must be positive");
  check(Hq % Hkv == 0, std::string(fn) + ": Hq " + std::to_string(Hq) + " is not a multiple of Hkv " +
                           std::to_string(Hkv));
  for (int64_t i = 0; i < n_seqs; ++i)
    check(cu[i + 1] >= cu[i], std::string(fn) + ": cu_seqlens decreases at " + std::to_string(i));
}
}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                       int64_t window) {
  check_args("attention_forward", cu_seqlens, n_seqs, Hq, Hkv, D);
  const int64_t T = cu_seqlens[n_seqs], rep = Hq / Hkv;
  for (int64_t t = 0; t < cu_seqlens[0]; ++t) {  // rows before the first segment: zeros
    for (int64_t h = 0; h < Hq; ++h) lse[t * Hq + h] = 0.0f;
    for (int64_t j = 0; j < Hq * D; ++j) out[t * Hq * D + j] = 0.0f;
  }
  for (int64_t sq = 0; sq < n_seqs; ++sq) {
    const int64_t s0 = cu_seqlens[sq];
#pragma omp parallel for schedule(dynamic) collapse(2)
    for (int64_t t = s0; t < cu_seqlens[sq + 1]; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / rep;
        // sliding window: keys t-window+1 .. t (transformers masking_utils sliding_window_overlay)
        const int64_t lo = window > 0 ? std::max(s0, t - window + 1) : s0;
        std::vector<double> sc(static_cast<size_t>(t - lo + 1));
        double mx = -INFINITY;
        for (int64_t s = lo; s <= t; ++s) {
          double d = 0.0;
          for (int64_t j = 0; j < D; ++j) d += static_cast<double>(q[(t * Hq + h) * D + j]) * k[(s * Hkv + kh) * D + j];
          sc[s - lo] = d * scale;
          mx = std::max(mx, sc[s - lo]);
        }
        double sum = 0.0;
        for (auto& x : sc) sum += std::exp(x - mx);
        const double l = mx + std::log(sum);
        lse[t * Hq + h] = static_cast<float>(l);
        for (int64_t j = 0; j < D; ++j) {
          double o = 0.0;
          for (int64_t s = lo; s <= t; ++s) o += std::exp(sc[s - lo] - l) * v[(s * Hkv + kh) * D + j];
          out[(t * Hq + h) * D + j] = static_cast<float>(o);
        }
      }
  }
  (void)T;
}

// p_s = exp(score_s - lse); dP_s = dout . v_s; dS_s = p_s (dP_s - sum_s' p_s' dP_s');
// dq = scale sum_s dS_s k_s; dk_s += scale dS_s q; dv_s += p_s dout.
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens, int64_t n_seqs,
                        int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_args("attention_backward", cu_seqlens, n_seqs, Hq, Hkv, D);
  const int64_t T = cu_seqlens[n_seqs], rep = Hq / Hkv;
  std::vector<double> dq_acc(static_cast<size_t>(T * Hq * D), 0.0), dk_acc(static_cast<size_t>(T * Hkv * D), 0.0),
      dv_acc(dk_acc.size(), 0.0);
  for (int64_t sq = 0; sq < n_seqs; ++sq) {
    const int64_t s0 = cu_seqlens[sq], s1 = cu_seqlens[sq + 1];
#pragma omp parallel for schedule(static)
    for (int64_t kh = 0; kh < Hkv; ++kh)  // one kv head per thread: its dk / dv rows are private
      for (int64_t h = kh * rep; h < (kh + 1) * rep; ++h)
        for (int64_t t = s0; t < s1; ++t) {
          const float* qt = q + (t * Hq + h) * D;
          const float* dot = dout + (t * Hq + h) * D;
          const int64_t lo = window > 0 ? std::max(s0, t - window + 1) : s0;
          std::vector<double> p(static_cast<size_t>(t - lo + 1)), dp(p.size());
          double delta = 0.0;
          for (int64_t s = lo; s <= t; ++s) {
            double d = 0.0, e = 0.0;
            for (int64_t j = 0; j < D; ++j) {
              d += static_cast<double>(qt[j]) * k[(s * Hkv + kh) * D + j];
              e += static_cast<double>(dot[j]) * v[(s * Hkv + kh) * D + j];
            }
            p[s - lo] = std::exp(d * scale - static_cast<double>(lse[t * Hq + h]));
            dp[s - lo] = e;
            delta += p[s - lo] * e;
          }
          for (int64_t s = lo; s <= t; ++s) {
            const double ds = p[s - lo] * (dp[s - lo] - delta);
            for (int64_t j = 0; j < D; ++j) {
              dq_acc[(t * Hq + h) * D + j] += scale * ds * k[(s * Hkv + kh) * D + j];
              dk_acc[(s * Hkv + kh) * D + j] += scale * ds * qt[j];
              dv_acc[(s * Hkv + kh) * D + j] += p[s - lo] * dot[j];
            }
          }
        }
  }
  (void)out;
  for (size_t i = 0; i < dq_acc.size(); ++i) dq[i] = static_cast<float>(dq_acc[i]);
  for (size_t i = 0; i < dk_acc.size(); ++i) {
    dk[i] = static_cast<float>(dk_acc[i]);
    dv[i] = static_cast<float>(dv_acc[i]);
  }
}

}  // namespace twinkle::kernels::cpu::reference
