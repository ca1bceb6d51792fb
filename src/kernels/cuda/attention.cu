// CUDA causal grouped-query flash attention over packed variable-length sequences, forward and backward,
// fp32 (FlashAttention-2: Dao 2023, algorithm 1 forward with the online softmax and the row
// log-sum-exp saved; algorithm 2 backward recomputing P from the lse). Semantics, layout and errors:
// twinkle/kernels/cpu/attention.h (SDPA with a block-diagonal causal mask; q [T, Hq, D], k/v
// [T, Hkv, D]; query head h uses kv head h / (Hq/Hkv); sliding window: a query at offset t sees keys
// s with t - window < s <= t; window = 0: plain causal). No [T, T] matrix exists.
//
// Work split ("one thread per row, broadcast tiles"): a block of BM threads owns BM consecutive rows of
// one segment and one head; the other operand streams through shared memory in tiles of BN rows that
// every thread reads at the same address (a broadcast); with D % 4 == 0 the inner loops read float4
// chunks, each thread's own row chunk once per chunk for all BN streamed rows. Forward: a thread is a query row (its q and
// output accumulator live in shared memory with an odd row stride, bank-conflict free). Backward, without
// atomics (deterministic): one kernel where a thread is a key row accumulating dK and dV over the query
// rows and query heads of its group that see it, one kernel where a thread is a query row accumulating
// dQ over its keys; both recompute P = exp(scale q.k - lse) and dP = dO.v, with
// delta = rowsum(dO * O) computed first. Tiles never cross a segment; key tiles wholly outside every
// query's window are skipped. cu_seqlens is read to the host once per call (n_seqs + 1 ints) to build the
// tile list. The "bf16" set's backward (attention_backward_bf16) is the same kernels with every operand of
// the five tile products rounded to bf16 as twinkle/kernels/cpu/attention_bf16.h has it (q, k, v, dO as
// loaded; P and dS after their fp32 math); products and sums stay fp32 (CUDA cores, no tensor cores).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bf16.h"
#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kBN = 32;  // rows per streamed tile

struct Tile {
  int seg_start, seg_end, start;  // rows [start, min(start + BM, seg_end)) of segment [seg_start, seg_end)
};

__device__ __forceinline__ bool visible(int i, int j, int window) { return j <= i && (window <= 0 || i - j < window); }

// x, or x rounded to bf16 (the "bf16" set's backward, BF = true: every operand of a tile product).
template <bool BF> __device__ __forceinline__ float rnd(float x) {
  if constexpr (BF) return bf16_round(x);
  return x;
}

// Loads rows [r0, r0 + n) (n <= ROWS) of head `h` of a [T, H, D] tensor into dst [ROWS][ld] (zeros beyond n),
// rounded to bf16 when BF.
template <int NT, bool BF = false>
__device__ void load_rows(float* dst, int ld, int rows, const float* src, int64_t r0, int n, int64_t row_stride,
                          int64_t head_off, int D) {
  for (int e = threadIdx.x; e < rows * D; e += NT) {
    const int r = e / D, d = e - r * D;
    dst[r * ld + d] = r < n ? rnd<BF>(src[(r0 + r) * row_stride + head_off + d]) : 0.0f;
  }
}

template <int NT>
__device__ void store_rows(float* dst, int64_t r0, int n, int64_t row_stride, int64_t head_off, const float* src, int ld,
                           int D, float mul) {
  for (int e = threadIdx.x; e < n * D; e += NT) {
    const int r = e / D, d = e - r * D;
    dst[(r0 + r) * row_stride + head_off + d] = src[r * ld + d] * mul;
  }
}

