// The chunked gated delta rule, forward and backward (twinkle/kernels/cpu/gated_delta_rule.h), and the
// Gated DeltaNet gates. One task per (sequence, value head); a task's chunk products are GEMMs through
// twinkle/kernels/cpu/gemm.h (single-threaded inside the task loop's parallel region). The derivation of
// the backward is written next to each step (reverse mode through the chunk formulas of the header).
#include "twinkle/kernels/cpu/gated_delta_rule.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/gemm.h"

namespace twinkle::kernels::cpu {

namespace {

constexpr int64_t BT = kGdnChunk;

void check_args(const int32_t* cu, int64_t n_seqs, int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv) {
  check(Hk >= 1 && Hv >= 1 && Hv % Hk == 0, "gated_delta_rule: value heads Hv " + std::to_string(Hv) +
                                                " must be a positive multiple of key heads Hk " + std::to_string(Hk));
  check(Dk >= 1 && Dv >= 1,
        "gated_delta_rule: head dims Dk " + std::to_string(Dk) + ", Dv " + std::to_string(Dv) + " must be >= 1");
  check(n_seqs >= 0, "gated_delta_rule: n_seqs " + std::to_string(n_seqs) + " < 0");
  for (int64_t s = 0; s < n_seqs; ++s)
    check(cu[s] >= 0 && cu[s + 1] >= cu[s], "gated_delta_rule: cu_seqlens[" + std::to_string(s + 1) + "] = " +
                                                std::to_string(cu[s + 1]) + " is below cu_seqlens[" +
                                                std::to_string(s) + "] = " + std::to_string(cu[s]));
}

float* grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

inline void mm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// qn = scale * l2norm(q) (or scale * q), kn = l2norm(k) (or k), [T, Hk, Dk], for the segments' tokens;
// inv_q / inv_k [T, Hk] the inverse norms (1 without qk_l2norm).
void prepare_qk(const float* q, const float* k, const int32_t* cu, int64_t n_seqs, int64_t Hk, int64_t Dk,
                float scale, bool l2, float* qn, float* kn, float* inv_q, float* inv_k) {
  const int64_t t_beg = n_seqs ? cu[0] : 0, t_end = n_seqs ? cu[n_seqs] : 0;
#pragma omp parallel for schedule(static) if ((t_end - t_beg) * Hk * Dk > 32768)
  for (int64_t r = t_beg * Hk; r < t_end * Hk; ++r) {
    for (int which = 0; which < 2; ++which) {
      const float* x = (which ? k : q) + r * Dk;
      float* y = (which ? kn : qn) + r * Dk;
      double ss = 0.0;
      if (l2) {
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < Dk; ++i) ss += static_cast<double>(x[i]) * x[i];
      }
      const float inv = l2 ? static_cast<float>(1.0 / std::sqrt(ss + 1e-6)) : 1.0f;
      const float mul = inv * (which ? 1.0f : scale);
      (which ? inv_k : inv_q)[r] = inv;
#pragma omp simd
      for (int64_t i = 0; i < Dk; ++i) y[i] = x[i] * mul;
    }
  }
}

// The per-chunk quantities of one (sequence, value head) task, recomputed from the inputs.
struct Chunk {
  int64_t L = 0;
  std::vector<float> gam, eg, el, kk, A, Tm, P, Vb, Kd, Qe, Kl, U, W;
  float egL = 1.0f;  // exp(gamma_L)

  void alloc(int64_t Dk, int64_t Dv) {
    for (auto* v : {&gam, &eg, &el}) v->resize(BT);
    for (auto* v : {&kk, &A, &Tm, &P}) v->resize(BT * BT);
    for (auto* v : {&Vb, &U}) v->resize(BT * Dv);
    for (auto* v : {&Kd, &Qe, &Kl, &W}) v->resize(BT * Dk);
  }

