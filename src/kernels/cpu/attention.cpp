// FlashAttention-2 style causal GQA on packed sequences (see attention.h).
//
// Tiles of kB = 64 queries x 64 keys. Every product is done by one small-GEMM routine,
// C[M,N] (+)= A[M,K] * B[K,N] with B row-major and N a multiple of 16, built on an AVX-512 register
// micro-kernel of up to 6 rows x 64 columns (24 zmm accumulators); A is read by broadcasts with
// arbitrary row/column strides, so transposed A operands (P^T, dS^T) cost nothing extra.
// Per tile pair, forward:  S = Q K^T; online softmax; O += P V.
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

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu {

namespace {

constexpr int64_t kB = 64;  // query tile = key tile
constexpr float kLog2e = 1.44269504088896341f;
constexpr double kLn2 = 0.69314718055994530942;

inline int64_t rup16(int64_t x) { return (x + 15) & ~int64_t{15}; }

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

// ---------------------------------------------------------------- helpers

struct AlignedBuf {
  float* p = nullptr;
  explicit AlignedBuf(size_t n) {
    const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
    p = static_cast<float*>(std::aligned_alloc(64, bytes ? bytes : 64));
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
  }
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
};

struct Shape {
  const int32_t* cu;
  int64_t n_seqs, Hq, Hkv, D, Dp, group;
};

void validate(const char* fn, const int32_t* cu, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D) {
  const std::string f(fn);
  check(Hq > 0 && Hkv > 0 && D > 0, f + ": Hq, Hkv and D must be positive (got Hq=" + std::to_string(Hq) +
                                        ", Hkv=" + std::to_string(Hkv) + ", D=" + std::to_string(D) + ")");
  check(Hq % Hkv == 0, f + ": Hq=" + std::to_string(Hq) + " is not a multiple of Hkv=" + std::to_string(Hkv));
  check(n_seqs >= 0, f + ": n_seqs must be >= 0");
  check(cu[0] >= 0, f + ": cu_seqlens[0] = " + std::to_string(cu[0]) + " is negative");
  for (int64_t i = 0; i < n_seqs; ++i)
    check(cu[i + 1] >= cu[i], f + ": cu_seqlens is decreasing at index " + std::to_string(i + 1) + " (" +
                                  std::to_string(cu[i]) + " -> " + std::to_string(cu[i + 1]) + ")");
}

// rows [t0, t0+n) of head h of a [T, H, D] tensor -> dst [n, Dp] (padding columns left untouched = 0)
inline void gather_rows(const float* src, int64_t t0, int64_t n, int64_t H, int64_t h, int64_t D, float* dst,
                        int64_t Dp) {
  for (int64_t r = 0; r < n; ++r) std::memcpy(dst + r * Dp, src + ((t0 + r) * H + h) * D, D * sizeof(float));
  for (int64_t r = n; r < kB; ++r) std::memset(dst + r * Dp, 0, Dp * sizeof(float));
}

// rows [t0, t0+n) of head h -> transposed dst [D, ld] columns [0, n); columns [n, rup16(n)) zeroed
inline void gather_rows_t(const float* src, int64_t t0, int64_t n, int64_t H, int64_t h, int64_t D, float* dst,
                          int64_t ld) {
  const int64_t np = rup16(n);
  for (int64_t r = 0; r < n; ++r) {
    const float* s = src + ((t0 + r) * H + h) * D;
    for (int64_t d = 0; d < D; ++d) dst[d * ld + r] = s[d];
  }
  for (int64_t d = 0; d < D; ++d)
    for (int64_t r = n; r < np; ++r) dst[d * ld + r] = 0.0f;
}

// number of keys of key tile [k0, k0+kn) visible to the query at segment offset qpos
inline int64_t visible(int64_t qpos, int64_t k0, int64_t kn) { return std::min(kn, qpos - k0 + 1); }

void zero_prefix(float* x, int64_t rows, int64_t row_len) {
  if (rows > 0) std::memset(x, 0, static_cast<size_t>(rows * row_len) * sizeof(float));
}

// ---------------------------------------------------------------- forward

struct FwdTask {
  int64_t seg, head, qtile, cost;
};

}  // namespace

void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                             const int32_t* cu, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  validate("flash_attention_forward", cu, n_seqs, Hq, Hkv, D);
  const int64_t Dp = rup16(D), group = Hq / Hkv;
  zero_prefix(out, cu[0], Hq * D);
  zero_prefix(lse, cu[0], Hq);

  std::vector<FwdTask> tasks;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t nt = (cu[s + 1] - cu[s] + kB - 1) / kB;
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < nt; ++i) tasks.push_back({s, h, i, i + 1});
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const FwdTask& a, const FwdTask& b) { return a.cost > b.cost; });
  const int64_t ntasks = static_cast<int64_t>(tasks.size());
  const float c2 = scale * kLog2e;  // scores in log2 units

