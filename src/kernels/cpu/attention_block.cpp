// Block attention with explicit coordinates (see attention_block.h).
//
// Tiles of kBQ = 32 queries x kBK = 64 keys. K^T (and in the backward V^T) are packed once per call
// per kv head into [D][Tk rounded up to kBK] (zero columns past Tk), so every score tile S = Q K^T and
// dP = dO V^T is one small product with 64 contiguous columns (AVX-512 register tile when available).
// Per tile pair the visibility of the whole tile is decided from the min/max of its coordinates:
// none (skipped), all (no mask), or partial (masked per pair).
#include "twinkle/kernels/cpu/attention_block.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "twinkle/core/dtype.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/vmath.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu {

namespace {

constexpr int64_t kBQ = 32;
constexpr int64_t kBK = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct TileMeta {
  int32_t smin, smax, pmin, pmax;
};

std::vector<TileMeta> tile_meta(const int32_t* seg, const int32_t* pos, int64_t T, int64_t B) {
  std::vector<TileMeta> m(static_cast<size_t>((T + B - 1) / B));
  for (size_t t = 0; t < m.size(); ++t) {
    const int64_t a = static_cast<int64_t>(t) * B, b = std::min(T, a + B);
    TileMeta x{seg[a], seg[a], pos[a], pos[a]};
    for (int64_t i = a + 1; i < b; ++i) {
      x.smin = std::min(x.smin, seg[i]);
      x.smax = std::max(x.smax, seg[i]);
      x.pmin = std::min(x.pmin, pos[i]);
      x.pmax = std::max(x.pmax, pos[i]);
    }
    m[t] = x;
  }
  return m;
}

enum class Vis { None, Partial, Full };

// window > 0: a pair is visible only when pos_q - pos_k < window (sliding window).
Vis visibility(const TileMeta& q, const TileMeta& k, int64_t window) {
  if (k.smax < q.smin || k.smin > q.smax || k.pmin > q.pmax) return Vis::None;
  if (window > 0 && static_cast<int64_t>(q.pmin) - k.pmax >= window) return Vis::None;  // every key too old
  if (q.smin == q.smax && k.smin == k.smax && q.smin == k.smin && k.pmax <= q.pmin &&
      (window == 0 || static_cast<int64_t>(q.pmax) - k.pmin < window))
    return Vis::Full;
  return Vis::Partial;
}

void validate(const char* fn, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t D) {
  const std::string f(fn);
  check(Tq >= 0 && Tk >= 0, f + ": negative token count (Tq " + std::to_string(Tq) + ", Tk " + std::to_string(Tk) + ")");
  check(Hq > 0 && Hkv > 0 && D > 0, f + ": Hq, Hkv and D must be > 0 (got " + std::to_string(Hq) + ", " +
                                        std::to_string(Hkv) + ", " + std::to_string(D) + ")");
  check(Hq % Hkv == 0, f + ": Hq " + std::to_string(Hq) + " is not a multiple of Hkv " + std::to_string(Hkv));
}

// Grow-only per-thread scratch.
float* scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// xt[h][d][t] = x[t, h, d] for t < T, 0 for T <= t < ldt.
void pack_transposed(const float* x, int64_t T, int64_t H, int64_t D, int64_t ldt, float* xt) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < D; ++d) {
      float* dst = xt + (h * D + d) * ldt;
      for (int64_t t = 0; t < T; ++t) dst[t] = x[(t * H + h) * D + d];
      for (int64_t t = T; t < ldt; ++t) dst[t] = 0.0f;
    }
}