  // Q, K rows stride ldk (the prepared qn / kn), V stride ldv, g / beta stride Hv.
  void prepare(int64_t L_, const float* Q, const float* K, int64_t ldk, const float* V, int64_t ldv, const float* g,
               const float* beta, int64_t Hv, int64_t Dk, int64_t Dv) {
    L = L_;
    double acc = 0.0;
    for (int64_t i = 0; i < L; ++i) acc += g[i * Hv], gam[i] = static_cast<float>(acc);
    const float gL = gam[L - 1];
    egL = std::exp(gL);
    for (int64_t i = 0; i < L; ++i) eg[i] = std::exp(gam[i]), el[i] = std::exp(gL - gam[i]);
    // KK = K K^T, QK = Q K^T (into P)
    mm(false, true, L, L, Dk, 1.0f, K, ldk, K, ldk, 0.0f, kk.data(), L);
    mm(false, true, L, L, Dk, 1.0f, Q, ldk, K, ldk, 0.0f, P.data(), L);
    for (int64_t i = 0; i < L; ++i) {
      const float b = beta[i * Hv];
      for (int64_t j = 0; j < L; ++j) {
        const float G = j <= i ? std::exp(gam[i] - gam[j]) : 0.0f;
        kk[i * L + j] = j < i ? G * kk[i * L + j] : 0.0f;  // B = strict_lower(Gamma * K K^T)
        A[i * L + j] = b * kk[i * L + j];
        P[i * L + j] *= G;  // lower(Gamma * Q K^T)
      }
    }
    // Tm = (I + A)^-1 by forward substitution (unit lower triangular)
    std::fill(Tm.begin(), Tm.begin() + L * L, 0.0f);
    for (int64_t i = 0; i < L; ++i) {
      float* ti = Tm.data() + i * L;
      ti[i] = 1.0f;
      for (int64_t m = 0; m < i; ++m) {
        const float a = A[i * L + m];
        if (a == 0.0f) continue;
        const float* tm = Tm.data() + m * L;
#pragma omp simd
        for (int64_t j = 0; j <= m; ++j) ti[j] -= a * tm[j];
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      const float b = beta[i * Hv];
      const float* vi = V + i * ldv;
      const float* ki = K + i * ldk;
      const float* qi = Q + i * ldk;
      for (int64_t j = 0; j < Dv; ++j) Vb[i * Dv + j] = b * vi[j];
      for (int64_t j = 0; j < Dk; ++j) {
        Kd[i * Dk + j] = b * eg[i] * ki[j];
        Qe[i * Dk + j] = eg[i] * qi[j];
        Kl[i * Dk + j] = el[i] * ki[j];
      }
    }
    mm(false, false, L, Dv, L, 1.0f, Tm.data(), L, Vb.data(), Dv, 0.0f, U.data(), Dv);  // U = T Vb
    mm(false, false, L, Dk, L, 1.0f, Tm.data(), L, Kd.data(), Dk, 0.0f, W.data(), Dk);  // W = T Kd
  }

  // Vn = U - W S
  void new_values(const float* S, float* Vn, int64_t Dk, int64_t Dv) const {
    std::copy(U.begin(), U.begin() + L * Dv, Vn);
    mm(false, false, L, Dv, Dk, -1.0f, W.data(), Dk, S, Dv, 1.0f, Vn, Dv);
  }

  // S <- exp(gamma_L) S + Kl^T Vn
  void advance(float* S, const float* Vn, int64_t Dk, int64_t Dv) const {
    for (int64_t e = 0; e < Dk * Dv; ++e) S[e] *= egL;
    mm(true, false, Dk, Dv, L, 1.0f, Kl.data(), Dk, Vn, Dv, 1.0f, S, Dv);
  }
};

}  // namespace

void gated_delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              const float* h0, float* out, float* ht, const int32_t* cu, int64_t n_seqs, int64_t Hk,
                              int64_t Hv, int64_t Dk, int64_t Dv, float scale, bool qk_l2norm) {
  check_args(cu, n_seqs, Hk, Hv, Dk, Dv);
  const int64_t T = n_seqs ? cu[n_seqs] : 0, rep = Hv / Hk, SS = Dk * Dv;
  thread_local std::vector<float> qn_b, kn_b, iq_b, ik_b;
  float* qn = grow(qn_b, T * Hk * Dk);
  float* kn = grow(kn_b, T * Hk * Dk);
  prepare_qk(q, k, cu, n_seqs, Hk, Dk, scale, qk_l2norm, qn, kn, grow(iq_b, T * Hk), grow(ik_b, T * Hk));
  const int64_t tasks = n_seqs * Hv, ldk = Hk * Dk, ldv = Hv * Dv;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && T * Hv * Dk * Dv > 65536)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hv, h = task % Hv, kh = h / rep;
    thread_local Chunk c;
    thread_local std::vector<float> S_b, Vn_b;
    c.alloc(Dk, Dv);
    float* S = grow(S_b, SS);
    float* Vn = grow(Vn_b, BT * Dv);
    if (h0)
      std::copy(h0 + task * SS, h0 + (task + 1) * SS, S);
    else
      std::fill(S, S + SS, 0.0f);
    for (int64_t t0 = cu[s]; t0 < cu[s + 1]; t0 += BT) {
      const int64_t L = std::min<int64_t>(BT, cu[s + 1] - t0);
      const float* Q = qn + (t0 * Hk + kh) * Dk;
      const float* K = kn + (t0 * Hk + kh) * Dk;
      c.prepare(L, Q, K, ldk, v + (t0 * Hv + h) * Dv, ldv, g + t0 * Hv + h, beta + t0 * Hv + h, Hv, Dk, Dv);
      c.new_values(S, Vn, Dk, Dv);
      float* O = out + (t0 * Hv + h) * Dv;
      mm(false, false, L, Dv, Dk, 1.0f, c.Qe.data(), Dk, S, Dv, 0.0f, O, ldv);  // O = Qe S
      mm(false, false, L, Dv, L, 1.0f, c.P.data(), L, Vn, Dv, 1.0f, O, ldv);    // O += P Vn
      c.advance(S, Vn, Dk, Dv);
    }
    if (ht) std::copy(S, S + SS, ht + task * SS);
  }
}