#pragma omp parallel if (ntasks > 1)
  {
    AlignedBuf Qb(kB * Dp), Kt(Dp * kB), Vb(kB * Dp), Sb(kB * kB), Ob(kB * Dp);
    float m[kB], l[kB];
#pragma omp for schedule(dynamic, 1)
    for (int64_t ti = 0; ti < ntasks; ++ti) {
      const FwdTask& tk = tasks[ti];
      const int64_t base = cu[tk.seg], L = cu[tk.seg + 1] - base;
      const int64_t h = tk.head, g = h / group;
      const int64_t q0 = tk.qtile * kB, qn = std::min(kB, L - q0);
      gather_rows(q, base + q0, qn, Hq, h, D, Qb.p, Dp);
      std::memset(Ob.p, 0, sizeof(float) * kB * Dp);
      for (int64_t r = 0; r < kB; ++r) m[r] = -std::numeric_limits<float>::infinity(), l[r] = 0.0f;
      for (int64_t kj = 0; kj <= tk.qtile; ++kj) {
        const int64_t k0 = kj * kB, kn = std::min(kB, L - k0), knp = rup16(kn);
        gather_rows_t(k, base + k0, kn, Hkv, g, D, Kt.p, kB);
        gather_rows(v, base + k0, kn, Hkv, g, D, Vb.p, Dp);
        gemm_small(qn, knp, D, Qb.p, Dp, 1, Kt.p, kB, Sb.p, kB, false);
        for (int64_t r = 0; r < qn; ++r) {
          float* sr = Sb.p + r * kB;
          const int64_t nv = visible(q0 + r, k0, kn);
          float mx = m[r];
#pragma omp simd reduction(max : mx)
          for (int64_t c = 0; c < nv; ++c) mx = std::max(mx, sr[c] * c2);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < nv; ++c) {
            const float p = vmath::exp2(sr[c] * c2 - mx);
            sr[c] = p;
            sum += p;
          }
          for (int64_t c = nv; c < knp; ++c) sr[c] = 0.0f;
          const float alpha = vmath::exp2(m[r] - mx);
          l[r] = l[r] * alpha + sum;
          m[r] = mx;
          if (alpha != 1.0f) {
            float* orow = Ob.p + r * Dp;
#pragma omp simd
            for (int64_t d = 0; d < Dp; ++d) orow[d] *= alpha;
          }
        }
        gemm_small(qn, Dp, kn, Sb.p, kB, 1, Vb.p, Dp, Ob.p, Dp, true);
      }
      for (int64_t r = 0; r < qn; ++r) {
        const int64_t t = base + q0 + r;
        const float inv = 1.0f / l[r];
        float* o = out + (t * Hq + h) * D;
        const float* orow = Ob.p + r * Dp;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) o[d] = orow[d] * inv;
        lse[t * Hq + h] = static_cast<float>(kLn2 * (static_cast<double>(m[r]) + std::log2(static_cast<double>(l[r]))));
      }
    }
  }
}