// C[i][0:64] = sum_d A[i*lda + d] * BT[d*ldb + 0:64], i < m (m <= kBQ); C row stride kBK.
void tile_nt(const float* A, int64_t lda, int64_t m, const float* BT, int64_t ldb, int64_t D, float* C) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 4 <= m; i += 4) {
    __m512 c[4][4];
    for (int r = 0; r < 4; ++r)
      for (int v = 0; v < 4; ++v) c[r][v] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; ++d) {
      const float* b = BT + d * ldb;
      const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32),
                   b3 = _mm512_loadu_ps(b + 48);
      for (int r = 0; r < 4; ++r) {
        const __m512 a = _mm512_set1_ps(A[(i + r) * lda + d]);
        c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
        c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
        c[r][2] = _mm512_fmadd_ps(a, b2, c[r][2]);
        c[r][3] = _mm512_fmadd_ps(a, b3, c[r][3]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int v = 0; v < 4; ++v) _mm512_storeu_ps(C + (i + r) * kBK + 16 * v, c[r][v]);
  }
#endif
  for (; i < m; ++i) {
    float* c = C + i * kBK;
    for (int64_t j = 0; j < kBK; ++j) c[j] = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      const float a = A[i * lda + d];
      const float* b = BT + d * ldb;
#pragma omp simd
      for (int64_t j = 0; j < kBK; ++j) c[j] += a * b[j];
    }
  }
}

// C[i][0:D] += sum_k A(i, k) * B[k*ldb + 0:D] for i < M, k < K; A(i, k) = A[i*rsa + k*csa], so the
// transposed operands of the backward (P^T, dS^T) are read in place. AVX-512 register tiles of
// MR rows x NV*16 columns when D is a multiple of 16, else plain simd loops.
#ifdef __AVX512F__
template <int MR, int NV>
void nn_kernel(int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb, float* C,
               int64_t ldc) {
  __m512 c[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_loadu_ps(C + r * ldc + 16 * v);
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(B + k * ldb + 16 * v);
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * rsa + k * csa]);
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
}

template <int MR>
void nn_rows(int nv, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb, float* C,
             int64_t ldc) {
  switch (nv) {
    case 1: nn_kernel<MR, 1>(K, A, rsa, csa, B, ldb, C, ldc); break;
    case 2: nn_kernel<MR, 2>(K, A, rsa, csa, B, ldb, C, ldc); break;
    case 3: nn_kernel<MR, 3>(K, A, rsa, csa, B, ldb, C, ldc); break;
    default: nn_kernel<MR, 4>(K, A, rsa, csa, B, ldb, C, ldc); break;
  }
}
#endif

void tile_nn(int64_t M, int64_t K, int64_t D, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb,
             float* C, int64_t ldc) {
#ifdef __AVX512F__
  if (D % 16 == 0) {
    for (int64_t d0 = 0; d0 < D; d0 += 64) {
      const int nv = static_cast<int>(std::min<int64_t>(4, (D - d0) / 16));
      int64_t i = 0;
      for (; i + 4 <= M; i += 4) nn_rows<4>(nv, K, A + i * rsa, rsa, csa, B + d0, ldb, C + i * ldc + d0, ldc);
      for (; i < M; ++i) nn_rows<1>(nv, K, A + i * rsa, rsa, csa, B + d0, ldb, C + i * ldc + d0, ldc);
    }
    return;
  }
#endif
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[i * rsa + k * csa];
      const float* b = B + k * ldb;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) c[d] += a * b[d];
    }
  }
}

// Scaled scores of query rows [i0, i0+mq) (head h) against key tile [k0, k0+nk), masked to -inf
// where a pair is invisible (or past Tk).
void scores(const float* q, int64_t Hq, int64_t h, int64_t i0, int64_t mq, const float* kt_head, int64_t ldk,
            int64_t k0, int64_t nk, int64_t D, float scale, Vis vis, const int32_t* q_seg, const int32_t* q_pos,
            const int32_t* k_seg, const int32_t* k_pos, int64_t window, float* S) {
  tile_nt(q + (i0 * Hq + h) * D, Hq * D, mq, kt_head + k0, ldk, D, S);
  for (int64_t i = 0; i < mq; ++i) {
    float* s = S + i * kBK;
#pragma omp simd
    for (int64_t j = 0; j < kBK; ++j) s[j] *= scale;
    for (int64_t j = nk; j < kBK; ++j) s[j] = kNegInf;
    if (vis == Vis::Partial) {
      const int32_t qs = q_seg[i0 + i], qp = q_pos[i0 + i];
      for (int64_t j = 0; j < nk; ++j)
        if (k_seg[k0 + j] != qs || k_pos[k0 + j] > qp || (window > 0 && qp - static_cast<int64_t>(k_pos[k0 + j]) >= window))
          s[j] = kNegInf;
    }
  }
}

}  // namespace

