// FlashAttention-2 style causal GQA on packed sequences (see attention.h).
//
// Tiles of kB = 64 queries x 64 keys. Every product is done by one small-GEMM routine,
// C[M,N] (+)= A[M,K] * B[K,N] with B row-major and N a multiple of 16, built on an AVX-512 register
// micro-kernel of up to 6 rows x 64 columns (24 zmm accumulators); A is read by broadcasts with
// arbitrary row/column strides, so transposed A operands (P^T, dS^T) cost nothing extra.
// K^T, V (and in the backward Q, dO, K, V^T) are packed once per call into per-head, 16-padded
// layouts that the tile products read in place (grow-only thread_local scratch, no per-call page faults).
// Per tile pair, forward:  S = Q K^T; online softmax (base-2, scale*log2(e) folded in); O += P V.
// Backward (recomputing P from the saved lse): S = Q K^T; P = exp(S*scale - lse); dP = dO V^T;
// dS = P * (dP - rowsum(dO*O)); dV += P^T dO; dK += dS^T Q; dQ += dS K (scale applied at the end).
#include "twinkle/kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/vmath.h"
#include "attention_tiles.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu {

namespace {

using namespace attention_tiles;

// ---------------------------------------------------------------- small GEMM

// C[MR, 16*NV] (+)= A[MR, K] * B[K, 16*NV]; A(i,k) = A[i*rsa + k*csa].
template <int MR, int NV>
void ukernel(int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb, float* C, int64_t ldc,
             bool acc) {
#ifdef __AVX512F__
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) c[i][v] = acc ? _mm512_loadu_ps(C + i * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[NV];
    const float* bk = B + k * ldb;
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(bk + 16 * v);
    const float* ak = A + k * csa;
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(ak[i * rsa]);
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_fmadd_ps(a, b[v], c[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + i * ldc + 16 * v, c[i][v]);
#else
  constexpr int N = 16 * NV;
  float c[MR][N];
  for (int i = 0; i < MR; ++i)
    for (int n = 0; n < N; ++n) c[i][n] = acc ? C[i * ldc + n] : 0.0f;
  for (int64_t k = 0; k < K; ++k) {
    const float* bk = B + k * ldb;
    for (int i = 0; i < MR; ++i) {
      const float a = A[i * rsa + k * csa];
#pragma omp simd
      for (int n = 0; n < N; ++n) c[i][n] += a * bk[n];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int n = 0; n < N; ++n) C[i * ldc + n] = c[i][n];
#endif
}

using UKernel = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, bool);

template <int MR>
constexpr UKernel pick_nv(int nv) {
  return nv == 1 ? &ukernel<MR, 1> : nv == 2 ? &ukernel<MR, 2> : nv == 3 ? &ukernel<MR, 3> : &ukernel<MR, 4>;
}

UKernel pick(int mr, int nv) {
  switch (mr) {
    case 1: return pick_nv<1>(nv);
    case 2: return pick_nv<2>(nv);
    case 3: return pick_nv<3>(nv);
    case 4: return pick_nv<4>(nv);
    case 5: return pick_nv<5>(nv);
    default: return pick_nv<6>(nv);
  }
}

// C[M, N] (+)= A * B, N a multiple of 16 (B and C hold N readable/writable columns).
void gemm_small(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t ldb,
                float* C, int64_t ldc, bool acc) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (N - n0) / 16));
    for (int64_t i0 = 0; i0 < M; i0 += 6) {
      const int mr = static_cast<int>(std::min<int64_t>(6, M - i0));
      pick(mr, nv)(K, A + i0 * rsa, rsa, csa, B + n0, ldb, C + i0 * ldc + n0, ldc, acc);
    }
  }
}

// ---------------------------------------------------------------- packing

// Token rows [T0, T0+Tn) of a [T, H, D] tensor -> dst [H][Tn][Dp] (padding columns zero).
void pack_rows(const float* src, int64_t T0, int64_t Tn, int64_t H, int64_t D, int64_t Dp, float* dst) {
#pragma omp parallel for schedule(static) if (Tn * H * D > 65536)
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float* d = dst + (h * Tn + t) * Dp;
      std::memcpy(d, src + ((T0 + t) * H + h) * D, D * sizeof(float));
      for (int64_t j = D; j < Dp; ++j) d[j] = 0.0f;
    }
}

