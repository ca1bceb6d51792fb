// Reference Gated DeltaNet ops (twinkle/kernels/ops.h CausalConv1dOp, GatedDeltaRuleOp, GatedRmsNormOp):
// plain loops in double. The gated delta rule is its token recurrence (transformers'
// torch_recurrent_gated_delta_rule, models/qwen3_5/modeling_qwen3_5.py), every state kept, and its
// backward is back-propagation through that recurrence.
#include <cmath>
#include <string>
#include <vector>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

namespace {

void check_segments(const char* op, const int32_t* cu, int64_t n_seqs) {
  check(n_seqs >= 0, std::string(op) + ": n_seqs " + std::to_string(n_seqs) + " < 0");
  for (int64_t s = 0; s < n_seqs; ++s)
    check(cu[s] >= 0 && cu[s + 1] >= cu[s], std::string(op) + ": cu_seqlens[" + std::to_string(s + 1) + "] = " +
                                                std::to_string(cu[s + 1]) + " is below cu_seqlens[" +
                                                std::to_string(s) + "] = " + std::to_string(cu[s]));
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

// ---------------------------------------------------------------- causal_conv1d

void causal_conv1d_forward(const float* x, const float* w, const float* bias, float* y, const int32_t* cu,
                           int64_t n_seqs, int64_t C, int64_t K, bool silu) {
  check(K >= 1 && C >= 0, "causal_conv1d: kernel size K " + std::to_string(K) + " < 1 or channels C < 0");
  check_segments("causal_conv1d", cu, n_seqs);
  for (int64_t s = 0; s < n_seqs; ++s)
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double a = bias ? bias[c] : 0.0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= cu[s]) a += static_cast<double>(w[c * K + j]) * x[src * C + c];
        }
        y[t * C + c] = static_cast<float>(silu ? a * sigmoid(a) : a);
      }
}

void causal_conv1d_backward(const float* x, const float* w, const float* bias, const float* dy, float* dx, float* dw,
                            float* dbias, const int32_t* cu, int64_t n_seqs, int64_t C, int64_t K, bool silu) {
  check(K >= 1 && C >= 0, "causal_conv1d: kernel size K " + std::to_string(K) + " < 1 or channels C < 0");
  check_segments("causal_conv1d", cu, n_seqs);
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t t0 = cu[s], t1 = cu[s + 1];
    std::vector<double> dpre(static_cast<size_t>((t1 - t0) * C));
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double a = bias ? bias[c] : 0.0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= t0) a += static_cast<double>(w[c * K + j]) * x[src * C + c];
        }
        const double sg = sigmoid(a);
        dpre[(t - t0) * C + c] = dy[t * C + c] * (silu ? sg * (1.0 + a * (1.0 - sg)) : 1.0);
      }
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double d = 0.0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t dst = t + (K - 1) - j;  // the output that read x[t] through tap j
          if (dst < t1) d += static_cast<double>(w[c * K + j]) * dpre[(dst - t0) * C + c];
        }
        dx[t * C + c] = static_cast<float>(d);
      }
    for (int64_t c = 0; c < C; ++c) {
      if (dbias) {
        double d = 0.0;
        for (int64_t t = t0; t < t1; ++t) d += dpre[(t - t0) * C + c];
        dbias[c] += static_cast<float>(d);
      }
      if (dw)
        for (int64_t j = 0; j < K; ++j) {
          double d = 0.0;
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t src = t - (K - 1) + j;
            if (src >= t0) d += dpre[(t - t0) * C + c] * x[src * C + c];
          }
          dw[c * K + j] += static_cast<float>(d);
        }
    }
  }
}

// ---------------------------------------------------------------- gated_delta_rule (recurrent form)

