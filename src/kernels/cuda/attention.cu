// CUDA causal grouped-query flash attention over packed variable-length sequences, forward and backward,
// fp32 (FlashAttention-2: Dao 2023, algorithm 1 forward with the online softmax and the row
// log-sum-exp saved; algorithm 2 backward recomputing P from the lse). Semantics, layout and errors:
// twinkle/kernels/cpu/attention.h (SDPA with a block-diagonal causal mask; q [T, Hq, D], k/v
// [T, Hkv, D]; query head h uses kv head h / (Hq/Hkv); sliding window: a query at offset t sees keys
// s with t - window < s <= t; window = 0: plain causal). No [T, T] matrix exists.
//
// Work split ("one thread per row, broadcast tiles"): a block of BM threads owns BM consecutive rows of
// one segment and one head; the other operand streams through shared memory in tiles of BN rows that
// every thread reads at the same address (a broadcast). Forward: a thread is a query row (its q and
// output accumulator live in shared memory with an odd row stride, bank-conflict free). Backward, without
// atomics (deterministic): one kernel where a thread is a key row accumulating dK and dV over the query
// rows and query heads of its group that see it, one kernel where a thread is a query row accumulating
// dQ over its keys; both recompute P = exp(scale q.k - lse) and dP = dO.v, with
// delta = rowsum(dO * O) computed first. Tiles never cross a segment; key tiles wholly outside every
// query's window are skipped. cu_seqlens is read to the host once per call (n_seqs + 1 ints) to build the
// tile list.
#include <algorithm>
#include <string>
#include <vector>

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

// Loads rows [r0, r0 + n) (n <= ROWS) of head `h` of a [T, H, D] tensor into dst [ROWS][ld] (zeros beyond n).
template <int NT>
__device__ void load_rows(float* dst, int ld, int rows, const float* src, int64_t r0, int n, int64_t row_stride,
                          int64_t head_off, int D) {
  for (int e = threadIdx.x; e < rows * D; e += NT) {
    const int r = e / D, d = e - r * D;
    dst[r * ld + d] = r < n ? src[(r0 + r) * row_stride + head_off + d] : 0.0f;
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

// ---------------------------------------------------------------- forward

template <int BM>
__global__ void __launch_bounds__(BM) k_attn_fwd(const float* __restrict__ q, const float* __restrict__ k,
                                                 const float* __restrict__ v, float* __restrict__ out,
                                                 float* __restrict__ lse, const Tile* __restrict__ tiles, int Hq,
                                                 int Hkv, int D, float scale, int window) {
  TWINKLE_DYN_SMEM(float, smem);
  const int DS = D | 1;
  float* q_s = smem;             // [BM][DS]
  float* o_s = q_s + BM * DS;    // [BM][DS]
  float* k_s = o_s + BM * DS;    // [kBN][D]
  float* v_s = k_s + kBN * D;    // [kBN][D]
  const Tile tl = tiles[blockIdx.x];
  const int h = blockIdx.y, hk = h / (Hq / Hkv), t = threadIdx.x;
  const int q0 = tl.start, qn = min(BM, tl.seg_end - q0);
  const int64_t qs = static_cast<int64_t>(Hq) * D, ks = static_cast<int64_t>(Hkv) * D;
  load_rows<BM>(q_s, DS, BM, q, q0, qn, qs, static_cast<int64_t>(h) * D, D);
  for (int e = t; e < BM * DS; e += BM) o_s[e] = 0.0f;
  const int i = q0 + t;
  const bool active = t < qn;
  float* qr = q_s + t * DS;
  float* orow = o_s + t * DS;
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
    float mt = m;
#pragma unroll
    for (int jj = 0; jj < kBN; ++jj) {
      const bool ok = active && jj < jn && visible(i, j0 + jj, window);
      float dot = 0.0f;
      if (ok) {
        const float* kr = k_s + jj * D;
        for (int d = 0; d < D; ++d) dot += qr[d] * kr[d];
      }
      s[jj] = ok ? dot * scale : -INFINITY;
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
      for (int d = 0; d < D; ++d) {
        float acc = orow[d] * alpha;
#pragma unroll
        for (int jj = 0; jj < kBN; ++jj) acc += s[jj] * v_s[jj * D + d];
        orow[d] = acc;
      }
      m = mt;
    }
    __syncthreads();
  }
  if (active) {
    const float inv = 1.0f / l;  // l >= 1: every query sees itself
    for (int d = 0; d < D; ++d) orow[d] *= inv;
    lse[static_cast<int64_t>(i) * Hq + h] = m + logf(l);
  }
  __syncthreads();
  store_rows<BM>(out, q0, qn, qs, static_cast<int64_t>(h) * D, o_s, DS, D, 1.0f);
}

// ---------------------------------------------------------------- backward

// delta[i, h] = sum_d dO[i, h, d] * O[i, h, d]; one thread per (i, h) row, fp32 in d order — the same
// arithmetic as dP = dO . v in the backward kernels, so that where O equals v exactly (a query that sees
// only itself) dS = P (dP - delta) is exactly 0, as in exact arithmetic.
__global__ void k_attn_delta(const float* __restrict__ o, const float* __restrict__ dout, float* __restrict__ delta,
                             int64_t rows, int D) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= rows) return;
  const float* orow = o + row * D;
  const float* drow = dout + row * D;
  float s = 0.0f;
  for (int d = 0; d < D; ++d) s += drow[d] * orow[d];
  delta[row] = s;
}