// ---------------------------------------------------------------- vector helpers
// V = 4 (D % 4 == 0): rows are read as float4; own rows have stride D + 4 (16-byte aligned, and 8
// consecutive threads' float4 reads hit distinct bank groups); V = 1: scalar, own rows of odd stride D | 1.
// Inner loops take one operand row once per chunk of V elements for all kBN rows of the streamed tile, whose
// reads are broadcasts (every thread the same address).
template <int V> struct VecT { using T = float; };
template <> struct VecT<4> { using T = float4; };
__device__ __forceinline__ float vdot(float a, float b) { return a * b; }
__device__ __forceinline__ float vdot(const float4& a, const float4& b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ void vaxpy(float p, float b, float& acc) { acc += p * b; }
__device__ __forceinline__ void vaxpy(float p, const float4& b, float4& acc) {
  acc.x += p * b.x;
  acc.y += p * b.y;
  acc.z += p * b.z;
  acc.w += p * b.w;
}
__device__ __forceinline__ void vscale(float& a, float s) { a *= s; }
__device__ __forceinline__ void vscale(float4& a, float s) {
  a.x *= s;
  a.y *= s;
  a.z *= s;
  a.w *= s;
}
template <int V> __host__ __device__ __forceinline__ int own_ld(int D) { return V == 4 ? D + 4 : (D | 1); }

// ---------------------------------------------------------------- forward

template <int BM, int V>
__global__ void __launch_bounds__(BM) k_attn_fwd(const float* __restrict__ q, const float* __restrict__ k,
                                                 const float* __restrict__ v, float* __restrict__ out,
                                                 float* __restrict__ lse, const Tile* __restrict__ tiles, int Hq,
                                                 int Hkv, int D, float scale, int window) {
  using T = typename VecT<V>::T;
  TWINKLE_DYN_SMEM(float, smem);
  const int LD = own_ld<V>(D), DV = D / V;
  float* q_s = smem;             // [BM][LD]
  float* o_s = q_s + BM * LD;    // [BM][LD]
  float* k_s = o_s + BM * LD;    // [kBN][D]
  float* v_s = k_s + kBN * D;    // [kBN][D]
  const Tile tl = tiles[blockIdx.x];
  const int h = blockIdx.y, hk = h / (Hq / Hkv), t = threadIdx.x;
  const int q0 = tl.start, qn = min(BM, tl.seg_end - q0);
  const int64_t qs = static_cast<int64_t>(Hq) * D, ks = static_cast<int64_t>(Hkv) * D;
  load_rows<BM>(q_s, LD, BM, q, q0, qn, qs, static_cast<int64_t>(h) * D, D);
  for (int e = t; e < BM * LD; e += BM) o_s[e] = 0.0f;
  const int i = q0 + t;
  const bool active = t < qn;
  const T* qr = reinterpret_cast<const T*>(q_s + t * LD);
  T* orow = reinterpret_cast<T*>(o_s + t * LD);
  const T* kt = reinterpret_cast<const T*>(k_s);
  const T* vt = reinterpret_cast<const T*>(v_s);
  float m = -INFINITY, l = 0.0f;
  const int kv_lo = window > 0 ? max(tl.seg_start, q0 - window + 1) : tl.seg_start;
  const int kv_hi = q0 + qn - 1;
  __syncthreads();
  for (int j0 = kv_lo; j0 <= kv_hi; j0 += kBN) {
    const int jn = min(kBN, kv_hi - j0 + 1);
    load_rows<BM>(k_s, D, kBN, k, j0, jn, ks, static_cast<int64_t>(hk) * D, D);
    load_rows<BM>(v_s, D, kBN, v, j0, jn, ks, static_cast<int64_t>(hk) * D, D);
    __syncthreads();
    float s[kBN];
#pragma unroll
    for (int jj = 0; jj < kBN; ++jj) s[jj] = 0.0f;
    for (int c = 0; c < DV; ++c) {
      const T a = qr[c];
#pragma unroll
      for (int jj = 0; jj < kBN; ++jj) s[jj] += vdot(a, kt[jj * DV + c]);
    }
    float mt = m;
#pragma unroll
    for (int jj = 0; jj < kBN; ++jj) {
      const bool ok = active && jj < jn && visible(i, j0 + jj, window);
      s[jj] = ok ? s[jj] * scale : -INFINITY;
      mt = fmaxf(mt, s[jj]);
    }
    if (mt > -INFINITY) {
      const float alpha = expf(m - mt);  // 0 while m is still -inf
      float psum = 0.0f;
#pragma unroll
      for (int jj = 0; jj < kBN; ++jj) {
        s[jj] = expf(s[jj] - mt);  // exp(-inf) = 0 for masked keys
        psum += s[jj];
      }
      l = l * alpha + psum;
      for (int c = 0; c < DV; ++c) {
        T acc = orow[c];
        vscale(acc, alpha);
#pragma unroll
        for (int jj = 0; jj < kBN; ++jj) vaxpy(s[jj], vt[jj * DV + c], acc);
        orow[c] = acc;
      }
      m = mt;
    }
    __syncthreads();
  }
  if (active) {
    const float inv = 1.0f / l;  // l >= 1: every query sees itself
    for (int c = 0; c < DV; ++c) vscale(orow[c], inv);
    lse[static_cast<int64_t>(i) * Hq + h] = m + logf(l);
  }
  __syncthreads();
  store_rows<BM>(out, q0, qn, qs, static_cast<int64_t>(h) * D, o_s, LD, D, 1.0f);
}

// ---------------------------------------------------------------- backward

// delta[i, h] = sum_d dO[i, h, d] * O[i, h, d]; one thread per (i, h) row, in the chunks and order of
// dP = dO . v in the backward kernels, so that where O equals v exactly (a query that sees only itself)
// dS = P (dP - delta) is exactly 0, as in exact arithmetic.
template <int V>
__global__ void k_attn_delta(const float* __restrict__ o, const float* __restrict__ dout, float* __restrict__ delta,
                             int64_t rows, int D) {
  using T = typename VecT<V>::T;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  const T* orow = reinterpret_cast<const T*>(o + row * D);
  const T* drow = reinterpret_cast<const T*>(dout + row * D);
  float s = 0.0f;
  for (int c = 0; c < D / V; ++c) s += vdot(drow[c], orow[c]);
  delta[row] = s;
}

// dQ: a thread per query row of the tile; keys stream through shared memory. BF: the "bf16" set (q, dO,
// k, v and dS rounded to bf16 before their products; P, dS's fp32 math and the sums stay fp32).
template <int BM, int V, bool BF>
__global__ void __launch_bounds__(BM) k_attn_bwd_dq(const float* __restrict__ q, const float* __restrict__ k,
                                                    const float* __restrict__ v, const float* __restrict__ lse,
                                                    const float* __restrict__ delta, const float* __restrict__ dout,
                                                    float* __restrict__ dq, const Tile* __restrict__ tiles, int Hq,
                                                    int Hkv, int D, float scale, int window) {
  using T = typename VecT<V>::T;
  TWINKLE_DYN_SMEM(float, smem);
  const int LD = own_ld<V>(D), DV = D / V;
  float* q_s = smem;              // [BM][LD]
  float* do_s = q_s + BM * LD;    // [BM][LD]
  float* dq_s = do_s + BM * LD;   // [BM][LD]
  float* k_s = dq_s + BM * LD;    // [kBN][D]
  float* v_s = k_s + kBN * D;     // [kBN][D]
  const Tile tl = tiles[blockIdx.x];
  const int h = blockIdx.y, hk = h / (Hq / Hkv), t = threadIdx.x;
  const int q0 = tl.start, qn = min(BM, tl.seg_end - q0);
  const int64_t qs = static_cast<int64_t>(Hq) * D, ks = static_cast<int64_t>(Hkv) * D;
  load_rows<BM, BF>(q_s, LD, BM, q, q0, qn, qs, static_cast<int64_t>(h) * D, D);
  load_rows<BM, BF>(do_s, LD, BM, dout, q0, qn, qs, static_cast<int64_t>(h) * D, D);
  for (int e = t; e < BM * LD; e += BM) dq_s[e] = 0.0f;
  const int i = q0 + t;
  const bool active = t < qn;
  const float li = active ? lse[static_cast<int64_t>(i) * Hq + h] : 0.0f;
  const float di = active ? delta[static_cast<int64_t>(i) * Hq + h] : 0.0f;
  const T* qr = reinterpret_cast<const T*>(q_s + t * LD);
  const T* dor = reinterpret_cast<const T*>(do_s + t * LD);
  T* dqr = reinterpret_cast<T*>(dq_s + t * LD);
  const T* kt = reinterpret_cast<const T*>(k_s);
  const T* vt = reinterpret_cast<const T*>(v_s);
  const int kv_lo = window > 0 ? max(tl.seg_start, q0 - window + 1) : tl.seg_start;
  const int kv_hi = q0 + qn - 1;
  __syncthreads();
  for (int j0 = kv_lo; j0 <= kv_hi; j0 += kBN) {
    const int jn = min(kBN, kv_hi - j0 + 1);
    load_rows<BM, BF>(k_s, D, kBN, k, j0, jn, ks, static_cast<int64_t>(hk) * D, D);
    load_rows<BM, BF>(v_s, D, kBN, v, j0, jn, ks, static_cast<int64_t>(hk) * D, D);
    __syncthreads();
    float sd[kBN], pd[kBN];
#pragma unroll
    for (int jj = 0; jj < kBN; ++jj) sd[jj] = pd[jj] = 0.0f;
    for (int c = 0; c < DV; ++c) {
      const T a = qr[c], b = dor[c];
#pragma unroll
      for (int jj = 0; jj < kBN; ++jj) {
        sd[jj] += vdot(a, kt[jj * DV + c]);
        pd[jj] += vdot(b, vt[jj * DV + c]);
      }
    }
    bool any = false;
#pragma unroll
    for (int jj = 0; jj < kBN; ++jj) {
      const bool ok = active && jj < jn && visible(i, j0 + jj, window);
      const float p = ok ? expf(sd[jj] * scale - li) : 0.0f;
      sd[jj] = ok ? rnd<BF>(p * (pd[jj] - di)) : 0.0f;  // dS
      any |= ok;
    }
    if (any) {
      for (int c = 0; c < DV; ++c) {
        T acc = dqr[c];
#pragma unroll
        for (int jj = 0; jj < kBN; ++jj) vaxpy(sd[jj], kt[jj * DV + c], acc);
        dqr[c] = acc;
      }
    }
    __syncthreads();
  }
  store_rows<BM>(dq, q0, qn, qs, static_cast<int64_t>(h) * D, dq_s, LD, D, scale);
}

// dK, dV: a thread per key row of the tile, one QUERY head per block (blockIdx.y = h, kv head h / G): the
// query rows of head h that see the tile stream through shared memory. With G = Hq / Hkv > 1 the block
// writes its head's contribution to dk / dv as [T, Hq, D] partials (unscaled), summed over the group in
// head order by k_attn_dkv_reduce (twice the blocks and half the longest block of one block per kv head);
// with G = 1 it writes dk (times scale) and dv directly ([T, Hkv, D]). BF: as k_attn_bwd_dq's (P rounded
// for dV's product after dS was formed from the fp32 P).
template <int BM, int V, bool BF>
__global__ void __launch_bounds__(BM) k_attn_bwd_dkv(const float* __restrict__ q, const float* __restrict__ k,
                                                     const float* __restrict__ v, const float* __restrict__ lse,
                                                     const float* __restrict__ delta, const float* __restrict__ dout,
                                                     float* __restrict__ dk, float* __restrict__ dv,
                                                     const Tile* __restrict__ tiles, int Hq, int Hkv, int D,
                                                     float scale, int window) {
  using T = typename VecT<V>::T;
  TWINKLE_DYN_SMEM(float, smem);
  const int LD = own_ld<V>(D), DV = D / V;
  float* k_s = smem;              // [BM][LD]
  float* v_s = k_s + BM * LD;     // [BM][LD]
  float* dk_s = v_s + BM * LD;    // [BM][LD]
  float* dv_s = dk_s + BM * LD;   // [BM][LD]
  float* qt_s = dv_s + BM * LD;   // [kBN][D]
  float* dot_s = qt_s + kBN * D;  // [kBN][D]
  float* l_s = dot_s + kBN * D;   // [kBN]
  float* dl_s = l_s + kBN;        // [kBN]
  const Tile tl = tiles[blockIdx.x];
  const int G = Hq / Hkv, h = blockIdx.y, hk = h / G, t = threadIdx.x;
  const int k0 = tl.start, kn = min(BM, tl.seg_end - k0);
  const int64_t qs = static_cast<int64_t>(Hq) * D, ks = static_cast<int64_t>(Hkv) * D;
  load_rows<BM, BF>(k_s, LD, BM, k, k0, kn, ks, static_cast<int64_t>(hk) * D, D);
  load_rows<BM, BF>(v_s, LD, BM, v, k0, kn, ks, static_cast<int64_t>(hk) * D, D);
  for (int e = t; e < BM * LD; e += BM) dk_s[e] = dv_s[e] = 0.0f;
  const int j = k0 + t;
  const bool active = t < kn;
  const T* kr = reinterpret_cast<const T*>(k_s + t * LD);
  const T* vr = reinterpret_cast<const T*>(v_s + t * LD);
  T* dkr = reinterpret_cast<T*>(dk_s + t * LD);
  T* dvr = reinterpret_cast<T*>(dv_s + t * LD);
  const T* qt = reinterpret_cast<const T*>(qt_s);
  const T* dt = reinterpret_cast<const T*>(dot_s);
  const int q_lo = k0;
  const int q_hi = window > 0 ? min(tl.seg_end - 1, k0 + kn - 1 + window - 1) : tl.seg_end - 1;
  __syncthreads();
  {
    for (int i0 = q_lo; i0 <= q_hi; i0 += kBN) {
      const int in = min(kBN, q_hi - i0 + 1);
      load_rows<BM, BF>(qt_s, D, kBN, q, i0, in, qs, static_cast<int64_t>(h) * D, D);
      load_rows<BM, BF>(dot_s, D, kBN, dout, i0, in, qs, static_cast<int64_t>(h) * D, D);
      for (int r = t; r < kBN; r += BM) {
        l_s[r] = r < in ? lse[static_cast<int64_t>(i0 + r) * Hq + h] : 0.0f;
        dl_s[r] = r < in ? delta[static_cast<int64_t>(i0 + r) * Hq + h] : 0.0f;
      }
      __syncthreads();
      float P[kBN], dS[kBN];
#pragma unroll
      for (int qq = 0; qq < kBN; ++qq) P[qq] = dS[qq] = 0.0f;
      for (int c = 0; c < DV; ++c) {
        const T a = kr[c], b = vr[c];
#pragma unroll
        for (int qq = 0; qq < kBN; ++qq) {
          P[qq] += vdot(qt[qq * DV + c], a);   // q . k (the dq kernel's product order)
          dS[qq] += vdot(dt[qq * DV + c], b);  // dO . v
        }
      }
      bool any = false;
#pragma unroll
      for (int qq = 0; qq < kBN; ++qq) {
        const bool ok = active && qq < in && visible(i0 + qq, j, window);
        const float p = ok ? expf(P[qq] * scale - l_s[qq]) : 0.0f;
        dS[qq] = ok ? rnd<BF>(p * (dS[qq] - dl_s[qq])) : 0.0f;
        P[qq] = rnd<BF>(p);
        any |= ok;
      }
      if (any) {
        for (int c = 0; c < DV; ++c) {
          T av = dvr[c], ak = dkr[c];
#pragma unroll
          for (int qq = 0; qq < kBN; ++qq) {
            vaxpy(P[qq], dt[qq * DV + c], av);
            vaxpy(dS[qq], qt[qq * DV + c], ak);
          }
          dvr[c] = av;
          dkr[c] = ak;
        }
      }
      __syncthreads();
    }
  }
  const bool partial = G > 1;
  const int64_t os = partial ? qs : ks, ho = static_cast<int64_t>(partial ? h : hk) * D;
  store_rows<BM>(dk, k0, kn, os, ho, dk_s, LD, D, partial ? 1.0f : scale);
  store_rows<BM>(dv, k0, kn, os, ho, dv_s, LD, D, 1.0f);
}

// dk[t, hk, :] = scale * sum_g pk[t, hk*G + g, :], dv likewise without the scale, g in order (deterministic),
// for the rows t in [r0, r0 + rows).
__global__ void k_attn_dkv_reduce(const float* __restrict__ pk, const float* __restrict__ pv, float* __restrict__ dk,
                                  float* __restrict__ dv, int64_t r0, int64_t rows, int Hkv, int G, int D,
                                  float scale) {
  const int64_t n = rows * Hkv * D, w = static_cast<int64_t>(Hkv) * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = r0 + e / w, rem = e % w, hk = rem / D, d = rem % D;
    const float* a = pk + (t * Hkv * G + hk * G) * D + d;
    const float* b = pv + (t * Hkv * G + hk * G) * D + d;
    float sk = 0.0f, sv = 0.0f;
    for (int g = 0; g < G; ++g) {
      sk += a[static_cast<int64_t>(g) * D];
      sv += b[static_cast<int64_t>(g) * D];
    }
    dk[t * w + rem] = sk * scale;
    dv[t * w + rem] = sv;
  }
}