void gated_delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                               const float* h0, const float* dout, const float* dht, float* dq, float* dk, float* dv,
                               float* dg, float* dbeta, float* dh0, const int32_t* cu, int64_t n_seqs, int64_t Hk,
                               int64_t Hv, int64_t Dk, int64_t Dv, float scale, bool qk_l2norm) {
  check_args(cu, n_seqs, Hk, Hv, Dk, Dv);
  const int64_t T = n_seqs ? cu[n_seqs] : 0, rep = Hv / Hk, SS = Dk * Dv;
  thread_local std::vector<float> qn_b, kn_b, iq_b, ik_b, dqv_b, dkv_b;
  float* qn = grow(qn_b, T * Hk * Dk);
  float* kn = grow(kn_b, T * Hk * Dk);
  float* inv_q = grow(iq_b, T * Hk);
  float* inv_k = grow(ik_b, T * Hk);
  prepare_qk(q, k, cu, n_seqs, Hk, Dk, scale, qk_l2norm, qn, kn, inv_q, inv_k);
  // per value head gradients of the prepared q and k, [T, Hv, Dk]; summed over a key head's group below
  float* dqv = grow(dqv_b, T * Hv * Dk);
  float* dkv = grow(dkv_b, T * Hv * Dk);
  const int64_t tasks = n_seqs * Hv, ldk = Hk * Dk, ldv = Hv * Dv;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && T * Hv * Dk * Dv > 65536)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hv, h = task % Hv, kh = h / rep;
    const int64_t t_beg = cu[s], n = cu[s + 1] - t_beg, nc = (n + BT - 1) / BT;
    thread_local Chunk c;
    thread_local std::vector<float> st_b, dS_b, Vn_b, dVn_b, dKl_b, dQe_b, dP_b, dW_b, dVb_b, dKd_b, dA_b, dQ_b,
        dK_b;
    thread_local std::vector<double> dgam_b;
    c.alloc(Dk, Dv);
    float* st = grow(st_b, (nc + 1) * SS);  // st[c] = the state before chunk c
    float* dS = grow(dS_b, SS);
    float* Vn = grow(Vn_b, BT * Dv);
    float* dVn = grow(dVn_b, BT * Dv);
    float* dVb = grow(dVb_b, BT * Dv);
    float* dKl = grow(dKl_b, BT * Dk);
    float* dQe = grow(dQe_b, BT * Dk);
    float* dW = grow(dW_b, BT * Dk);
    float* dKd = grow(dKd_b, BT * Dk);
    float* dQ = grow(dQ_b, BT * Dk);
    float* dK = grow(dK_b, BT * Dk);
    float* dP = grow(dP_b, BT * BT);
    float* dA = grow(dA_b, BT * BT);
    if (dgam_b.size() < static_cast<size_t>(BT)) dgam_b.resize(BT);
    double* dgam = dgam_b.data();
    auto chunk_at = [&](int64_t ci, int64_t& t0, int64_t& L) {
      t0 = t_beg + ci * BT;
      L = std::min<int64_t>(BT, t_beg + n - t0);
      c.prepare(L, qn + (t0 * Hk + kh) * Dk, kn + (t0 * Hk + kh) * Dk, ldk, v + (t0 * Hv + h) * Dv, ldv,
                g + t0 * Hv + h, beta + t0 * Hv + h, Hv, Dk, Dv);
    };
    // 1. the chunk-start states (the forward's recurrence over chunks)
    if (h0)
      std::copy(h0 + task * SS, h0 + (task + 1) * SS, st);
    else
      std::fill(st, st + SS, 0.0f);
    for (int64_t ci = 0; ci < nc; ++ci) {
      int64_t t0, L;
      chunk_at(ci, t0, L);
      std::copy(st + ci * SS, st + (ci + 1) * SS, st + (ci + 1) * SS);
      c.new_values(st + ci * SS, Vn, Dk, Dv);
      c.advance(st + (ci + 1) * SS, Vn, Dk, Dv);
    }
    // 2. chunks in reverse; dS = the gradient of the state after the chunk
    if (dht)
      std::copy(dht + task * SS, dht + (task + 1) * SS, dS);
    else
      std::fill(dS, dS + SS, 0.0f);
    for (int64_t ci = nc - 1; ci >= 0; --ci) {
      int64_t t0, L;
      chunk_at(ci, t0, L);
      const float* S0 = st + ci * SS;
      const float* dO = dout + (t0 * Hv + h) * Dv;
      const float* Q = qn + (t0 * Hk + kh) * Dk;
      const float* K = kn + (t0 * Hk + kh) * Dk;
      const float* V = v + (t0 * Hv + h) * Dv;
      const float* bt = beta + t0 * Hv + h;
      c.new_values(S0, Vn, Dk, Dv);
      std::fill(dgam, dgam + L, 0.0);
      double dgL = 0.0;  // d gamma_L, added to dgam[L-1] at the end
      // S1 = egL S0 + Kl^T Vn:  dVn = Kl dS1,  dKl = Vn dS1^T,  d gamma_L += egL <S0, dS1>
      mm(false, false, L, Dv, Dk, 1.0f, c.Kl.data(), Dk, dS, Dv, 0.0f, dVn, Dv);
      mm(false, true, L, Dk, Dv, 1.0f, Vn, Dv, dS, Dv, 0.0f, dKl, Dk);
      {
        double sd = 0.0;
        for (int64_t e = 0; e < SS; ++e) sd += static_cast<double>(S0[e]) * dS[e];
        dgL += c.egL * sd;
      }
      // O = Qe S0 + P Vn:  dQe = dO S0^T,  dVn += P^T dO,  dP = dO Vn^T (lower incl. diagonal)
      mm(false, true, L, Dk, Dv, 1.0f, dO, ldv, S0, Dv, 0.0f, dQe, Dk);
      mm(true, false, L, Dv, L, 1.0f, c.P.data(), L, dO, ldv, 1.0f, dVn, Dv);
      mm(false, true, L, L, Dv, 1.0f, dO, ldv, Vn, Dv, 0.0f, dP, L);
      // P = lower(Gamma * Q K^T): with E = dP * P, d gamma_i += sum_j E_ij - sum_j E_ji;
      // G1 = dP * Gamma: dQ = G1 K, dK = G1^T Q
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          if (j > i) {
            dP[i * L + j] = 0.0f;
            continue;
          }
          const double e = static_cast<double>(dP[i * L + j]) * c.P[i * L + j];
          dgam[i] += e, dgam[j] -= e;
          dP[i * L + j] *= std::exp(c.gam[i] - c.gam[j]);
        }
      mm(false, false, L, Dk, L, 1.0f, dP, L, K, ldk, 0.0f, dQ, Dk);
      mm(true, false, L, Dk, L, 1.0f, dP, L, Q, ldk, 0.0f, dK, Dk);
      // Vn = U - W S0:  dU = dVn,  dW = -dVn S0^T;  the state gradient before the chunk:
      // dS0 = egL dS1 + Qe^T dO - W^T dVn (dS1 is no longer needed after this)
      mm(false, true, L, Dk, Dv, -1.0f, dVn, Dv, S0, Dv, 0.0f, dW, Dk);
      for (int64_t e = 0; e < SS; ++e) dS[e] *= c.egL;
      mm(true, false, Dk, Dv, L, 1.0f, c.Qe.data(), Dk, dO, ldv, 1.0f, dS, Dv);
      mm(true, false, Dk, Dv, L, -1.0f, c.W.data(), Dk, dVn, Dv, 1.0f, dS, Dv);
      // U = Tm Vb, W = Tm Kd:  dVb = Tm^T dU, dKd = Tm^T dW;  Tm = (I + A)^-1:
      // dA = -Tm^T (dU Vb^T + dW Kd^T) Tm^T = -(dVb U^T + dKd W^T), strictly lower
      mm(true, false, L, Dv, L, 1.0f, c.Tm.data(), L, dVn, Dv, 0.0f, dVb, Dv);
      mm(true, false, L, Dk, L, 1.0f, c.Tm.data(), L, dW, Dk, 0.0f, dKd, Dk);
      mm(false, true, L, L, Dv, -1.0f, dVb, Dv, c.U.data(), Dv, 0.0f, dA, L);
      mm(false, true, L, L, Dk, -1.0f, dKd, Dk, c.W.data(), Dk, 1.0f, dA, L);
      // A = diag(beta) B, B = strict_lower(Gamma * K K^T): d beta_i += sum_j dA_ij B_ij,
      // d gamma from E2 = dA * A as for P; H = dA * beta_i * Gamma: dK += (H + H^T) K
      for (int64_t i = 0; i < L; ++i) {
        double db = 0.0;
        for (int64_t j = 0; j < L; ++j) {
          if (j >= i) {
            dA[i * L + j] = 0.0f;
            continue;
          }
          const double e = static_cast<double>(dA[i * L + j]) * c.A[i * L + j];
          dgam[i] += e, dgam[j] -= e;
          db += static_cast<double>(dA[i * L + j]) * c.kk[i * L + j];
          dA[i * L + j] *= bt[i * Hv] * std::exp(c.gam[i] - c.gam[j]);
        }
        dbeta[(t0 + i) * Hv + h] = static_cast<float>(db);
      }
      for (int64_t i = 0; i < L; ++i)  // dA <- H + H^T (H strictly lower, so the sum is its symmetric fill)
        for (int64_t j = i + 1; j < L; ++j) dA[i * L + j] = dA[j * L + i];
      mm(false, false, L, Dk, L, 1.0f, dA, L, K, ldk, 1.0f, dK, Dk);
      // the element-wise factors: Vb = beta V, Kd = beta eg K, Qe = eg Q, Kl = el K
      for (int64_t i = 0; i < L; ++i) {
        const float b = bt[i * Hv], e = c.eg[i], l = c.el[i];
        const float* vi = V + i * ldv;
        const float* ki = K + i * ldk;
        const float* qi = Q + i * ldk;
        float* dvi = dv + ((t0 + i) * Hv + h) * Dv;
        double db = 0.0, u = 0.0, qq = 0.0, kl = 0.0;
        for (int64_t j = 0; j < Dv; ++j) {
          db += static_cast<double>(vi[j]) * dVb[i * Dv + j];
          dvi[j] = b * dVb[i * Dv + j];
        }
        float* dqi = dQ + i * Dk;
        float* dki = dK + i * Dk;
        for (int64_t j = 0; j < Dk; ++j) {
          u += static_cast<double>(ki[j]) * dKd[i * Dk + j];
          qq += static_cast<double>(qi[j]) * dQe[i * Dk + j];
          kl += static_cast<double>(ki[j]) * dKl[i * Dk + j];
          dki[j] += b * e * dKd[i * Dk + j] + l * dKl[i * Dk + j];
          dqi[j] += e * dQe[i * Dk + j];
        }
        u *= e, qq *= e, kl *= l;
        dbeta[(t0 + i) * Hv + h] += static_cast<float>(db + u);
        dgam[i] += b * u + qq - kl;
        dgL += kl;
      }
      dgam[L - 1] += dgL;
      // gamma = cumsum(g): dg_j = sum_{i >= j} d gamma_i
      double acc = 0.0;
      for (int64_t i = L - 1; i >= 0; --i) acc += dgam[i], dg[(t0 + i) * Hv + h] = static_cast<float>(acc);
      for (int64_t i = 0; i < L; ++i) {
        std::copy(dQ + i * Dk, dQ + (i + 1) * Dk, dqv + ((t0 + i) * Hv + h) * Dk);
        std::copy(dK + i * Dk, dK + (i + 1) * Dk, dkv + ((t0 + i) * Hv + h) * Dk);
      }
    }
    if (dh0) std::copy(dS, dS + SS, dh0 + task * SS);
  }
  // 3. sum over the value heads of each key head (head order), then through the scale and the l2norm:
  //    y = m * inv * x, inv = (sum x^2 + eps)^-1/2:  dx = m * inv * (dy - inv^2 x <x, dy>)
  const int64_t t_beg = n_seqs ? cu[0] : 0;