// Token rows [T0, T0+Tn) of a [T, H, D] tensor -> transposed dst [H][D][ldT] (column t = token T0+t);
// columns [Tn, ldT) zero. Blocks of 16 tokens: strided reads, contiguous 64-byte writes.
void pack_t(const float* src, int64_t T0, int64_t Tn, int64_t H, int64_t D, int64_t ldT, float* dst) {
  const int64_t nb = (Tn + 15) / 16;
#pragma omp parallel for collapse(2) schedule(static) if (Tn * H * D > 65536)
  for (int64_t h = 0; h < H; ++h)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t t0 = b * 16, t1 = std::min(Tn, t0 + 16);
      for (int64_t d = 0; d < D; ++d) {
        float* o = dst + (h * D + d) * ldT;
        for (int64_t t = t0; t < t1; ++t) o[t] = src[((T0 + t) * H + h) * D + d];
      }
    }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < D; ++d) std::memset(dst + (h * D + d) * ldT + Tn, 0, (ldT - Tn) * sizeof(float));
}

// ---------------------------------------------------------------- forward

struct FwdTask {
  int64_t seg, head, qtile, cost;
};

thread_local Scratch tl_a, tl_b, tl_c, tl_d;     // per-thread tiles
thread_local Scratch g_kt, g_v, g_k, g_q, g_do;  // packed operands (calling thread)
thread_local Scratch g_dq, g_delta;

}  // namespace

int64_t flash_attention_scratch_bytes(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, bool backward) {
  if (T <= 0) return 0;
  auto bytes = [](int64_t n) { return (std::max<int64_t>(n, 16) * 4 + 63) / 64 * 64; };  // Scratch::get
  const int64_t Dp = rup16(D), ldT = rup16(T) + 16;
  int64_t b = bytes((backward ? 2 : 1) * Hkv * D * ldT) + bytes(Hkv * T * Dp);  // K^T (+ V^T), V rows
  if (backward) b += 2 * bytes(Hq * T * Dp) + bytes(Hkv * T * Dp) + bytes(T * Hq * Dp) + bytes(2 * T * Hq);
  return b;
}

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                             const int32_t* cu, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                             int64_t window) {
  validate("flash_attention_forward", cu, n_seqs, Hq, Hkv, D);
  check(window >= 0, "flash_attention_forward: window must be >= 0 (0 = none), got " + std::to_string(window));
  const int64_t Dp = rup16(D), group = Hq / Hkv;
  const int64_t T0 = cu[0], Tn = cu[n_seqs] - T0;
  zero_prefix(out, T0, Hq * D);
  zero_prefix(lse, T0, Hq);
  if (Tn <= 0) return;

  // K^T per kv head [Hkv][D][ldT] and V rows [Hkv][Tn][Dp], packed once: the tile loops then read
  // them in place (ldT leaves room for a key tile's 16-column rounding past the last token).
  const int64_t ldT = rup16(Tn) + 16;
  float* KT = g_kt.get(static_cast<size_t>(Hkv * D * ldT), false);
  float* Vp = g_v.get(static_cast<size_t>(Hkv * Tn * Dp), false);
  pack_t(k, T0, Tn, Hkv, D, ldT, KT);
  pack_rows(v, T0, Tn, Hkv, D, Dp, Vp);

  std::vector<FwdTask> tasks;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t nt = (cu[s + 1] - cu[s] + kB - 1) / kB;
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < nt; ++i) tasks.push_back({s, h, i, i + 1 - first_key_tile(i * kB, window)});
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const FwdTask& a, const FwdTask& b) { return a.cost > b.cost; });
  const int64_t ntasks = static_cast<int64_t>(tasks.size());
  const float c2 = scale * kLog2e;  // scores in log2 units

