// bf16 flash-attention backward for the mixed-precision set (see twinkle/kernels/cpu/attention_bf16.h).
//
// The tile loops, masking, P / dS rows and schedule are those of the fp32 backward (attention.cpp,
// shared through attention_tiles.h); only the five tile products change: they run on bf16 operands
// with fp32 accumulation through vdpbf16ps (AVX512-BF16), C[M, 16*NV] (+)= A[M, 2*KP] B[2*KP, 16*NV]
// with A as 32-bit words holding the bf16 pair (k = 2p, 2p+1) of a row and B in the pair-interleaved
// (VNNI) layout, word (p, n) = (B(2p, n), B(2p+1, n)). The operands are packed once per call:
//   rows   [H][Tp][Dp] bf16      Q, dO (A of S = Q K^T and dP = dO V^T)
//   colsT  [H][Dp/2][Tp] words   K^T, V^T (B of S and dP: pairs along the head dim)
//   pairs  [H][Tp/2][Dp] words   K (B of dQ = dS K: pairs along tokens)
//   pairsT [H][Dp][Tp/2] words   Q^T, dO^T (A of dK^T += Q^T dS and dV^T += dO^T P)
// over a padded token index in which every segment starts at a multiple of 64 (so that token pairs and
// tiles never straddle two segments; padding is zero). Per tile, dS is rounded to bf16 rows (A of
// dQ = dS K), P and dS to row pairs (B of dV^T and dK^T). dK and dV are accumulated
// transposed ([Dp][64] per key tile) and written back once per key tile.
// Semantics: FlashAttention-2's bf16 backward (Dao 2023: bf16 Q, K, V, P, dS and dO in the matmuls,
// fp32 softmax statistics and accumulators); PyTorch's autocast runs the same products in bf16.
#include "twinkle/kernels/cpu/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attention_tiles.h"
#include "twinkle/core/dtype.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu {

namespace {

using namespace attention_tiles;

#if defined(__AVX512BF16__) && defined(__AVX512F__)
constexpr bool kNativeDot = true;
#else
constexpr bool kNativeDot = false;
#endif

inline int64_t rup2(int64_t x) { return (x + 1) & ~int64_t{1}; }
inline int64_t rup64(int64_t x) { return (x + 63) & ~int64_t{63}; }

inline uint16_t bf(float x) { return f32_to_bf16(x); }  // round to nearest even (core/dtype.h)
inline float fl(uint16_t b) { return bf16_to_f32(b); }

// ---------------------------------------------------------------- bf16 micro-kernel

// C[MR, 16*NV] (+)= sum_p A(i, p) . B(p, n): A(i, p) = word A[i*rsa + p], B(p, n) = word B[p*ldb + n].
template <int MR, int NV>
void ukb(int64_t KP, const uint32_t* A, int64_t rsa, const uint32_t* B, int64_t ldb, float* C, int64_t ldc, bool acc) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) c[i][v] = acc ? _mm512_loadu_ps(C + i * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < KP; ++p) {
    __m512bh b[NV];
    const uint32_t* bp = B + p * ldb;
    for (int v = 0; v < NV; ++v) {
      const __m512i t = _mm512_loadu_si512(bp + 16 * v);
      b[v] = reinterpret_cast<const __m512bh&>(t);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512i t = _mm512_set1_epi32(static_cast<int>(A[i * rsa + p]));
      const __m512bh a = reinterpret_cast<const __m512bh&>(t);
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_dpbf16_ps(c[i][v], a, b[v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + i * ldc + 16 * v, c[i][v]);
#else  // the same products widened to fp32 (exact), summed in fp32
  constexpr int N = 16 * NV;
  for (int i = 0; i < MR; ++i)
    for (int n = 0; n < N; ++n) {
      float s = acc ? C[i * ldc + n] : 0.0f;
      for (int64_t p = 0; p < KP; ++p) {
        const uint32_t a = A[i * rsa + p], b = B[p * ldb + n];
        s += fl(static_cast<uint16_t>(a & 0xffff)) * fl(static_cast<uint16_t>(b & 0xffff)) +
             fl(static_cast<uint16_t>(a >> 16)) * fl(static_cast<uint16_t>(b >> 16));
      }
      C[i * ldc + n] = s;
    }
#endif
}

using UK = void (*)(int64_t, const uint32_t*, int64_t, const uint32_t*, int64_t, float*, int64_t, bool);
template <int MR>
constexpr UK pick_nv(int nv) {
  return nv == 1 ? &ukb<MR, 1> : nv == 2 ? &ukb<MR, 2> : nv == 3 ? &ukb<MR, 3> : &ukb<MR, 4>;
}
UK pick(int mr, int nv) {
  switch (mr) {
    case 1: return pick_nv<1>(nv);
    case 2: return pick_nv<2>(nv);
    case 3: return pick_nv<3>(nv);
    case 4: return pick_nv<4>(nv);
    case 5: return pick_nv<5>(nv);
    default: return pick_nv<6>(nv);
  }
}

// C[M, N] (+)= A B, N a multiple of 16, KP word pairs.
void gemm_bf(int64_t M, int64_t N, int64_t KP, const uint32_t* A, int64_t rsa, const uint32_t* B, int64_t ldb,
             float* C, int64_t ldc, bool acc) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (N - n0) / 16));
    for (int64_t i0 = 0; i0 < M; i0 += 6) {
      const int mr = static_cast<int>(std::min<int64_t>(6, M - i0));
      pick(mr, nv)(KP, A + i0 * rsa, rsa, B + n0, ldb, C + i0 * ldc + n0, ldc, acc);
    }
  }
}