void attention_block_forward(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                             const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, float* out,
                             float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  validate("attention_block_forward", Tq, Tk, Hq, Hkv, D);
  check(window >= 0, "attention_block_forward: window must be >= 0, got " + std::to_string(window));
  if (Tq == 0) return;
  if (Tk == 0) {
    std::fill(out, out + Tq * Hq * D, 0.0f);
    std::fill(lse, lse + Tq * Hq, kNegInf);
    return;
  }
  const int64_t g = Hq / Hkv;
  const int64_t ldk = (Tk + kBK - 1) / kBK * kBK;
  static thread_local std::vector<float> kt_buf;
  float* kt = scratch(kt_buf, static_cast<size_t>(Hkv * D * ldk));
  pack_transposed(k, Tk, Hkv, D, ldk, kt);
  const auto qm = tile_meta(q_seg, q_pos, Tq, kBQ);
  const auto km = tile_meta(k_seg, k_pos, Tk, kBK);
  const int64_t nqt = static_cast<int64_t>(qm.size()), nkt = static_cast<int64_t>(km.size());

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t qt = 0; qt < nqt; ++qt) {
      static thread_local std::vector<float> S_buf, acc_buf;
      float* S = scratch(S_buf, kBQ * kBK);
      float* acc = scratch(acc_buf, static_cast<size_t>(kBQ * D));
      const int64_t hk = h / g, i0 = qt * kBQ, mq = std::min(kBQ, Tq - i0);
      float m[kBQ], l[kBQ];
      for (int64_t i = 0; i < mq; ++i) {
        m[i] = kNegInf;
        l[i] = 0.0f;
      }
      std::fill(acc, acc + mq * D, 0.0f);
      for (int64_t kb = 0; kb < nkt; ++kb) {
        const Vis vis = visibility(qm[static_cast<size_t>(qt)], km[static_cast<size_t>(kb)], window);
        if (vis == Vis::None) continue;
        const int64_t k0 = kb * kBK, nk = std::min(kBK, Tk - k0);
        scores(q, Hq, h, i0, mq, kt + hk * D * ldk, ldk, k0, nk, D, scale, vis, q_seg, q_pos, k_seg, k_pos, window, S);
        for (int64_t i = 0; i < mq; ++i) {
          float* s = S + i * kBK;
          float mx = kNegInf;
#pragma omp simd reduction(max : mx)
          for (int64_t j = 0; j < kBK; ++j) mx = std::max(mx, s[j]);
          if (mx == kNegInf) {  // no visible key in this tile: P row = 0
            std::fill(s, s + kBK, 0.0f);
            continue;
          }
          const float mnew = std::max(m[i], mx);
          const float alpha = vmath::exp(m[i] - mnew);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < kBK; ++j) {
            const float p = vmath::exp(s[j] - mnew);  // masked / past-Tk columns: exp(-inf) = 0
            s[j] = p;
            sum += p;
          }
          l[i] = l[i] * alpha + sum;
          m[i] = mnew;
          float* a = acc + i * D;
          if (alpha != 1.0f)
#pragma omp simd
            for (int64_t d = 0; d < D; ++d) a[d] *= alpha;
        }
        // acc += P V (rows without a visible key have P = 0)
        tile_nn(mq, nk, D, S, kBK, 1, v + (k0 * Hkv + hk) * D, Hkv * D, acc, D);
      }
      for (int64_t i = 0; i < mq; ++i) {
        float* o = out + ((i0 + i) * Hq + h) * D;
        if (l[i] == 0.0f) {
          std::fill(o, o + D, 0.0f);
          lse[(i0 + i) * Hq + h] = kNegInf;
          continue;
        }
        const float inv = 1.0f / l[i];
        for (int64_t d = 0; d < D; ++d) o[d] = acc[i * D + d] * inv;
        lse[(i0 + i) * Hq + h] = m[i] + std::log(l[i]);
      }
    }
}