// ---------------------------------------------------------------- host side

struct Plan {
  std::vector<int32_t> cu;
  int64_t T = 0;
  int bm = 64;
  std::vector<Tile> tiles;
};

Plan plan(const char* f, const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D,
          int64_t window) {
  const std::string fn = f;
  check(Hq > 0 && Hkv > 0 && D > 0, fn + ": Hq, Hkv and D must be positive (got Hq=" + std::to_string(Hq) +
                                        ", Hkv=" + std::to_string(Hkv) + ", D=" + std::to_string(D) + ")");
  check(Hq % Hkv == 0, fn + ": Hq=" + std::to_string(Hq) + " is not a multiple of Hkv=" + std::to_string(Hkv));
  check(n_seqs >= 0, fn + ": n_seqs must be >= 0");
  check(window >= 0, fn + ": window must be >= 0 (0 = none), got " + std::to_string(window));
  check(D <= 256, fn + " (cuda): head dim " + std::to_string(D) + " > 256 is not supported");
  check(Hq < 65536, fn + " (cuda): more than 65535 heads");
  Plan p;
  p.cu.resize(static_cast<size_t>(n_seqs + 1));
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(p.cu.data(), cu_seqlens, p.cu.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                     detail::stream()));
  TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  check(p.cu[0] >= 0, fn + ": cu_seqlens[0] = " + std::to_string(p.cu[0]) + " is negative");
  for (int64_t i = 0; i < n_seqs; ++i)
    check(p.cu[i + 1] >= p.cu[i], fn + ": cu_seqlens is decreasing at index " + std::to_string(i + 1) + " (" +
                                      std::to_string(p.cu[i]) + " -> " + std::to_string(p.cu[i + 1]) + ")");
  p.T = p.cu[n_seqs];
  p.bm = D <= 128 ? 64 : 32;
  for (int64_t s = 0; s < n_seqs; ++s)
    for (int32_t r = p.cu[s]; r < p.cu[s + 1]; r += p.bm) p.tiles.push_back({p.cu[s], p.cu[s + 1], r});
  return p;
}