#pragma omp parallel if (ntasks > 1)
  {
    float* Qb = tl_a.get(kB * Dp, false);
    float* Sb = tl_b.get(kB * kB, false);
    float* Ob = tl_c.get(kB * Dp, false);
    float m[kB], l[kB];
#pragma omp for schedule(dynamic, 1)
    for (int64_t ti = 0; ti < ntasks; ++ti) {
      const FwdTask& tk = tasks[ti];
      const int64_t base = cu[tk.seg], L = cu[tk.seg + 1] - base, rel = base - T0;
      const int64_t h = tk.head, g = h / group;
      const int64_t q0 = tk.qtile * kB, qn = std::min(kB, L - q0);
      const float* KTg = KT + g * D * ldT + rel;
      const float* Vg = Vp + (g * Tn + rel) * Dp;
      for (int64_t r = 0; r < qn; ++r) {
        std::memcpy(Qb + r * Dp, q + ((base + q0 + r) * Hq + h) * D, D * sizeof(float));
        for (int64_t d = D; d < Dp; ++d) Qb[r * Dp + d] = 0.0f;
      }
      std::memset(Ob, 0, sizeof(float) * kB * Dp);
      for (int64_t r = 0; r < kB; ++r) m[r] = -std::numeric_limits<float>::infinity(), l[r] = 0.0f;
      // key tiles wholly before every query's sliding window are skipped
      for (int64_t kj = first_key_tile(q0, window); kj <= tk.qtile; ++kj) {
        const int64_t k0 = kj * kB, kn = std::min(kB, L - k0), knp = rup16(kn);
        // S = Q K^T (columns >= kn hold neighbouring keys or zeros; they are masked below)
        gemm_small(qn, knp, D, Qb, Dp, 1, KTg + k0, ldT, Sb, kB, false);
        for (int64_t r = 0; r < qn; ++r) {
          float* sr = Sb + r * kB;
          const int64_t nv = visible(q0 + r, k0, kn);
          const int64_t lo = window_lo(q0 + r, k0, kn, window);
          if (lo >= nv) {  // no key of this tile in the row's window: contributes nothing
            std::memset(sr, 0, sizeof(float) * static_cast<size_t>(kn));
            continue;
          }
          for (int64_t c = 0; c < lo; ++c) sr[c] = -std::numeric_limits<float>::infinity();  // exp2 -> 0
          float mx = m[r];
#pragma omp simd reduction(max : mx)
          for (int64_t c = 0; c < nv; ++c) mx = std::max(mx, sr[c] * c2);
          const float sum = exp2_row(sr, nv, c2, mx);
          for (int64_t c = rup16(nv); c < kn; ++c) sr[c] = 0.0f;
          const float alpha = vmath::exp2(m[r] - mx);
          l[r] = l[r] * alpha + sum;
          m[r] = mx;
          if (alpha != 1.0f) {
            float* orow = Ob + r * Dp;
#pragma omp simd
            for (int64_t d = 0; d < Dp; ++d) orow[d] *= alpha;
          }
        }
        // O += P V
        gemm_small(qn, Dp, kn, Sb, kB, 1, Vg + k0 * Dp, Dp, Ob, Dp, true);
      }
      for (int64_t r = 0; r < qn; ++r) {
        const int64_t t = base + q0 + r;
        const float inv = 1.0f / l[r];
        float* o = out + (t * Hq + h) * D;
        const float* orow = Ob + r * Dp;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) o[d] = orow[d] * inv;
        lse[t * Hq + h] = static_cast<float>(kLn2 * (static_cast<double>(m[r]) + std::log2(static_cast<double>(l[r]))));
      }
    }
  }
}

// ---------------------------------------------------------------- backward