// dQ: a thread per query row of the tile; keys stream through shared memory.
template <int BM>
__global__ void __launch_bounds__(BM) k_attn_bwd_dq(const float* __restrict__ q, const float* __restrict__ k,
                                                    const float* __restrict__ v, const float* __restrict__ lse,
                                                    const float* __restrict__ delta, const float* __restrict__ dout,
                                                    float* __restrict__ dq, const Tile* __restrict__ tiles, int Hq,
                                                    int Hkv, int D, float scale, int window) {
  TWINKLE_DYN_SMEM(float, smem);
  const int DS = D | 1;
  float* q_s = smem;              // [BM][DS]
  float* do_s = q_s + BM * DS;    // [BM][DS]
  float* dq_s = do_s + BM * DS;   // [BM][DS]
  float* k_s = dq_s + BM * DS;    // [kBN][D]
  float* v_s = k_s + kBN * D;     // [kBN][D]
  const Tile tl = tiles[blockIdx.x];
  const int h = blockIdx.y, hk = h / (Hq / Hkv), t = threadIdx.x;
  const int q0 = tl.start, qn = min(BM, tl.seg_end - q0);
  const int64_t qs = static_cast<int64_t>(Hq) * D, ks = static_cast<int64_t>(Hkv) * D;
  load_rows<BM>(q_s, DS, BM, q, q0, qn, qs, static_cast<int64_t>(h) * D, D);
  load_rows<BM>(do_s, DS, BM, dout, q0, qn, qs, static_cast<int64_t>(h) * D, D);
  for (int e = t; e < BM * DS; e += BM) dq_s[e] = 0.0f;
  const int i = q0 + t;
  const bool active = t < qn;
  const float li = active ? lse[static_cast<int64_t>(i) * Hq + h] : 0.0f;
  const float di = active ? delta[static_cast<int64_t>(i) * Hq + h] : 0.0f;
  const float* qr = q_s + t * DS;
  const float* dor = do_s + t * DS;
  float* dqr = dq_s + t * DS;
  const int kv_lo = window > 0 ? max(tl.seg_start, q0 - window + 1) : tl.seg_start;
  const int kv_hi = q0 + qn - 1;
  __syncthreads();
  for (int j0 = kv_lo; j0 <= kv_hi; j0 += kBN) {
    const int jn = min(kBN, kv_hi - j0 + 1);
    load_rows<BM>(k_s, D, kBN, k, j0, jn, ks, static_cast<int64_t>(hk) * D, D);
    load_rows<BM>(v_s, D, kBN, v, j0, jn, ks, static_cast<int64_t>(hk) * D, D);
    __syncthreads();
    float ds[kBN];
    bool any = false;
#pragma unroll
    for (int jj = 0; jj < kBN; ++jj) {
      const bool ok = active && jj < jn && visible(i, j0 + jj, window);
      ds[jj] = 0.0f;
      if (ok) {
        const float* kr = k_s + jj * D;
        const float* vr = v_s + jj * D;
        float sdot = 0.0f, pdot = 0.0f;
        for (int d = 0; d < D; ++d) {
          sdot += qr[d] * kr[d];
          pdot += dor[d] * vr[d];
        }
        const float p = expf(sdot * scale - li);
        ds[jj] = p * (pdot - di);
        any = true;
      }
    }
    if (any) {
      for (int d = 0; d < D; ++d) {
        float acc = dqr[d];
#pragma unroll
        for (int jj = 0; jj < kBN; ++jj) acc += ds[jj] * k_s[jj * D + d];
        dqr[d] = acc;
      }
    }
    __syncthreads();
  }
  store_rows<BM>(dq, q0, qn, qs, static_cast<int64_t>(h) * D, dq_s, DS, D, scale);
}