// ---------------------------------------------------------------- tile conversions

// dst[c] = bf16(src[c]) for c < n.
inline void row_bf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t c = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  for (; c + 16 <= n; c += 16) {
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + c));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), reinterpret_cast<const __m256i&>(r));
  }
#endif
  for (; c < n; ++c) dst[c] = bf(src[c]);
}

// Word row: w[c] = (bf16(r0[c]), bf16(r1[c])) for c < n (n a multiple of 16); r1 null = zeros.
inline void pair_row(const float* r0, const float* r1, uint32_t* w, int64_t n) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t c = 0; c < n; c += 16) {
    const __m512bh b = _mm512_cvtne2ps_pbh(r1 ? _mm512_loadu_ps(r1 + c) : _mm512_setzero_ps(), _mm512_loadu_ps(r0 + c));
    _mm512_storeu_si512(w + c, _mm512_permutexvar_epi16(idx, reinterpret_cast<const __m512i&>(b)));
  }
#else
  for (int64_t c = 0; c < n; ++c)
    w[c] = static_cast<uint32_t>(bf(r0[c])) | (static_cast<uint32_t>(r1 ? bf(r1[c]) : 0) << 16);
#endif
}

// ---------------------------------------------------------------- per-call packing

// Padded token index: segment s starts at off[s] (multiples of 64); returns Tp.
int64_t padded_offsets(const int32_t* cu, int64_t n_seqs, std::vector<int64_t>& off) {
  off.assign(static_cast<size_t>(n_seqs) + 1, 0);
  for (int64_t s = 0; s < n_seqs; ++s) off[s + 1] = off[s] + rup64(cu[s + 1] - cu[s]);
  return off[n_seqs];
}

// rows: dst[h][Tp][Dp] bf16 from src [T, H, D] (zeros in padding rows and columns >= D). Token-major
// walk: each source row [H, D] is read once, contiguously.
void pack_rows(const float* src, const int32_t* cu, int64_t n_seqs, const std::vector<int64_t>& off, int64_t H,
               int64_t D, int64_t Dp, int64_t Tp, uint16_t* dst) {
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t L = cu[s + 1] - cu[s], Lp = off[s + 1] - off[s];
#pragma omp parallel for schedule(static) if (Lp * H * D > 65536)
    for (int64_t r = 0; r < Lp; ++r)
      for (int64_t h = 0; h < H; ++h) {
        uint16_t* d = dst + (h * Tp + off[s] + r) * Dp;
        if (r < L) {
          row_bf16(src + ((cu[s] + r) * H + h) * D, d, D);
          std::fill(d + D, d + Dp, uint16_t{0});
        } else {
          std::fill(d, d + Dp, uint16_t{0});
        }
      }
  }
}

