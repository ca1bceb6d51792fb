// The CUDA AttentionBlockOp (twinkle/kernels/ops.h): ring attention's per-step pieces for context
// parallelism — one query block against one key block with explicit global positions and segment ids
// (twinkle/kernels/cpu/attention_block.h: query i sees key j iff q_seg[i] == k_seg[j], k_pos[j] <= q_pos[i]
// and, with a window, q_pos[i] - k_pos[j] < window), the log-sum-exp merge of partial results (Liu et al.
// 2023, "Ring Attention"; Megatron-core / TransformerEngine context_parallel.py) and FlashAttention-2's
// delta = rowsum(dO * O).
//
// Work split, simple and deterministic (no atomics): the forward and dQ use one thread per (query row,
// head), dK / dV one thread per (key row, kv head) summing over the query heads of its group; each thread
// streams the other operand's rows from global memory (no shared-memory tiles yet: the ring's blocks are
// a context-parallel run's inner step, where the K/V exchange and the flash kernel's tiling — attention.cu —
// are the next speed step). The forward runs two passes over the visible keys (the row maximum, then the
// exponentials and P V), so the output needs no rescaling. fp32 throughout, except the "bf16" set's
// backward (attention_block_backward_bf16): the operands of its products rounded to bf16 at the points of
// twinkle/kernels/cpu/attention_block.h's attention_block_backward_bf16 (q, k, v, dO as read; P after its exp
// and dS after its fp32 math, dS formed from the fp32 P), the products and sums fp32.
#include <cmath>
#include <string>

#include "bf16.h"
#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kThreads = 128;

void check_block_args(const char* fn, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t D, int64_t window) {
  check(Tq >= 0 && Tk >= 0 && Hq > 0 && Hkv > 0 && D > 0 && Hq % Hkv == 0 && window >= 0,
        std::string(fn) + " (cuda): need Tq, Tk >= 0, heads and head_dim > 0, Hq % Hkv == 0 and window >= 0, got Tq=" +
            std::to_string(Tq) + " Tk=" + std::to_string(Tk) + " Hq=" + std::to_string(Hq) + " Hkv=" +
            std::to_string(Hkv) + " D=" + std::to_string(D) + " window=" + std::to_string(window));
}

__device__ __forceinline__ bool sees(int32_t qs, int32_t qp, int32_t ks, int32_t kp, int64_t window) {
  return qs == ks && kp <= qp && (window <= 0 || static_cast<int64_t>(qp) - kp < window);
}

__device__ __forceinline__ float dot_row(const float* a, const float* b, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

// x, or x rounded to bf16 (BF: the "bf16" set's backward)
template <bool BF> __device__ __forceinline__ float rnd(float x) {
  if constexpr (BF) return bf16_round(x);
  return x;
}

// sum_d rnd(a[d]) * rnd(b[d]) in fp32
template <bool BF> __device__ __forceinline__ float dot_rnd(const float* a, const float* b, int64_t D) {
  float s = 0.0f;
  for (int64_t d = 0; d < D; ++d) s += rnd<BF>(a[d]) * rnd<BF>(b[d]);
  return s;
}

// One thread per (query row i, head h): out [Tq, Hq, D], lse [Tq, Hq].
__global__ void k_block_fwd(const float* __restrict__ q, const int32_t* __restrict__ q_seg,
                            const int32_t* __restrict__ q_pos, int64_t Tq, const float* __restrict__ k,
                            const float* __restrict__ v, const int32_t* __restrict__ k_seg,
                            const int32_t* __restrict__ k_pos, int64_t Tk, float* __restrict__ out,
                            float* __restrict__ lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  const int64_t group = Hq / Hkv;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < Tq * Hq;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = r / Hq, h = r - i * Hq, hk = h / group;
    const float* qi = q + r * D;
    float* o = out + r * D;
    for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
    float m = -INFINITY;
    for (int64_t j = 0; j < Tk; ++j)
      if (sees(q_seg[i], q_pos[i], k_seg[j], k_pos[j], window)) m = fmaxf(m, scale * dot_row(qi, k + (j * Hkv + hk) * D, D));
    if (m == -INFINITY) {  // no visible key in this block: an empty partial result
      lse[r] = -INFINITY;
      continue;
    }
    float l = 0.0f;
    for (int64_t j = 0; j < Tk; ++j) {
      if (!sees(q_seg[i], q_pos[i], k_seg[j], k_pos[j], window)) continue;
      const float p = expf(scale * dot_row(qi, k + (j * Hkv + hk) * D, D) - m);
      l += p;
      const float* vj = v + (j * Hkv + hk) * D;
      for (int64_t d = 0; d < D; ++d) o[d] += p * vj[d];
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    lse[r] = m + logf(l);
  }
}

// One thread per (query row i, head h): dq += scale * sum_j dS_ij k_j.
template <bool BF>
__global__ void k_block_dq(const float* __restrict__ q, const int32_t* __restrict__ q_seg,
                           const int32_t* __restrict__ q_pos, int64_t Tq, const float* __restrict__ k,
                           const float* __restrict__ v, const int32_t* __restrict__ k_seg,
                           const int32_t* __restrict__ k_pos, int64_t Tk, const float* __restrict__ lse,
                           const float* __restrict__ delta, const float* __restrict__ dout, float* __restrict__ dq,
                           int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  const int64_t group = Hq / Hkv;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < Tq * Hq;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = r / Hq, h = r - i * Hq, hk = h / group;
    if (lse[r] == -INFINITY) continue;
    const float* qi = q + r * D;
    const float* gi = dout + r * D;
    float* dqi = dq + r * D;
    for (int64_t j = 0; j < Tk; ++j) {
      if (!sees(q_seg[i], q_pos[i], k_seg[j], k_pos[j], window)) continue;
      const float* kj = k + (j * Hkv + hk) * D;
      const float p = expf(scale * dot_rnd<BF>(qi, kj, D) - lse[r]);
      const float ds = rnd<BF>(p * (dot_rnd<BF>(gi, v + (j * Hkv + hk) * D, D) - delta[r]));
      for (int64_t d = 0; d < D; ++d) dqi[d] += scale * ds * rnd<BF>(kj[d]);
    }
  }
}