namespace {

// ---------------------------------------------------------------- backward

struct BwdTask {
  int64_t seg, g, kt_begin, kt_end, cost;
};

struct BwdTile {
  AlignedBuf Kr, Kt, Vt, dK, dV, Qb, dOb, P, dS, dQ;
  explicit BwdTile(int64_t Dp)
      : Kr(kB * Dp), Kt(Dp * kB), Vt(Dp * kB), dK(kB * Dp), dV(kB * Dp), Qb(kB * Dp), dOb(kB * Dp), P(kB * kB),
        dS(kB * kB), dQ(kB * Dp) {}
};

}  // namespace

void flash_attention_backward_ex(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                 const float* dout, float* dq, float* dk, float* dv, const int32_t* cu,
                                 int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                 AttnBwdSchedule schedule) {
  validate("flash_attention_backward", cu, n_seqs, Hq, Hkv, D);
  const int64_t Dp = rup16(D), group = Hq / Hkv;
  const int64_t T0 = cu[0], T = cu[n_seqs];
  zero_prefix(dq, T0, Hq * D);
  zero_prefix(dk, T0, Hkv * D);
  zero_prefix(dv, T0, Hkv * D);
  if (T <= T0) return;
  const float c2 = scale * kLog2e;

  // Delta[t,h] = sum_d dO*O (FA2's D_i), lse in log2 units, and the fp32 dq accumulator (padded to Dp).
  const int64_t Tn = T - T0;
  std::vector<float> delta(static_cast<size_t>(Tn * Hq)), lse2(static_cast<size_t>(Tn * Hq));
  AlignedBuf dq_acc(static_cast<size_t>(Tn * Hq * Dp));
#pragma omp parallel for schedule(static) if (Tn * Hq * D > 65536)
  for (int64_t i = 0; i < Tn * Hq; ++i) {
    const float* o = out + (T0 * Hq + i) * D;
    const float* go = dout + (T0 * Hq + i) * D;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; ++d) s += o[d] * go[d];
    delta[i] = s;
    lse2[i] = lse[T0 * Hq + i] * kLog2e;
  }

  // Tasks: (segment, kv head, key-tile range). Cost ~ number of tile pairs.
  const int nthreads = omp_get_max_threads();
  std::vector<BwdTask> per_head, per_tile;
  int64_t total = 0, max_head = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t nt = (cu[s + 1] - cu[s] + kB - 1) / kB;
    const int64_t c = nt * (nt + 1) / 2 * group;
    for (int64_t g = 0; g < Hkv; ++g) {
      if (nt == 0) continue;
      per_head.push_back({s, g, 0, nt, c});
      for (int64_t j = 0; j < nt; ++j) per_tile.push_back({s, g, j, j + 1, (nt - j) * group});
      total += c;
      max_head = std::max(max_head, c);
    }
  }
  bool by_head = schedule == AttnBwdSchedule::PerKvHead;
  if (schedule == AttnBwdSchedule::Auto)
    by_head = nthreads == 1 || (static_cast<int64_t>(per_head.size()) >= 2 * nthreads &&
                                2 * max_head * nthreads <= total);
  std::vector<BwdTask>& tasks = by_head ? per_head : per_tile;
  std::stable_sort(tasks.begin(), tasks.end(), [](const BwdTask& a, const BwdTask& b) { return a.cost > b.cost; });
  const int64_t ntasks = static_cast<int64_t>(tasks.size());

  // One lock per (segment, q head, query tile) of dq_acc; only needed when key tiles of one kv head run
  // concurrently, but cheap (uncontended) otherwise.
  std::vector<int64_t> tile_base(static_cast<size_t>(n_seqs) + 1, 0);
  for (int64_t s = 0; s < n_seqs; ++s) tile_base[s + 1] = tile_base[s] + (cu[s + 1] - cu[s] + kB - 1) / kB * Hq;
  std::unique_ptr<std::mutex[]> locks(by_head ? nullptr : new std::mutex[std::max<int64_t>(1, tile_base[n_seqs])]);