// Transposes a [R][C] word matrix (row stride ldi) into [C][R] (row stride ldo), in 16 x 16 blocks.
void transpose_words(const uint32_t* in, int64_t R, int64_t C, int64_t ldi, uint32_t* out, int64_t ldo) {
  constexpr int64_t b = 16;
#pragma omp parallel for collapse(2) schedule(static) if (R * C > 65536)
  for (int64_t r0 = 0; r0 < R; r0 += b)
    for (int64_t c0 = 0; c0 < C; c0 += b) {
      const int64_t rn = std::min(R - r0, b), cn = std::min(C - c0, b);
      uint32_t t[b][b];
      for (int64_t r = 0; r < rn; ++r)
        for (int64_t c = 0; c < b; ++c) t[c][r] = c < cn ? in[(r0 + r) * ldi + c0 + c] : 0u;
      for (int64_t c = 0; c < cn; ++c) std::memcpy(out + (c0 + c) * ldo + r0, t[c], static_cast<size_t>(rn) * 4);
    }
}

// pairs: [Tp/2][Dp] words from rows [Tp][Dp] bf16 (one head): word (p, d) = (rows[2p][d], rows[2p+1][d]).
void pair_tokens(const uint16_t* rows, int64_t Tp, int64_t Dp, uint32_t* dst) {
#pragma omp parallel for schedule(static) if (Tp * Dp > 65536)
  for (int64_t p = 0; p < Tp / 2; ++p) {
    const uint16_t* r0 = rows + 2 * p * Dp;
    const uint16_t* r1 = r0 + Dp;
    uint32_t* w = dst + p * Dp;
    for (int64_t d = 0; d < Dp; ++d) w[d] = static_cast<uint32_t>(r0[d]) | (static_cast<uint32_t>(r1[d]) << 16);
  }
}

// Per-call packed operands (grow-only, calling thread).
struct Packed {
  std::vector<uint16_t> rows;
  std::vector<uint32_t> words;
  uint16_t* r(size_t n) {
    if (rows.size() < n) rows.resize(n);
    return rows.data();
  }
  uint32_t* w(size_t n) {
    if (words.size() < n) words.resize(n);
    return words.data();
  }
};
thread_local Packed g_q, g_k, g_v, g_do;              // rows
thread_local Packed g_kt, g_vt, g_kp, g_qt, g_dot, g_tmp;  // words
thread_local Scratch g_dq, g_delta;

// colsT of one tensor: [H][Dp/2][Tp] words from its rows.
void pack_cols_t(const uint16_t* rows, int64_t H, int64_t Tp, int64_t Dp, uint32_t* dst) {
  for (int64_t h = 0; h < H; ++h)
    transpose_words(reinterpret_cast<const uint32_t*>(rows + h * Tp * Dp), Tp, Dp / 2, Dp / 2, dst + h * (Dp / 2) * Tp,
                    Tp);
}
// pairs of one tensor: [H][Tp/2][Dp] words.
void pack_pairs(const uint16_t* rows, int64_t H, int64_t Tp, int64_t Dp, uint32_t* dst) {
  for (int64_t h = 0; h < H; ++h) pair_tokens(rows + h * Tp * Dp, Tp, Dp, dst + h * (Tp / 2) * Dp);
}
// pairsT: [H][Dp][Tp/2] words (tmp: Tp/2*Dp words of scratch).
void pack_pairs_t(const uint16_t* rows, int64_t H, int64_t Tp, int64_t Dp, uint32_t* tmp, uint32_t* dst) {
  for (int64_t h = 0; h < H; ++h) {
    pair_tokens(rows + h * Tp * Dp, Tp, Dp, tmp);
    transpose_words(tmp, Tp / 2, Dp, Dp, dst + h * Dp * (Tp / 2), Tp / 2);
  }
}

thread_local Scratch tl_s, tl_dkv, tl_dq;
thread_local std::vector<uint32_t> tl_dsw, tl_pv, tl_dsv;