namespace {

void check_gdr(const int32_t* cu, int64_t n_seqs, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv) {
  check(Hk >= 1 && Hv >= 1 && Hv % Hk == 0,
        "gated_delta_rule: value heads Hv " + std::to_string(Hv) + " must be a multiple of key heads Hk " +
            std::to_string(Hk));
  check(Dk >= 1 && Dv >= 1, "gated_delta_rule: head dims Dk " + std::to_string(Dk) + ", Dv " + std::to_string(Dv) +
                                " must be >= 1");
  check_segments("gated_delta_rule", cu, n_seqs);
}

// One head row of q or k as the recurrence uses it: l2-normalised (x / sqrt(sum x^2 + 1e-6)) when asked,
// times `mul`.
std::vector<double> prep(const float* x, int64_t D, bool l2, double mul) {
  std::vector<double> r(static_cast<size_t>(D));
  double ss = 0.0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = l2 ? 1.0 / std::sqrt(ss + 1e-6) : 1.0;
  for (int64_t i = 0; i < D; ++i) r[i] = x[i] * inv * mul;
  return r;
}

// d(x) of y = mul * l2norm(x) (or mul * x) given dy; added into dx.
void prep_backward(const float* x, const double* dy, int64_t D, bool l2, double mul, double* dx) {
  if (!l2) {
    for (int64_t i = 0; i < D; ++i) dx[i] += mul * dy[i];
    return;
  }
  double ss = 0.0, xd = 0.0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * x[i], xd += x[i] * dy[i];
  const double inv = 1.0 / std::sqrt(ss + 1e-6);
  for (int64_t i = 0; i < D; ++i) dx[i] += mul * (inv * dy[i] - inv * inv * inv * x[i] * xd);
}

}  // namespace

void gated_delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              const float* h0, float* out, float* ht, const int32_t* cu, int64_t n_seqs, int64_t Hk,
                              int64_t Hv, int64_t Dk, int64_t Dv, float scale, bool qk_l2norm) {
  check_gdr(cu, n_seqs, Hk, Hv, Dk, Dv);
  const int64_t rep = Hv / Hk, SS = Dk * Dv;
  for (int64_t s = 0; s < n_seqs; ++s)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = h / rep;
      std::vector<double> S(static_cast<size_t>(SS), 0.0);  // S[i, j], i over Dk, j over Dv
      if (h0)
        for (int64_t e = 0; e < SS; ++e) S[e] = h0[(s * Hv + h) * SS + e];
      for (int64_t t = cu[s]; t < cu[s + 1]; ++t) {
        const auto qt = prep(q + (t * Hk + kh) * Dk, Dk, qk_l2norm, scale);
        const auto kt = prep(k + (t * Hk + kh) * Dk, Dk, qk_l2norm, 1.0);
        const float* vt = v + (t * Hv + h) * Dv;
        const double a = std::exp(static_cast<double>(g[t * Hv + h])), b = beta[t * Hv + h];
        for (auto& e : S) e *= a;
        for (int64_t j = 0; j < Dv; ++j) {
          double kv = 0.0;
          for (int64_t i = 0; i < Dk; ++i) kv += S[i * Dv + j] * kt[i];
          const double delta = b * (vt[j] - kv);
          for (int64_t i = 0; i < Dk; ++i) S[i * Dv + j] += kt[i] * delta;
        }
        for (int64_t j = 0; j < Dv; ++j) {
          double o = 0.0;
          for (int64_t i = 0; i < Dk; ++i) o += S[i * Dv + j] * qt[i];
          out[(t * Hv + h) * Dv + j] = static_cast<float>(o);
        }
      }
      if (ht)
        for (int64_t e = 0; e < SS; ++e) ht[(s * Hv + h) * SS + e] = static_cast<float>(S[e]);
    }
}