#pragma omp parallel if (ntasks > 1)
  {
    BwdTile b(Dp);
#pragma omp for schedule(dynamic, 1)
    for (int64_t ti = 0; ti < ntasks; ++ti) {
      const BwdTask& tk = tasks[ti];
      const int64_t base = cu[tk.seg], L = cu[tk.seg + 1] - base, g = tk.g;
      const int64_t nt = (L + kB - 1) / kB;
      for (int64_t kj = tk.kt_begin; kj < tk.kt_end; ++kj) {
        const int64_t k0 = kj * kB, kn = std::min(kB, L - k0), knp = rup16(kn);
        gather_rows(k, base + k0, kn, Hkv, g, D, b.Kr.p, Dp);
        gather_rows_t(k, base + k0, kn, Hkv, g, D, b.Kt.p, kB);
        gather_rows_t(v, base + k0, kn, Hkv, g, D, b.Vt.p, kB);
        std::memset(b.dK.p, 0, sizeof(float) * kB * Dp);
        std::memset(b.dV.p, 0, sizeof(float) * kB * Dp);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t qi = kj; qi < nt; ++qi) {
            const int64_t q0 = qi * kB, qn = std::min(kB, L - q0);
            gather_rows(q, base + q0, qn, Hq, h, D, b.Qb.p, Dp);
            gather_rows(dout, base + q0, qn, Hq, h, D, b.dOb.p, Dp);
            // S = Q K^T -> P
            gemm_small(qn, knp, D, b.Qb.p, Dp, 1, b.Kt.p, kB, b.P.p, kB, false);
            // dP = dO V^T
            gemm_small(qn, knp, D, b.dOb.p, Dp, 1, b.Vt.p, kB, b.dS.p, kB, false);
            for (int64_t r = 0; r < qn; ++r) {
              const int64_t row = (base + q0 + r - T0) * Hq + h;
              const float l2 = lse2[row], dl = delta[row];
              float* pr = b.P.p + r * kB;
              float* dsr = b.dS.p + r * kB;
              const int64_t nv = visible(q0 + r, k0, kn);
#pragma omp simd
              for (int64_t c = 0; c < nv; ++c) {
                const float p = vmath::exp2(pr[c] * c2 - l2);
                pr[c] = p;
                dsr[c] = p * (dsr[c] - dl);
              }
              for (int64_t c = nv; c < knp; ++c) pr[c] = 0.0f, dsr[c] = 0.0f;
            }
            // dV += P^T dO ; dK += dS^T Q
            gemm_small(kn, Dp, qn, b.P.p, 1, kB, b.dOb.p, Dp, b.dV.p, Dp, true);
            gemm_small(kn, Dp, qn, b.dS.p, 1, kB, b.Qb.p, Dp, b.dK.p, Dp, true);
            // dQ_tile = dS K, added to the shared accumulator
            gemm_small(qn, Dp, kn, b.dS.p, kB, 1, b.Kr.p, Dp, b.dQ.p, Dp, false);
            float* acc = dq_acc.p + ((base + q0 - T0) * Hq + h) * Dp;
            auto add = [&] {
              for (int64_t r = 0; r < qn; ++r) {
                float* a = acc + r * Hq * Dp;
                const float* s = b.dQ.p + r * Dp;
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
          const float* sk = b.dK.p + r * Dp;
          const float* sv = b.dV.p + r * Dp;
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
    const float* a = dq_acc.p + i * Dp;
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) d[j] = a[j] * scale;
  }
}

void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                              int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale) {
  flash_attention_backward_ex(q, k, v, out, lse, dout, dq, dk, dv, cu_seqlens, n_seqs, Hq, Hkv, D, scale,
                              AttnBwdSchedule::Auto);
}

}  // namespace twinkle::kernels::cpu