uint32_t* words(std::vector<uint32_t>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

bool flash_attention_bf16_native() { return kNativeDot; }

void flash_attention_backward_bf16(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                   const float* dout, float* dq, float* dk, float* dv, const int32_t* cu,
                                   int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  validate("flash_attention_backward_bf16", cu, n_seqs, Hq, Hkv, D);
  check(window >= 0, "flash_attention_backward_bf16: window must be >= 0 (0 = none), got " + std::to_string(window));
  const int64_t Dp = rup16(D), group = Hq / Hkv, DP = Dp / 2;
  const int64_t T0 = cu[0], Tn = cu[n_seqs] - T0;
  zero_prefix(dq, T0, Hq * D);
  zero_prefix(dk, T0, Hkv * D);
  zero_prefix(dv, T0, Hkv * D);
  if (Tn <= 0) return;
  const float c2 = scale * kLog2e;
  std::vector<int64_t> off;
  const int64_t Tp = padded_offsets(cu, n_seqs, off), Tp2 = Tp / 2;

  uint16_t* Qr = g_q.r(static_cast<size_t>(Hq * Tp * Dp));
  uint16_t* dOr = g_do.r(static_cast<size_t>(Hq * Tp * Dp));
  uint16_t* Kr = g_k.r(static_cast<size_t>(Hkv * Tp * Dp));
  uint16_t* Vr = g_v.r(static_cast<size_t>(Hkv * Tp * Dp));
  pack_rows(q, cu, n_seqs, off, Hq, D, Dp, Tp, Qr);
  pack_rows(dout, cu, n_seqs, off, Hq, D, Dp, Tp, dOr);
  pack_rows(k, cu, n_seqs, off, Hkv, D, Dp, Tp, Kr);
  pack_rows(v, cu, n_seqs, off, Hkv, D, Dp, Tp, Vr);
  uint32_t* KT = g_kt.w(static_cast<size_t>(Hkv * DP * Tp));
  uint32_t* VT = g_vt.w(static_cast<size_t>(Hkv * DP * Tp));
  uint32_t* Kw = g_kp.w(static_cast<size_t>(Hkv * Tp2 * Dp));
  uint32_t* Qt = g_qt.w(static_cast<size_t>(Hq * Dp * Tp2));
  uint32_t* dOt = g_dot.w(static_cast<size_t>(Hq * Dp * Tp2));
  uint32_t* tmp = g_tmp.w(static_cast<size_t>(Tp2 * Dp));
  pack_cols_t(Kr, Hkv, Tp, Dp, KT);
  pack_cols_t(Vr, Hkv, Tp, Dp, VT);
  pack_pairs(Kr, Hkv, Tp, Dp, Kw);
  pack_pairs_t(Qr, Hq, Tp, Dp, tmp, Qt);
  pack_pairs_t(dOr, Hq, Tp, Dp, tmp, dOt);
  float* dq_acc = g_dq.get(static_cast<size_t>(Tn * Hq * Dp), true);
  float* delta = g_delta.get(static_cast<size_t>(2 * Tn * Hq), false);
  float* lse2 = delta + Tn * Hq;
  backward_delta(out, dout, lse, T0, Tn, Hq, D, delta, lse2);

  const BwdSchedule sched = backward_schedule(cu, n_seqs, Hq, Hkv, omp_get_max_threads(), -1);  // Auto's
  const std::vector<BwdTask>& tasks = sched.tasks;
  const bool by_head = sched.by_head;
  const std::vector<int64_t>& tile_base = sched.tile_base;
  const std::unique_ptr<std::mutex[]>& locks = sched.locks;
  const int64_t ntasks = static_cast<int64_t>(tasks.size());

#pragma omp parallel if (ntasks > 1)
  {
    float* P = tl_s.get(2 * kB * kB, false);
    float* dS = P + kB * kB;
    float* dKV = tl_dkv.get(2 * Dp * kB, false);  // dK^T, dV^T [Dp][64]
    float* dKt = dKV;
    float* dVt = dKV + Dp * kB;
    float* dQ = tl_dq.get(kB * Dp, false);
    uint32_t* dSw = words(tl_dsw, kB * kB / 2);  // dS rows as pairs along keys [64][32]
    uint32_t* Pv = words(tl_pv, kB * kB / 2);    // P row pairs [32][64]
    uint32_t* dSv = words(tl_dsv, kB * kB / 2);  // dS row pairs [32][64]
#pragma omp for schedule(dynamic, 1)
    for (int64_t ti = 0; ti < ntasks; ++ti) {
      const BwdTask& tk = tasks[ti];
      const int64_t base = cu[tk.seg], L = cu[tk.seg + 1] - base, rel = base - T0, g = tk.g, po = off[tk.seg];
      const int64_t nt = (L + kB - 1) / kB;
      const uint32_t* KTg = KT + g * DP * Tp + po;
      const uint32_t* VTg = VT + g * DP * Tp + po;
      const uint32_t* Kg = Kw + (g * Tp2 + po / 2) * Dp;
      for (int64_t kj = tk.kt_begin; kj < tk.kt_end; ++kj) {
        const int64_t k0 = kj * kB, kn = std::min(kB, L - k0), knp = rup16(kn), kn2 = rup2(kn);
        std::memset(dKV, 0, sizeof(float) * 2 * Dp * kB);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t qi = kj; qi < nt; ++qi) {
            const int64_t q0 = qi * kB, qn = std::min(kB, L - q0), qn2 = rup2(qn);
            if (window > 0 && q0 - (k0 + kn - 1) >= window) break;
            const uint32_t* Qw = reinterpret_cast<const uint32_t*>(Qr + (h * Tp + po + q0) * Dp);
            const uint32_t* dOw = reinterpret_cast<const uint32_t*>(dOr + (h * Tp + po + q0) * Dp);
            gemm_bf(qn, knp, DP, Qw, DP, KTg + k0, Tp, P, kB, false);    // S = Q K^T
            gemm_bf(qn, knp, DP, dOw, DP, VTg + k0, Tp, dS, kB, false);  // dP = dO V^T
            for (int64_t r = 0; r < qn; ++r) {
              const int64_t row = (rel + q0 + r) * Hq + h;
              const float l2 = lse2[row], dl = delta[row];
              float* pr = P + r * kB;
              float* dsr = dS + r * kB;
              const int64_t nv = visible(q0 + r, k0, kn);
              const int64_t lo = window_lo(q0 + r, k0, kn, window);
              if (lo >= nv) {
                std::memset(pr, 0, sizeof(float) * static_cast<size_t>(knp));
                std::memset(dsr, 0, sizeof(float) * static_cast<size_t>(knp));
              } else {
                for (int64_t c = 0; c < lo; ++c) pr[c] = -std::numeric_limits<float>::infinity();
                prob_dscore_row(pr, dsr, nv, c2, l2, dl);
                for (int64_t c = rup16(nv); c < knp; ++c) pr[c] = 0.0f, dsr[c] = 0.0f;
              }
              row_bf16(dsr, reinterpret_cast<uint16_t*>(dSw + r * (kB / 2)), kn2);
            }
            for (int64_t j = 0; j < qn2 / 2; ++j) {  // row pairs (2j, 2j+1); a row past qn is zero
              const bool two = 2 * j + 1 < qn;
              pair_row(P + 2 * j * kB, two ? P + (2 * j + 1) * kB : nullptr, Pv + j * kB, knp);
              pair_row(dS + 2 * j * kB, two ? dS + (2 * j + 1) * kB : nullptr, dSv + j * kB, knp);
            }
            const int64_t qo = (po + q0) / 2;
            gemm_bf(Dp, knp, qn2 / 2, dOt + h * Dp * Tp2 + qo, Tp2, Pv, kB, dVt, kB, true);  // dV^T += dO^T P
            gemm_bf(Dp, knp, qn2 / 2, Qt + h * Dp * Tp2 + qo, Tp2, dSv, kB, dKt, kB, true);  // dK^T += Q^T dS
            gemm_bf(qn, Dp, kn2 / 2, dSw, kB / 2, Kg + (k0 / 2) * Dp, Dp, dQ, Dp, false);    // dQ tile = dS K
            float* acc = dq_acc + ((rel + q0) * Hq + h) * Dp;
            auto add = [&] {
              for (int64_t r = 0; r < qn; ++r) {
                float* a = acc + r * Hq * Dp;
                const float* s = dQ + r * Dp;
#pragma omp simd
                for (int64_t d = 0; d < Dp; ++d) a[d] += s[d];
              }
            };
            if (by_head) {
              add();
            } else {
              std::lock_guard<std::mutex> lk(locks[tile_base[tk.seg] + h * nt + qi]);
              add();
            }
          }
        }
        for (int64_t r = 0; r < kn; ++r) {
          const int64_t t = base + k0 + r;
          float* dkr = dk + (t * Hkv + g) * D;
          float* dvr = dv + (t * Hkv + g) * D;
          for (int64_t d = 0; d < D; ++d) {
            dkr[d] = dKt[d * kB + r] * scale;
            dvr[d] = dVt[d * kB + r];
          }
        }
      }
    }
  }

#pragma omp parallel for schedule(static) if (Tn * Hq * D > 65536)
  for (int64_t i = 0; i < Tn * Hq; ++i) {
    float* d = dq + (T0 * Hq + i) * D;
    const float* a = dq_acc + i * Dp;
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) d[j] = a[j] * scale;
  }
}

}  // namespace twinkle::kernels::cpu