// dK, dV: a thread per key row of the tile (kv head blockIdx.y); the query rows of every query head of
// the group that see the tile stream through shared memory.
template <int BM>
__global__ void __launch_bounds__(BM) k_attn_bwd_dkv(const float* __restrict__ q, const float* __restrict__ k,
                                                     const float* __restrict__ v, const float* __restrict__ lse,
                                                     const float* __restrict__ delta, const float* __restrict__ dout,
                                                     float* __restrict__ dk, float* __restrict__ dv,
                                                     const Tile* __restrict__ tiles, int Hq, int Hkv, int D,
                                                     float scale, int window) {
  TWINKLE_DYN_SMEM(float, smem);
  const int DS = D | 1;
  float* k_s = smem;              // [BM][DS]
  float* v_s = k_s + BM * DS;     // [BM][DS]
  float* dk_s = v_s + BM * DS;    // [BM][DS]
  float* dv_s = dk_s + BM * DS;   // [BM][DS]
  float* qt_s = dv_s + BM * DS;   // [kBN][D]
  float* dot_s = qt_s + kBN * D;  // [kBN][D]
  float* l_s = dot_s + kBN * D;   // [kBN]
  float* dl_s = l_s + kBN;        // [kBN]
  const Tile tl = tiles[blockIdx.x];
  const int hk = blockIdx.y, G = Hq / Hkv, t = threadIdx.x;
  const int k0 = tl.start, kn = min(BM, tl.seg_end - k0);
  const int64_t qs = static_cast<int64_t>(Hq) * D, ks = static_cast<int64_t>(Hkv) * D;
  load_rows<BM>(k_s, DS, BM, k, k0, kn, ks, static_cast<int64_t>(hk) * D, D);
  load_rows<BM>(v_s, DS, BM, v, k0, kn, ks, static_cast<int64_t>(hk) * D, D);
  for (int e = t; e < BM * DS; e += BM) dk_s[e] = dv_s[e] = 0.0f;
  const int j = k0 + t;
  const bool active = t < kn;
  const float* kr = k_s + t * DS;
  const float* vr = v_s + t * DS;
  float* dkr = dk_s + t * DS;
  float* dvr = dv_s + t * DS;
  const int q_lo = k0;
  const int q_hi = window > 0 ? min(tl.seg_end - 1, k0 + kn - 1 + window - 1) : tl.seg_end - 1;
  __syncthreads();
  for (int g = 0; g < G; ++g) {
    const int h = hk * G + g;
    for (int i0 = q_lo; i0 <= q_hi; i0 += kBN) {
      const int in = min(kBN, q_hi - i0 + 1);
      load_rows<BM>(qt_s, D, kBN, q, i0, in, qs, static_cast<int64_t>(h) * D, D);
      load_rows<BM>(dot_s, D, kBN, dout, i0, in, qs, static_cast<int64_t>(h) * D, D);
      for (int r = t; r < kBN; r += BM) {
        l_s[r] = r < in ? lse[static_cast<int64_t>(i0 + r) * Hq + h] : 0.0f;
        dl_s[r] = r < in ? delta[static_cast<int64_t>(i0 + r) * Hq + h] : 0.0f;
      }
      __syncthreads();
      float P[kBN], dS[kBN];
      bool any = false;
#pragma unroll
      for (int qq = 0; qq < kBN; ++qq) {
        const bool ok = active && qq < in && visible(i0 + qq, j, window);
        P[qq] = 0.0f;
        dS[qq] = 0.0f;
        if (ok) {
          const float* qrow = qt_s + qq * D;
          const float* dorow = dot_s + qq * D;
          float sdot = 0.0f, pdot = 0.0f;
          for (int d = 0; d < D; ++d) {
            sdot += kr[d] * qrow[d];
            pdot += vr[d] * dorow[d];
          }
          const float p = expf(sdot * scale - l_s[qq]);
          P[qq] = p;
          dS[qq] = p * (pdot - dl_s[qq]);
          any = true;
        }
      }
      if (any) {
        for (int d = 0; d < D; ++d) {
          float av = dvr[d], ak = dkr[d];
#pragma unroll
          for (int qq = 0; qq < kBN; ++qq) {
            av += P[qq] * dot_s[qq * D + d];
            ak += dS[qq] * qt_s[qq * D + d];
          }
          dvr[d] = av;
          dkr[d] = ak;
        }
      }
      __syncthreads();
    }
  }
  store_rows<BM>(dk, k0, kn, ks, static_cast<int64_t>(hk) * D, dk_s, DS, D, scale);
  store_rows<BM>(dv, k0, kn, ks, static_cast<int64_t>(hk) * D, dv_s, DS, D, 1.0f);
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

template <int BM>
void launch_fwd(const Plan& p, const Tile* tiles, const float* q, const float* k, const float* v, float* out,
                float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  const int64_t DS = D | 1;
  const size_t smem = static_cast<size_t>(2 * BM * DS + 2 * kBN * D) * sizeof(float);
  set_smem(k_attn_fwd<BM>, smem);
  const dim3 grid(static_cast<unsigned>(p.tiles.size()), static_cast<unsigned>(Hq));
  TWINKLE_LAUNCH(k_attn_fwd<BM>, grid, BM, smem, q, k, v, out, lse, tiles, static_cast<int>(Hq),
                                                       static_cast<int>(Hkv), static_cast<int>(D), scale,
                                                       static_cast<int>(window));
  TWINKLE_CUDA_LAUNCHED("attention forward");
}

template <int BM>
void launch_bwd(const Plan& p, const Tile* tiles, const float* q, const float* k, const float* v, const float* lse,
                const float* delta, const float* dout, float* dq, float* dk, float* dv, int64_t Hq, int64_t Hkv,
                int64_t D, float scale, int64_t window) {
  const int64_t DS = D | 1;
  const size_t smem_q = static_cast<size_t>(3 * BM * DS + 2 * kBN * D) * sizeof(float);
  const size_t smem_kv = static_cast<size_t>(4 * BM * DS + 2 * kBN * D + 2 * kBN) * sizeof(float);
  set_smem(k_attn_bwd_dq<BM>, smem_q);
  set_smem(k_attn_bwd_dkv<BM>, smem_kv);
  const unsigned nt = static_cast<unsigned>(p.tiles.size());
  TWINKLE_LAUNCH(k_attn_bwd_dq<BM>, dim3(nt, static_cast<unsigned>(Hq)), BM, smem_q,
      q, k, v, lse, delta, dout, dq, tiles, static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D), scale,
      static_cast<int>(window));
  TWINKLE_CUDA_LAUNCHED("attention backward dq");
  TWINKLE_LAUNCH(k_attn_bwd_dkv<BM>, dim3(nt, static_cast<unsigned>(Hkv)), BM, smem_kv,
      q, k, v, lse, delta, dout, dk, dv, tiles, static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D),
      scale, static_cast<int>(window));
  TWINKLE_CUDA_LAUNCHED("attention backward dk dv");
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
  if (p.bm == 64)
    launch_fwd<64>(p, tiles.d, q, k, v, out, lse, Hq, Hkv, D, scale, window);
  else
    launch_fwd<32>(p, tiles.d, q, k, v, out, lse, Hq, Hkv, D, scale, window);
}

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens, int64_t n_seqs,
                        int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  const Plan p = plan("flash_attention_backward", cu_seqlens, n_seqs, Hq, Hkv, D, window);
  zero_rows(dq, p.cu[0], Hq * D);
  zero_rows(dk, p.cu[0], Hkv * D);
  zero_rows(dv, p.cu[0], Hkv * D);
  if (p.tiles.empty()) return;
  const int64_t rows = p.T * Hq;
  float* delta = static_cast<float*>(allocator().allocate(static_cast<size_t>(rows) * sizeof(float)));
  try {
    const int64_t blocks = (rows + 255) / 256;
    // rows of tokens before cu_seqlens[0] are computed too (harmless: delta is only read inside segments)
    TWINKLE_LAUNCH(k_attn_delta, static_cast<unsigned>(blocks), 256, 0, out, dout, delta, rows, static_cast<int>(D));
    TWINKLE_CUDA_LAUNCHED("attention backward delta");
    DeviceTiles tiles(p.tiles);
    if (p.bm == 64)
      launch_bwd<64>(p, tiles.d, q, k, v, lse, delta, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
    else
      launch_bwd<32>(p, tiles.d, q, k, v, lse, delta, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
  } catch (...) {
    allocator().deallocate(delta);
    throw;
  }
  allocator().deallocate(delta);
}

}  // namespace twinkle::cuda::ops