void gated_delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                               const float* h0, const float* dout, const float* dht, float* dq, float* dk, float* dv,
                               float* dg, float* dbeta, float* dh0, const int32_t* cu, int64_t n_seqs, int64_t Hk,
                               int64_t Hv, int64_t Dk, int64_t Dv, float scale, bool qk_l2norm) {
  check_gdr(cu, n_seqs, Hk, Hv, Dk, Dv);
  const int64_t rep = Hv / Hk, SS = Dk * Dv;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t t0 = cu[s], n = cu[s + 1] - t0;
    // gradients of the prepared (normalised, scaled) q and k, summed over the value heads of a key head
    std::vector<double> dqp(static_cast<size_t>(n * Hk * Dk), 0.0), dkp(dqp.size(), 0.0);
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = h / rep;
      // states[t] = S before token t (t = 0: h0), states[n] = the final state
      std::vector<std::vector<double>> st(static_cast<size_t>(n + 1), std::vector<double>(SS, 0.0));
      if (h0)
        for (int64_t e = 0; e < SS; ++e) st[0][e] = h0[(s * Hv + h) * SS + e];
      std::vector<std::vector<double>> qs(n), ks(n);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = t0 + i;
        qs[i] = prep(q + (t * Hk + kh) * Dk, Dk, qk_l2norm, scale);
        ks[i] = prep(k + (t * Hk + kh) * Dk, Dk, qk_l2norm, 1.0);
        const float* vt = v + (t * Hv + h) * Dv;
        const double a = std::exp(static_cast<double>(g[t * Hv + h])), b = beta[t * Hv + h];
        auto& S = st[i + 1];
        for (int64_t e = 0; e < SS; ++e) S[e] = a * st[i][e];
        for (int64_t j = 0; j < Dv; ++j) {
          double kv = 0.0;
          for (int64_t r = 0; r < Dk; ++r) kv += S[r * Dv + j] * ks[i][r];
          const double delta = b * (vt[j] - kv);
          for (int64_t r = 0; r < Dk; ++r) S[r * Dv + j] += ks[i][r] * delta;
        }
      }
      std::vector<double> dS(static_cast<size_t>(SS), 0.0);
      if (dht)
        for (int64_t e = 0; e < SS; ++e) dS[e] = dht[(s * Hv + h) * SS + e];
      for (int64_t i = n - 1; i >= 0; --i) {
        const int64_t t = t0 + i;
        const float* vt = v + (t * Hv + h) * Dv;
        const float* dot = dout + (t * Hv + h) * Dv;
        const double a = std::exp(static_cast<double>(g[t * Hv + h])), b = beta[t * Hv + h];
        const auto& S = st[i + 1];
        const auto& qt = qs[i];
        const auto& kt = ks[i];
        // o = S^T q
        for (int64_t r = 0; r < Dk; ++r) {
          double d = 0.0;
          for (int64_t j = 0; j < Dv; ++j) d += S[r * Dv + j] * dot[j], dS[r * Dv + j] += qt[r] * dot[j];
          dqp[(i * Hk + kh) * Dk + r] += d;
        }
        // S = S' + k delta^T, delta = b (v - S'^T k), S' = a S_prev
        std::vector<double> Sp(static_cast<size_t>(SS));
        for (int64_t e = 0; e < SS; ++e) Sp[e] = a * st[i][e];
        std::vector<double> ddelta(static_cast<size_t>(Dv), 0.0), kv(static_cast<size_t>(Dv), 0.0);
        for (int64_t j = 0; j < Dv; ++j)
          for (int64_t r = 0; r < Dk; ++r) kv[j] += Sp[r * Dv + j] * kt[r], ddelta[j] += dS[r * Dv + j] * kt[r];
        double db = 0.0;
        std::vector<double> dkt(static_cast<size_t>(Dk), 0.0);
        for (int64_t j = 0; j < Dv; ++j) {
          const double delta = b * (vt[j] - kv[j]);
          for (int64_t r = 0; r < Dk; ++r) dkt[r] += dS[r * Dv + j] * delta;
          dv[(t * Hv + h) * Dv + j] = static_cast<float>(b * ddelta[j]);
          db += (vt[j] - kv[j]) * ddelta[j];
        }
        // kv = S'^T k: dkv = -b ddelta; dS' += k dkv^T; dk += S' dkv
        for (int64_t r = 0; r < Dk; ++r)
          for (int64_t j = 0; j < Dv; ++j) {
            const double dkv = -b * ddelta[j];
            dkt[r] += Sp[r * Dv + j] * dkv;
            dS[r * Dv + j] += kt[r] * dkv;
          }
        for (int64_t r = 0; r < Dk; ++r) dkp[(i * Hk + kh) * Dk + r] += dkt[r];
        dbeta[t * Hv + h] = static_cast<float>(db);
        // S' = a S_prev: dS_prev = a dS', dg = a <S_prev, dS'>
        double da = 0.0;
        for (int64_t e = 0; e < SS; ++e) da += st[i][e] * dS[e], dS[e] *= a;
        dg[t * Hv + h] = static_cast<float>(a * da);
      }
      if (dh0)
        for (int64_t e = 0; e < SS; ++e) dh0[(s * Hv + h) * SS + e] = static_cast<float>(dS[e]);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t kh = 0; kh < Hk; ++kh) {
        const int64_t t = t0 + i, o = (t * Hk + kh) * Dk;
        std::vector<double> gq(static_cast<size_t>(Dk), 0.0), gk(gq.size(), 0.0);
        prep_backward(q + o, dqp.data() + (i * Hk + kh) * Dk, Dk, qk_l2norm, scale, gq.data());
        prep_backward(k + o, dkp.data() + (i * Hk + kh) * Dk, Dk, qk_l2norm, 1.0, gk.data());
        for (int64_t r = 0; r < Dk; ++r) dq[o + r] = static_cast<float>(gq[r]), dk[o + r] = static_cast<float>(gk[r]);
      }
  }
}