#pragma omp parallel for schedule(static) if ((T - t_beg) * Hk * Dk > 32768)
  for (int64_t r = t_beg * Hk; r < T * Hk; ++r) {
    const int64_t t = r / Hk, kh = r % Hk;
    for (int which = 0; which < 2; ++which) {
      const float* src = (which ? dkv : dqv) + (t * Hv + kh * rep) * Dk;
      const float* x = (which ? k : q) + r * Dk;
      float* dx = (which ? dk : dq) + r * Dk;
      const float inv = (which ? inv_k : inv_q)[r], m = which ? 1.0f : scale;
      for (int64_t i = 0; i < Dk; ++i) {
        float sum = 0.0f;
        for (int64_t j = 0; j < rep; ++j) sum += src[j * Dk + i];
        dx[i] = sum;
      }
      if (qk_l2norm) {
        double xd = 0.0;
        for (int64_t i = 0; i < Dk; ++i) xd += static_cast<double>(x[i]) * dx[i];
        const float c2 = static_cast<float>(xd) * inv * inv;
        for (int64_t i = 0; i < Dk; ++i) dx[i] = m * inv * (dx[i] - c2 * x[i]);
      } else {
        for (int64_t i = 0; i < Dk; ++i) dx[i] *= m;
      }
    }
  }
}