// One thread per (key row j, kv head hk): dv += sum P^T dO, dk += scale * sum dS^T q over the group's heads.
template <bool BF>
__global__ void k_block_dkv(const float* __restrict__ q, const int32_t* __restrict__ q_seg,
                            const int32_t* __restrict__ q_pos, int64_t Tq, const float* __restrict__ k,
                            const float* __restrict__ v, const int32_t* __restrict__ k_seg,
                            const int32_t* __restrict__ k_pos, int64_t Tk, const float* __restrict__ lse,
                            const float* __restrict__ delta, const float* __restrict__ dout, float* __restrict__ dk,
                            float* __restrict__ dv, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  const int64_t group = Hq / Hkv;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < Tk * Hkv;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = c / Hkv, hk = c - j * Hkv;
    const float* kj = k + c * D;
    const float* vj = v + c * D;
    float* dkj = dk + c * D;
    float* dvj = dv + c * D;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        if (!sees(q_seg[i], q_pos[i], k_seg[j], k_pos[j], window)) continue;
        const int64_t r = i * Hq + h;
        const float* qi = q + r * D;
        const float* gi = dout + r * D;
        const float p = expf(scale * dot_rnd<BF>(qi, kj, D) - lse[r]);
        const float ds = rnd<BF>(p * (dot_rnd<BF>(gi, vj, D) - delta[r]));
        const float pr = rnd<BF>(p);
        for (int64_t d = 0; d < D; ++d) {
          dvj[d] += pr * rnd<BF>(gi[d]);
          dkj[d] += scale * ds * rnd<BF>(qi[d]);
        }
      }
  }
}

// One thread per row r of [T * H]: the online-softmax merge of (out_b, lse_b) into (out, lse), as the CPU set.
__global__ void k_lse_merge(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ out_b,
                            const float* __restrict__ lse_b, int64_t rows, int64_t D) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float la = lse[r], lb = lse_b[r];
    if (lb == -INFINITY) continue;
    float* o = out + r * D;
    const float* ob = out_b + r * D;
    if (la == -INFINITY) {
      for (int64_t d = 0; d < D; ++d) o[d] = ob[d];
      lse[r] = lb;
      continue;
    }
    const float mx = fmaxf(la, lb);
    const float ea = expf(la - mx), eb = expf(lb - mx);
    const float s = ea + eb;
    const float wa = ea / s, wb = eb / s;
    for (int64_t d = 0; d < D; ++d) o[d] = o[d] * wa + ob[d] * wb;
    lse[r] = mx + logf(s);
  }
}

__global__ void k_softmax_delta(const float* __restrict__ out, const float* __restrict__ dout,
                                float* __restrict__ delta, int64_t rows, int64_t D) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x)
    delta[r] = dot_row(out + r * D, dout + r * D, D);
}

}  // namespace

void attention_block_forward(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                             const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, float* out,
                             float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_block_args("attention_block_forward", Tq, Tk, Hq, Hkv, D, window);
  if (Tq == 0) return;
  TWINKLE_LAUNCH(k_block_fwd, grid_stride_blocks(Tq * Hq, kThreads), kThreads, 0, q, q_seg, q_pos, Tq, k, v, k_seg,
                 k_pos, Tk, out, lse, Hq, Hkv, D, scale, window);
  TWINKLE_CUDA_LAUNCHED("attention block forward");
}

namespace {

template <bool BF>
void block_backward(const char* fn, const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq,
                    const float* k, const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk,
                    const float* lse, const float* delta, const float* dout, float* dq, float* dk, float* dv,
                    int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_block_args(fn, Tq, Tk, Hq, Hkv, D, window);
  if (Tq == 0 || Tk == 0) return;
  TWINKLE_LAUNCH(k_block_dq<BF>, grid_stride_blocks(Tq * Hq, kThreads), kThreads, 0, q, q_seg, q_pos, Tq, k, v, k_seg,
                 k_pos, Tk, lse, delta, dout, dq, Hq, Hkv, D, scale, window);
  TWINKLE_CUDA_LAUNCHED("attention block backward dq");
  TWINKLE_LAUNCH(k_block_dkv<BF>, grid_stride_blocks(Tk * Hkv, kThreads), kThreads, 0, q, q_seg, q_pos, Tq, k, v,
                 k_seg, k_pos, Tk, lse, delta, dout, dk, dv, Hq, Hkv, D, scale, window);
  TWINKLE_CUDA_LAUNCHED("attention block backward dk dv");
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

void attention_lse_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t T, int64_t H,
                         int64_t D) {
  if (T * H <= 0) return;
  TWINKLE_LAUNCH(k_lse_merge, grid_stride_blocks(T * H, kThreads), kThreads, 0, out, lse, out_b, lse_b, T * H, D);
  TWINKLE_CUDA_LAUNCHED("attention lse merge");
}

void attention_softmax_delta(const float* out, const float* dout, float* delta, int64_t T, int64_t H, int64_t D) {
  if (T * H <= 0) return;
  TWINKLE_LAUNCH(k_softmax_delta, grid_stride_blocks(T * H, kThreads), kThreads, 0, out, dout, delta, T * H, D);
  TWINKLE_CUDA_LAUNCHED("attention softmax delta");
}

}  // namespace twinkle::cuda::ops