// ---------------------------------------------------------------- the gates

namespace {
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }  // torch's threshold 20
}  // namespace

void gdn_gates_forward(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,
                       float* beta, int64_t T, int64_t H) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = t * H + h;
      g[i] = static_cast<float>(-std::exp(static_cast<double>(A_log[h])) * softplus(static_cast<double>(a[i]) + dt_bias[h]));
      beta[i] = static_cast<float>(sigmoid(b[i]));
    }
}

void gdn_gates_backward(const float* a, const float* b, const float* A_log, const float* dt_bias, const float* dg,
                        const float* dbeta, float* da, float* db, float* dA_log, float* ddt_bias, int64_t T,
                        int64_t H) {
  for (int64_t h = 0; h < H; ++h) {
    const double A = std::exp(static_cast<double>(A_log[h]));
    double sA = 0.0, sdt = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = t * H + h;
      const double x = static_cast<double>(a[i]) + dt_bias[h];
      const double dx = dg[i] * -A * (x > 20.0 ? 1.0 : sigmoid(x));
      da[i] = static_cast<float>(dx);
      sdt += dx;
      sA += dg[i] * -A * softplus(x);
      const double sb = sigmoid(b[i]);
      db[i] = static_cast<float>(dbeta[i] * sb * (1.0 - sb));
    }
    if (dA_log) dA_log[h] += static_cast<float>(sA);
    if (ddt_bias) ddt_bias[h] += static_cast<float>(sdt);
  }
}

// ---------------------------------------------------------------- gated_rms_norm

void gated_rmsnorm_forward(const float* x, const float* z, const float* w, float* y, float* rstd, int64_t rows,
                           int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(x[r * dim + j]) * x[r * dim + j];
    const double rs = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    rstd[r] = static_cast<float>(rs);
    for (int64_t j = 0; j < dim; ++j) {
      const double zz = z[r * dim + j];
      y[r * dim + j] = static_cast<float>(w[j] * (x[r * dim + j] * rs) * zz * sigmoid(zz));
    }
  }
}

void gated_rmsnorm_backward(const float* x, const float* z, const float* w, const float* rstd, const float* dy,
                            float* dx, float* dz, float* dw, int64_t rows, int64_t dim) {
  std::vector<double> acc(static_cast<size_t>(dim), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double rs = rstd[r];
    double dot = 0.0;
    std::vector<double> gg(static_cast<size_t>(dim));
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t i = r * dim + j;
      const double zz = z[i], sg = sigmoid(zz), n = x[i] * rs;
      gg[j] = dy[i] * w[j] * zz * sg;
      dot += gg[j] * n;
      acc[j] += dy[i] * n * zz * sg;
      dz[i] = static_cast<float>(dy[i] * w[j] * n * sg * (1.0 + zz * (1.0 - sg)));
    }
    const double c = dot / static_cast<double>(dim);
    for (int64_t j = 0; j < dim; ++j) dx[r * dim + j] = static_cast<float>(rs * (gg[j] - x[r * dim + j] * rs * c));
  }
  if (dw)
    for (int64_t j = 0; j < dim; ++j) dw[j] += static_cast<float>(acc[j]);
}

}  // namespace twinkle::kernels::cpu::reference