void flash_attention_backward_ex(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                 const float* dout, float* dq, float* dk, float* dv, const int32_t* cu,
                                 int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                 AttnBwdSchedule schedule, int64_t window) {
  validate("flash_attention_backward", cu, n_seqs, Hq, Hkv, D);
  check(window >= 0, "flash_attention_backward: window must be >= 0 (0 = none), got " + std::to_string(window));
  const int64_t Dp = rup16(D), group = Hq / Hkv;
  const int64_t T0 = cu[0], Tn = cu[n_seqs] - T0;
  zero_prefix(dq, T0, Hq * D);
  zero_prefix(dk, T0, Hkv * D);
  zero_prefix(dv, T0, Hkv * D);
  if (Tn <= 0) return;
  const float c2 = scale * kLog2e;

  // Packed operands: Q, dO [Hq][Tn][Dp]; K rows [Hkv][Tn][Dp]; K^T, V^T [Hkv][D][ldT]; they are read
  // in place by the tile products. dq_acc [Tn][Hq][Dp] is the fp32 dq accumulator.
  // The K^T and V^T buffers share one allocation.
  const int64_t ldT = rup16(Tn) + 16;
  float* Qp = g_q.get(static_cast<size_t>(Hq * Tn * Dp), false);
  float* dOp = g_do.get(static_cast<size_t>(Hq * Tn * Dp), false);
  float* Kp = g_k.get(static_cast<size_t>(Hkv * Tn * Dp), false);
  float* KT = g_kt.get(static_cast<size_t>(2 * Hkv * D * ldT), false);
  float* VT = KT + Hkv * D * ldT;
  float* dq_acc = g_dq.get(static_cast<size_t>(Tn * Hq * Dp), true);
  float* delta = g_delta.get(static_cast<size_t>(2 * Tn * Hq), false);
  float* lse2 = delta + Tn * Hq;
  pack_rows(q, T0, Tn, Hq, D, Dp, Qp);
  pack_rows(dout, T0, Tn, Hq, D, Dp, dOp);
  pack_rows(k, T0, Tn, Hkv, D, Dp, Kp);
  pack_t(k, T0, Tn, Hkv, D, ldT, KT);
  pack_t(v, T0, Tn, Hkv, D, ldT, VT);

  backward_delta(out, dout, lse, T0, Tn, Hq, D, delta, lse2);

  // Tasks: (segment, kv head, key-tile range), and dq_acc's locks for PerKeyTile.
  const BwdSchedule sched =
      backward_schedule(cu, n_seqs, Hq, Hkv, omp_get_max_threads(),
                        schedule == AttnBwdSchedule::Auto ? -1 : schedule == AttnBwdSchedule::PerKvHead ? 1 : 0);
  const std::vector<BwdTask>& tasks = sched.tasks;
  const bool by_head = sched.by_head;
  const std::vector<int64_t>& tile_base = sched.tile_base;
  const std::unique_ptr<std::mutex[]>& locks = sched.locks;
  const int64_t ntasks = static_cast<int64_t>(tasks.size());

#pragma omp parallel if (ntasks > 1)
  {
    float* P = tl_a.get(kB * kB, false);
    float* dS = tl_b.get(kB * kB, false);
    float* dKV = tl_c.get(2 * kB * Dp, false);
    float* dK = dKV;
    float* dV = dKV + kB * Dp;
    float* dQ = tl_d.get(kB * Dp, false);
#pragma omp for schedule(dynamic, 1)
    for (int64_t ti = 0; ti < ntasks; ++ti) {
      const BwdTask& tk = tasks[ti];
      const int64_t base = cu[tk.seg], L = cu[tk.seg + 1] - base, rel = base - T0, g = tk.g;
      const int64_t nt = (L + kB - 1) / kB;
      const float* KTg = KT + g * D * ldT + rel;
      const float* VTg = VT + g * D * ldT + rel;
      const float* Kg = Kp + (g * Tn + rel) * Dp;
      for (int64_t kj = tk.kt_begin; kj < tk.kt_end; ++kj) {
        const int64_t k0 = kj * kB, kn = std::min(kB, L - k0), knp = rup16(kn);
        std::memset(dKV, 0, sizeof(float) * 2 * kB * Dp);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* Qh = Qp + (h * Tn + rel) * Dp;
          const float* dOh = dOp + (h * Tn + rel) * Dp;
          for (int64_t qi = kj; qi < nt; ++qi) {
            const int64_t q0 = qi * kB, qn = std::min(kB, L - q0);
            if (window > 0 && q0 - (k0 + kn - 1) >= window) break;  // this and later query tiles see none of these keys
            const float* Qi = Qh + q0 * Dp;
            const float* dOi = dOh + q0 * Dp;
            gemm_small(qn, knp, D, Qi, Dp, 1, KTg + k0, ldT, P, kB, false);    // S = Q K^T
            gemm_small(qn, knp, D, dOi, Dp, 1, VTg + k0, ldT, dS, kB, false);  // dP = dO V^T
            for (int64_t r = 0; r < qn; ++r) {
              const int64_t row = (rel + q0 + r) * Hq + h;
              const float l2 = lse2[row], dl = delta[row];
              float* pr = P + r * kB;
              float* dsr = dS + r * kB;
              const int64_t nv = visible(q0 + r, k0, kn);
              const int64_t lo = window_lo(q0 + r, k0, kn, window);
              if (lo >= nv) {  // outside the sliding window: P = dS = 0
                std::memset(pr, 0, sizeof(float) * static_cast<size_t>(kn));
                std::memset(dsr, 0, sizeof(float) * static_cast<size_t>(kn));
                continue;
              }
              for (int64_t c = 0; c < lo; ++c) pr[c] = -std::numeric_limits<float>::infinity();  // P -> 0, dS -> 0
              prob_dscore_row(pr, dsr, nv, c2, l2, dl);
              for (int64_t c = rup16(nv); c < kn; ++c) pr[c] = 0.0f, dsr[c] = 0.0f;
            }
            gemm_small(kn, Dp, qn, P, 1, kB, dOi, Dp, dV, Dp, true);  // dV += P^T dO
            gemm_small(kn, Dp, qn, dS, 1, kB, Qi, Dp, dK, Dp, true);  // dK += dS^T Q
            gemm_small(qn, Dp, kn, dS, kB, 1, Kg + k0 * Dp, Dp, dQ, Dp, false);  // dQ tile = dS K
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
          const float* sk = dK + r * Dp;
          const float* sv = dV + r * Dp;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) {
            dkr[d] = sk[d] * scale;
            dvr[d] = sv[d];
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

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                              int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  flash_attention_backward_ex(q, k, v, out, lse, dout, dq, dk, dv, cu_seqlens, n_seqs, Hq, Hkv, D, scale,
                              AttnBwdSchedule::Auto, window);
}

}  // namespace twinkle::kernels::cpu