void attention_lse_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t T, int64_t H,
                         int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < T * H; ++r) {
    const float la = lse[r], lb = lse_b[r];
    if (lb == kNegInf) continue;
    float* o = out + r * D;
    const float* ob = out_b + r * D;
    if (la == kNegInf) {
      std::memcpy(o, ob, static_cast<size_t>(D) * sizeof(float));
      lse[r] = lb;
      continue;
    }
    const float mx = std::max(la, lb);
    const float ea = std::exp(la - mx), eb = std::exp(lb - mx);
    const float s = ea + eb;
    const float wa = ea / s, wb = eb / s;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) o[d] = o[d] * wa + ob[d] * wb;
    lse[r] = mx + std::log(s);
  }
}

void attention_softmax_delta(const float* out, const float* dout, float* delta, int64_t T, int64_t H, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < T * H; ++r) {
    float s = 0.0f;
    const float* o = out + r * D;
    const float* g = dout + r * D;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; ++d) s += o[d] * g[d];
    delta[r] = s;
  }
}

namespace {

inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// dst[i] = x[i] rounded to bf16 (held in fp32) for i < n, in grow-only per-thread scratch.
const float* rounded_copy(std::vector<float>& buf, const float* x, int64_t n) {
  float* d = scratch(buf, static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) d[i] = round_bf16(x[i]);
  return d;
}

// The block backward; BF: the "bf16" set's roundings (attention_block_backward_bf16).
template <bool BF>
void block_backward(const char* fn, const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq,
                    const float* k, const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk,
                    const float* lse, const float* delta, const float* dout, float* dq, float* dk, float* dv,
                    int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  validate(fn, Tq, Tk, Hq, Hkv, D);
  check(window >= 0, std::string(fn) + ": window must be >= 0, got " + std::to_string(window));
  if (Tq == 0 || Tk == 0) return;
  if constexpr (BF) {  // every operand of a tile product that is an input: rounded once
    static thread_local std::vector<float> q_buf, k_buf, v_buf, do_buf;
    q = rounded_copy(q_buf, q, Tq * Hq * D);
    dout = rounded_copy(do_buf, dout, Tq * Hq * D);
    k = rounded_copy(k_buf, k, Tk * Hkv * D);
    v = rounded_copy(v_buf, v, Tk * Hkv * D);
  }
  const int64_t g = Hq / Hkv;
  const int64_t ldk = (Tk + kBK - 1) / kBK * kBK;
  static thread_local std::vector<float> kt_buf, vt_buf;
  float* kt = scratch(kt_buf, static_cast<size_t>(Hkv * D * ldk));
  float* vt = scratch(vt_buf, static_cast<size_t>(Hkv * D * ldk));
  pack_transposed(k, Tk, Hkv, D, ldk, kt);
  pack_transposed(v, Tk, Hkv, D, ldk, vt);
  const auto qm = tile_meta(q_seg, q_pos, Tq, kBQ);
  const auto km = tile_meta(k_seg, k_pos, Tk, kBK);
  const int64_t nqt = static_cast<int64_t>(qm.size()), nkt = static_cast<int64_t>(km.size());

  // P and dS of one tile pair (dS written over dP).
  auto tile_p_ds = [&](int64_t h, int64_t hk, int64_t i0, int64_t mq, int64_t k0, int64_t nk, Vis vis, float* P,
                       float* dS) {
    scores(q, Hq, h, i0, mq, kt + hk * D * ldk, ldk, k0, nk, D, scale, vis, q_seg, q_pos, k_seg, k_pos, window, P);
    tile_nt(dout + (i0 * Hq + h) * D, Hq * D, mq, vt + hk * D * ldk + k0, ldk, D, dS);
    for (int64_t i = 0; i < mq; ++i) {
      const float L = lse[(i0 + i) * Hq + h], dl = delta[(i0 + i) * Hq + h];
      float* p = P + i * kBK;
      float* ds = dS + i * kBK;
      if (L == kNegInf) {
        std::fill(p, p + kBK, 0.0f);
        std::fill(ds, ds + kBK, 0.0f);
        continue;
      }
#pragma omp simd
      for (int64_t j = 0; j < kBK; ++j) {
        p[j] = vmath::exp(p[j] - L);  // -inf -> 0
        ds[j] = p[j] * (ds[j] - dl);
      }
      if constexpr (BF) {  // P and dS as operands of dV, dK, dQ (dS was formed from the fp32 P)
        for (int64_t j = 0; j < kBK; ++j) {
          p[j] = round_bf16(p[j]);
          ds[j] = round_bf16(ds[j]);
        }
      }
    }
  };

  // One pass per kv head when there are at least 2 kv heads per thread (one thread: always): each
  // task owns dk/dv of its kv head and dq of its query heads, so S and dP are computed once per tile
  // pair (5 tile products instead of 7). Otherwise two passes give enough parallel tasks.
  const int nthreads = omp_get_max_threads();
  if (nthreads == 1 || Hkv >= 2 * nthreads) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      static thread_local std::vector<float> P_buf, dS_buf, dk_buf, dv_buf;
      float* P = scratch(P_buf, kBQ * kBK);
      float* dS = scratch(dS_buf, kBQ * kBK);
      float* dka = scratch(dk_buf, static_cast<size_t>(kBK * D));
      float* dva = scratch(dv_buf, static_cast<size_t>(kBK * D));
      for (int64_t kb = 0; kb < nkt; ++kb) {
        const int64_t k0 = kb * kBK, nk = std::min(kBK, Tk - k0);
        std::fill(dka, dka + nk * D, 0.0f);
        std::fill(dva, dva + nk * D, 0.0f);
        bool any = false;
        for (int64_t h = hk * g; h < (hk + 1) * g; ++h)
          for (int64_t qt = 0; qt < nqt; ++qt) {
            const Vis vis = visibility(qm[static_cast<size_t>(qt)], km[static_cast<size_t>(kb)], window);
            if (vis == Vis::None) continue;
            any = true;
            const int64_t i0 = qt * kBQ, mq = std::min(kBQ, Tq - i0);
            tile_p_ds(h, hk, i0, mq, k0, nk, vis, P, dS);
            for (int64_t e = 0; e < mq * kBK; ++e) dS[e] *= scale;
            tile_nn(nk, mq, D, P, 1, kBK, dout + (i0 * Hq + h) * D, Hq * D, dva, D);  // dV += P^T dO
            tile_nn(nk, mq, D, dS, 1, kBK, q + (i0 * Hq + h) * D, Hq * D, dka, D);    // dK += dS^T Q
            tile_nn(mq, nk, D, dS, kBK, 1, k + (k0 * Hkv + hk) * D, Hkv * D, dq + (i0 * Hq + h) * D,
                    Hq * D);  // dQ += dS K
          }
        if (!any) continue;
        for (int64_t j = 0; j < nk; ++j) {
          float* ok = dk + ((k0 + j) * Hkv + hk) * D;
          float* ov = dv + ((k0 + j) * Hkv + hk) * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) {
            ok[d] += dka[j * D + d];
            ov[d] += dva[j * D + d];
          }
        }
      }
    }
    return;
  }

  // Pass A: dq over (head, query tile).
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t qt = 0; qt < nqt; ++qt) {
      static thread_local std::vector<float> P_buf, dS_buf, acc_buf;
      float* P = scratch(P_buf, kBQ * kBK);
      float* dS = scratch(dS_buf, kBQ * kBK);
      float* acc = scratch(acc_buf, static_cast<size_t>(kBQ * D));
      const int64_t hk = h / g, i0 = qt * kBQ, mq = std::min(kBQ, Tq - i0);
      std::fill(acc, acc + mq * D, 0.0f);
      bool any = false;
      for (int64_t kb = 0; kb < nkt; ++kb) {
        const Vis vis = visibility(qm[static_cast<size_t>(qt)], km[static_cast<size_t>(kb)], window);
        if (vis == Vis::None) continue;
        any = true;
        const int64_t k0 = kb * kBK, nk = std::min(kBK, Tk - k0);
        tile_p_ds(h, hk, i0, mq, k0, nk, vis, P, dS);
        tile_nn(mq, nk, D, dS, kBK, 1, k + (k0 * Hkv + hk) * D, Hkv * D, acc, D);  // dQ += dS K
      }
      if (!any) continue;
      for (int64_t i = 0; i < mq; ++i) {
        float* o = dq + ((i0 + i) * Hq + h) * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) o[d] += scale * acc[i * D + d];
      }
    }

  // Pass B: dk, dv over (kv head, key tile).
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t hk = 0; hk < Hkv; ++hk)
    for (int64_t kb = 0; kb < nkt; ++kb) {
      static thread_local std::vector<float> P_buf, dS_buf, dk_buf, dv_buf;
      float* P = scratch(P_buf, kBQ * kBK);
      float* dS = scratch(dS_buf, kBQ * kBK);
      float* dka = scratch(dk_buf, static_cast<size_t>(kBK * D));
      float* dva = scratch(dv_buf, static_cast<size_t>(kBK * D));
      const int64_t k0 = kb * kBK, nk = std::min(kBK, Tk - k0);
      std::fill(dka, dka + nk * D, 0.0f);
      std::fill(dva, dva + nk * D, 0.0f);
      bool any = false;
      for (int64_t h = hk * g; h < (hk + 1) * g; ++h)
        for (int64_t qt = 0; qt < nqt; ++qt) {
          const Vis vis = visibility(qm[static_cast<size_t>(qt)], km[static_cast<size_t>(kb)], window);
          if (vis == Vis::None) continue;
          any = true;
          const int64_t i0 = qt * kBQ, mq = std::min(kBQ, Tq - i0);
          tile_p_ds(h, hk, i0, mq, k0, nk, vis, P, dS);
          // dV += P^T dO, dK += dS^T Q (A read transposed: A(j, i) = P[i][j])
          tile_nn(nk, mq, D, P, 1, kBK, dout + (i0 * Hq + h) * D, Hq * D, dva, D);
          tile_nn(nk, mq, D, dS, 1, kBK, q + (i0 * Hq + h) * D, Hq * D, dka, D);
        }
      if (!any) continue;
      for (int64_t j = 0; j < nk; ++j) {
        float* ok = dk + ((k0 + j) * Hkv + hk) * D;
        float* ov = dv + ((k0 + j) * Hkv + hk) * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) {
          ok[d] += scale * dka[j * D + d];
          ov[d] += dva[j * D + d];
        }
      }
    }
}

}  // namespace

void attention_block_backward(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                              const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, const float* lse,
                              const float* delta, const float* dout, float* dq, float* dk, float* dv, int64_t Hq,
                              int64_t Hkv, int64_t D, float scale, int64_t window) {
  block_backward<false>("attention_block_backward", q, q_seg, q_pos, Tq, k, v, k_seg, k_pos, Tk, lse, delta, dout, dq,
                        dk, dv, Hq, Hkv, D, scale, window);
}

void attention_block_backward_bf16(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq,
                                   const float* k, const float* v, const int32_t* k_seg, const int32_t* k_pos,
                                   int64_t Tk, const float* lse, const float* delta, const float* dout, float* dq,
                                   float* dk, float* dv, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                   int64_t window) {
  block_backward<true>("attention_block_backward_bf16", q, q_seg, q_pos, Tq, k, v, k_seg, k_pos, Tk, lse, delta, dout,
                       dq, dk, dv, Hq, Hkv, D, scale, window);
}

}  // namespace twinkle::kernels::cpu