// The tile list on the device (scratch, returned at scope exit).
struct DeviceTiles {
  Tile* d = nullptr;
  explicit DeviceTiles(const std::vector<Tile>& t) {
    d = static_cast<Tile*>(allocator().allocate(t.size() * sizeof(Tile)));
    TWINKLE_CUDA_CHECK(
        cudaMemcpyAsync(d, t.data(), t.size() * sizeof(Tile), cudaMemcpyHostToDevice, detail::stream()));
    TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));  // t is a host vector that goes away
  }
  ~DeviceTiles() { allocator().deallocate(d); }
  DeviceTiles(const DeviceTiles&) = delete;
  DeviceTiles& operator=(const DeviceTiles&) = delete;
};

// Zeroes rows [0, rows) of a [T, H*D]-strided tensor (the tokens before cu_seqlens[0]).
void zero_rows(float* x, int64_t rows, int64_t width) {
  if (rows > 0)
    TWINKLE_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<size_t>(rows * width) * sizeof(float), detail::stream()));
}

template <typename K>
void set_smem(K kernel, size_t bytes) {
  TWINKLE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int BM, int V>
void launch_fwd(const Plan& p, const Tile* tiles, const float* q, const float* k, const float* v, float* out,
                float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  const int64_t LD = own_ld<V>(static_cast<int>(D));
  const size_t smem = static_cast<size_t>(2 * BM * LD + 2 * kBN * D) * sizeof(float);
  auto* const kern = k_attn_fwd<BM, V>;  // (a template-id with a comma cannot be a macro argument)
  set_smem(kern, smem);
  const dim3 grid(static_cast<unsigned>(p.tiles.size()), static_cast<unsigned>(Hq));
  TWINKLE_LAUNCH(kern, grid, BM, smem, q, k, v, out, lse, tiles, static_cast<int>(Hq),
                 static_cast<int>(Hkv), static_cast<int>(D), scale, static_cast<int>(window));
  TWINKLE_CUDA_LAUNCHED("attention forward");
}

template <int BM, int V, bool BF>
void launch_bwd(const Plan& p, const Tile* tiles, const float* q, const float* k, const float* v, const float* out,
                const float* lse, float* delta, const float* dout, float* dq, float* dk, float* dv, int64_t Hq,
                int64_t Hkv, int64_t D, float scale, int64_t window) {
  const int64_t rows = p.T * Hq;
  // rows of tokens before cu_seqlens[0] are computed too (harmless: delta is only read inside segments)
  TWINKLE_LAUNCH(k_attn_delta<V>, static_cast<unsigned>((rows + 255) / 256), 256, 0, out, dout, delta, rows,
                 static_cast<int>(D));
  TWINKLE_CUDA_LAUNCHED("attention backward delta");
  const int64_t LD = own_ld<V>(static_cast<int>(D));
  const size_t smem_q = static_cast<size_t>(3 * BM * LD + 2 * kBN * D) * sizeof(float);
  const size_t smem_kv = static_cast<size_t>(4 * BM * LD + 2 * kBN * D + 2 * kBN) * sizeof(float);
  auto* const kq = k_attn_bwd_dq<BM, V, BF>;
  auto* const kkv = k_attn_bwd_dkv<BM, V, BF>;
  set_smem(kq, smem_q);
  set_smem(kkv, smem_kv);
  const unsigned nt = static_cast<unsigned>(p.tiles.size());
  TWINKLE_LAUNCH(kq, dim3(nt, static_cast<unsigned>(Hq)), BM, smem_q, q, k, v, lse, delta, dout, dq,
                 tiles, static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D), scale,
                 static_cast<int>(window));
  TWINKLE_CUDA_LAUNCHED("attention backward dq");
  const int64_t G = Hq / Hkv;
  if (G == 1) {
    TWINKLE_LAUNCH(kkv, dim3(nt, static_cast<unsigned>(Hq)), BM, smem_kv, q, k, v, lse, delta, dout, dk, dv, tiles,
                   static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D), scale, static_cast<int>(window));
    TWINKLE_CUDA_LAUNCHED("attention backward dk dv");
    return;
  }
  // per-query-head partials [T, Hq, D] (scratch, stream-ordered), then the group sum
  const size_t pn = static_cast<size_t>(p.T * Hq * D);
  float* part = static_cast<float*>(allocator().allocate(2 * pn * sizeof(float)));
  try {
    TWINKLE_LAUNCH(kkv, dim3(nt, static_cast<unsigned>(Hq)), BM, smem_kv, q, k, v, lse, delta, dout, part,
                   part + pn, tiles, static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D), scale,
                   static_cast<int>(window));
    TWINKLE_CUDA_LAUNCHED("attention backward dk dv (per query head)");
    const int64_t r0 = p.cu[0], rows = p.T - r0, n = rows * Hkv * D;
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 65535LL * 16));
    TWINKLE_LAUNCH(k_attn_dkv_reduce, static_cast<unsigned>(blocks), 256, 0, part, part + pn, dk, dv, r0, rows,
                   static_cast<int>(Hkv), static_cast<int>(G), static_cast<int>(D), scale);
    TWINKLE_CUDA_LAUNCHED("attention backward dk dv group sum");
  } catch (...) {
    allocator().deallocate(part);
    throw;
  }
  allocator().deallocate(part);
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                       int64_t window) {
  const Plan p = plan("flash_attention_forward", cu_seqlens, n_seqs, Hq, Hkv, D, window);
  zero_rows(out, p.cu[0], Hq * D);
  zero_rows(lse, p.cu[0], Hq);
  if (p.tiles.empty()) return;
  DeviceTiles tiles(p.tiles);
  const bool v4 = D % 4 == 0;
  if (p.bm == 64 && v4)
    launch_fwd<64, 4>(p, tiles.d, q, k, v, out, lse, Hq, Hkv, D, scale, window);
  else if (p.bm == 64)
    launch_fwd<64, 1>(p, tiles.d, q, k, v, out, lse, Hq, Hkv, D, scale, window);
  else if (v4)
    launch_fwd<32, 4>(p, tiles.d, q, k, v, out, lse, Hq, Hkv, D, scale, window);
  else
    launch_fwd<32, 1>(p, tiles.d, q, k, v, out, lse, Hq, Hkv, D, scale, window);
}