// ---------------------------------------------------------------- the gates

namespace {
inline float softplusf(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold 20
inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void gdn_gates_forward(const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,
                       float* beta, int64_t T, int64_t H) {
#pragma omp parallel for schedule(static) if (T * H > 65536)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = t * H + h;
      g[i] = -std::exp(A_log[h]) * softplusf(a[i] + dt_bias[h]);
      beta[i] = sigmoidf(b[i]);
    }
}

void gdn_gates_backward(const float* a, const float* b, const float* A_log, const float* dt_bias, const float* dg,
                        const float* dbeta, float* da, float* db, float* dA_log, float* ddt_bias, int64_t T,
                        int64_t H) {
#pragma omp parallel for schedule(static) if (T * H > 65536)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = t * H + h;
      const float x = a[i] + dt_bias[h];
      da[i] = dg[i] * -std::exp(A_log[h]) * (x > 20.0f ? 1.0f : sigmoidf(x));
      const float sb = sigmoidf(b[i]);
      db[i] = dbeta[i] * sb * (1.0f - sb);
    }
  if (!dA_log && !ddt_bias) return;
  for (int64_t h = 0; h < H; ++h) {  // parameter sums over tokens, in order, in double
    const double A = std::exp(static_cast<double>(A_log[h]));
    double sA = 0.0, sdt = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = t * H + h;
      sdt += da[i];
      sA += static_cast<double>(dg[i]) * -A * softplusf(a[i] + dt_bias[h]);
    }
    if (dA_log) dA_log[h] += static_cast<float>(sA);
    if (ddt_bias) ddt_bias[h] += static_cast<float>(sdt);
  }
}

}  // namespace twinkle::kernels::cpu