namespace {

template <bool BF>
void attention_backward_impl(const float* q, const float* k, const float* v, const float* out, const float* lse,
                             const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                             int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  const Plan p = plan("flash_attention_backward", cu_seqlens, n_seqs, Hq, Hkv, D, window);
  zero_rows(dq, p.cu[0], Hq * D);
  zero_rows(dk, p.cu[0], Hkv * D);
  zero_rows(dv, p.cu[0], Hkv * D);
  if (p.tiles.empty()) return;
  float* delta = static_cast<float*>(allocator().allocate(static_cast<size_t>(p.T * Hq) * sizeof(float)));
  try {
    DeviceTiles tiles(p.tiles);
    // float4 reads of O and dO in the delta kernel need 16-byte aligned rows (a view at any token offset is)
    const bool v4 = D % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dout) % 16 == 0;
    if (p.bm == 64 && v4)
      launch_bwd<64, 4, BF>(p, tiles.d, q, k, v, out, lse, delta, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
    else if (p.bm == 64)
      launch_bwd<64, 1, BF>(p, tiles.d, q, k, v, out, lse, delta, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
    else if (v4)
      launch_bwd<32, 4, BF>(p, tiles.d, q, k, v, out, lse, delta, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
    else
      launch_bwd<32, 1, BF>(p, tiles.d, q, k, v, out, lse, delta, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
  } catch (...) {
    allocator().deallocate(delta);
    throw;
  }
  allocator().deallocate(delta);
}

}  // namespace

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens, int64_t n_seqs,
                        int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  attention_backward_impl<false>(q, k, v, out, lse, dout, dq, dk, dv, cu_seqlens, n_seqs, Hq, Hkv, D, scale, window);
}

void attention_backward_bf16(const float* q, const float* k, const float* v, const float* out, const float* lse,
                             const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                             int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  attention_backward_impl<true>(q, k, v, out, lse, dout, dq, dk, dv, cu_seqlens, n_seqs, Hq, Hkv, D, scale, window);
}

}  // namespace twinkle::cuda::ops
