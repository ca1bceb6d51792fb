// CUDA RMSNorm (plain and with the residual add), rotate-half RoPE and the fused per-head q/k norm +
// RoPE. Semantics and rounding: the CPU kernels of twinkle/kernels/cpu/rmsnorm.h, add_rmsnorm.h,
// rope.h, qk_norm_rope.h (HF Qwen3RMSNorm: variance in fp32 from a double sum, rsqrt(variance + eps);
// HF apply_rotary_pos_emb / rotate_half). Rows run one block each; the weight gradient is reduced
// deterministically (fixed row chunks, partials in double, summed in chunk order), computed BEFORE the
// input gradient so that dx may alias dy.
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kRowThreads = 128;  // one block per row

// Sum over the block (blockDim.x == kRowThreads), result broadcast to every thread.
__device__ double block_sum(double v) {
  __shared__ double sh[kRowThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kRowThreads / 32; ++w) s += sh[w];
  return s;
}

// rs = rsqrt(var + eps) with var = float(ss / dim), as the CPU kernels.
__device__ __forceinline__ float rstd_of(double ss, int64_t dim, float eps) {
  const float var = static_cast<float>(ss / static_cast<double>(dim));
  return static_cast<float>(1.0 / sqrt(static_cast<double>(var + eps)));
}

// y = w * (v * rs), v = x (+ r, stored to h when r != null).
__global__ void k_rms_fwd(const float* x, const float* r, float* h, const float* w, float* y, float* rstd,
                          int64_t dim, float eps) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  const float* rr = r ? r + row * dim : nullptr;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float v = rr ? xr[j] + rr[j] : xr[j];
    ss += static_cast<double>(v) * v;
  }
  const float rs = rstd_of(block_sum(ss), dim, eps);  // block_sum synchronizes: every read of x is done
  if (threadIdx.x == 0) rstd[row] = rs;
  float* yr = y + row * dim;
  float* hr = h ? h + row * dim : nullptr;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float v = rr ? xr[j] + rr[j] : xr[j];
    if (hr) hr[j] = v;
    yr[j] = w[j] * (v * rs);
  }
}

// dx = rs * (dy * w - xh * c) (+ dres), c = float(sum(double(dy * w) * xh) / dim), xh = x * rs.
__global__ void k_rms_bwd(const float* x, const float* w, const float* rstd, const float* dy, const float* dres,
                          float* dx, int64_t dim) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  const float* dyr = dy + row * dim;
  const float rs = rstd[row];
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dot += static_cast<double>(dyr[j] * w[j]) * (xr[j] * rs);
  const float c = static_cast<float>(block_sum(dot) / static_cast<double>(dim));
  float* dxr = dx + row * dim;
  const float* dr = dres ? dres + row * dim : nullptr;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float xh = xr[j] * rs;
    const float v = rs * (dyr[j] * w[j] - xh * c);
    dxr[j] = dr ? v + dr[j] : v;
  }
}

// The un-rotated gradient (transpose rotation of rope) of element j of a head row.
__device__ __forceinline__ float unrotate(const float* dyr, int64_t j, int64_t half, const float* c, const float* s) {
  if (j < half) return dyr[j] * c[j] + dyr[j + half] * s[j];
  const int64_t i = j - half;
  return dyr[j] * c[i] - dyr[i] * s[i];
}

// dw partials: part[chunk, j] = sum over the chunk's rows of g * (x * rs) in double; g = dy, or the
// un-rotated dy of a q/k head row (cos/sin != null: rows are tokens*heads, position of row / heads).
__global__ void k_dw_partial(const float* x, const float* rstd, const float* dy, const int32_t* pos, const float* cos_t,
                             const float* sin_t, int64_t heads, int64_t rows, int64_t dim, int64_t rows_per_chunk,
                             double* part) {
  __shared__ double sh[8][32];
  const int64_t j = blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  const int64_t half = dim / 2;
  double acc = 0.0;
  if (j < dim) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float* dyr = dy + r * dim;
      float g;
      if (cos_t) {
        const int64_t p = pos[r / heads];
        g = unrotate(dyr, j, half, cos_t + p * half, sin_t + p * half);
      } else {
        g = dyr[j];
      }
      acc += static_cast<double>(g * (x[r * dim + j] * rstd[r]));
    }
  }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim) {
    double s = 0.0;
    for (int k = 0; k < 8; ++k) s += sh[k][threadIdx.x];
    part[blockIdx.y * dim + j] = s;
  }
}
__global__ void k_dw_finish(const double* part, int64_t nchunks, int64_t dim, float* dw) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= dim) return;
  double s = 0.0;
  for (int64_t c = 0; c < nchunks; ++c) s += part[c * dim + j];
  dw[j] += static_cast<float>(s);
}

// Rotation of every (token, head, pair): sign +1 forward, -1 the transpose.
__global__ void k_rope(float* x, const int32_t* pos, const float* cos_t, const float* sin_t, int64_t tokens,
                       int64_t heads, int64_t half, float sign) {
  const int64_t n = tokens * heads * half;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % half, row = e / half, tk = row / heads;
    const int64_t p = pos[tk];
    const float c = cos_t[p * half + i], sn = sign * sin_t[p * half + i];
    float* xa = x + row * 2 * half;
    const float x1 = xa[i], x2 = xa[i + half];
    xa[i] = x1 * c - x2 * sn;
    xa[i + half] = x2 * c + x1 * sn;
  }
}

// One block per head row: RMSNorm over head_dim, then the rotation (pairs i, i + half per thread).
__global__ void k_qk_norm_rope_fwd(const float* x, const float* w, float* y, float* rstd, const int32_t* pos,
                                   const float* cos_t, const float* sin_t, int64_t heads, int64_t dim, float eps) {
  const int64_t row = blockIdx.x, half = dim / 2;
  const float* xr = x + row * dim;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += static_cast<double>(xr[j]) * xr[j];
  const float rs = rstd_of(block_sum(ss), dim, eps);
  if (threadIdx.x == 0) rstd[row] = rs;
  const int64_t p = pos[row / heads];
  const float* c = cos_t + p * half;
  const float* s = sin_t + p * half;
  float* yr = y + row * dim;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float n1 = w[i] * (xr[i] * rs), n2 = w[i + half] * (xr[i + half] * rs);
    yr[i] = n1 * c[i] - n2 * s[i];
    yr[i + half] = n2 * c[i] + n1 * s[i];
  }
}

__global__ void k_qk_norm_rope_bwd(const float* x, const float* w, const float* rstd, const int32_t* pos,
                                   const float* cos_t, const float* sin_t, const float* dy, float* dx, int64_t heads,
                                   int64_t dim) {
  const int64_t row = blockIdx.x, half = dim / 2;
  const float* xr = x + row * dim;
  const float* dyr = dy + row * dim;
  const float rs = rstd[row];
  const int64_t p = pos[row / heads];
  const float* c = cos_t + p * half;
  const float* s = sin_t + p * half;
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    dot += static_cast<double>(unrotate(dyr, j, half, c, s) * w[j]) * (xr[j] * rs);
  const float cc = static_cast<float>(block_sum(dot) / static_cast<double>(dim));
  float* dxr = dx + row * dim;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {  // both elements of a pair: dx may alias dy
    const float g1 = unrotate(dyr, i, half, c, s), g2 = unrotate(dyr, i + half, half, c, s);
    dxr[i] = rs * (g1 * w[i] - (xr[i] * rs) * cc);
    dxr[i + half] = rs * (g2 * w[i + half] - (xr[i + half] * rs) * cc);
  }
}

__global__ void k_check_pos(const int32_t* pos, int64_t tokens, int64_t max_pos, int* first_bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < tokens;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (pos[i] < 0 || pos[i] >= max_pos) atomicMin(first_bad, static_cast<int>(i));
}

unsigned grid_for(int64_t n, int threads = 256) { return grid_stride_blocks(n, threads); }

// Device copies of host RopeTables, keyed by the table's buffers, dims and sampled values (a table
// destroyed and another built at the same address with other values gets its own copy).
struct RopeKey {
  const void* cos;
  const void* sin;
  int64_t max_pos, head_dim;
  std::vector<float> sample;
  bool operator<(const RopeKey& o) const {
    return std::tie(cos, sin, max_pos, head_dim, sample) < std::tie(o.cos, o.sin, o.max_pos, o.head_dim, o.sample);
  }
};
struct DeviceRope {
  float* cos = nullptr;
  float* sin = nullptr;
};

DeviceRope device_rope(const RopeTable& t) {
  static std::mutex mu;
  static std::map<RopeKey, DeviceRope>* cache = new std::map<RopeKey, DeviceRope>();
  const size_t n = t.cos.size();
  RopeKey key{t.cos.data(), t.sin.data(), t.max_pos, t.head_dim, {}};
  for (size_t k = 0; k < 8 && n; ++k) {
    const size_t i = (n - 1) * k / 7;
    key.sample.push_back(t.cos[i]);
    key.sample.push_back(t.sin[i]);
  }
  std::lock_guard<std::mutex> lk(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  if (cache->size() >= 64) {  // bounded: drop every copy (stream-ordered frees)
    for (auto& [k, d] : *cache) {
      allocator().deallocate(d.cos);
      allocator().deallocate(d.sin);
    }
    cache->clear();
  }
  DeviceRope d;
  d.cos = static_cast<float*>(allocator().allocate(n * sizeof(float)));
  d.sin = static_cast<float*>(allocator().allocate(n * sizeof(float)));
  if (n) {
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(d.cos, t.cos.data(), n * sizeof(float), cudaMemcpyHostToDevice, detail::stream()));
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(d.sin, t.sin.data(), n * sizeof(float), cudaMemcpyHostToDevice, detail::stream()));
    TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));  // the host vectors may change after we return
  }
  cache->emplace(std::move(key), d);
  return d;
}

// Checks head_dim and every position (synchronizes); the message names the token and position as the CPU's.
DeviceRope rope_args(const char* fn, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t head_dim) {
  check(head_dim == t.head_dim && head_dim % 2 == 0, std::string(fn) + ": head_dim " + std::to_string(head_dim) +
                                                         " differs from the table's " + std::to_string(t.head_dim));
  check(static_cast<int64_t>(t.cos.size()) == t.max_pos * (head_dim / 2) && t.sin.size() == t.cos.size(),
        std::string(fn) + ": rope table cos/sin sizes do not match max_pos * head_dim / 2");
  DeviceRope d = device_rope(t);
  if (tokens <= 0) return d;
  Scratch flag(sizeof(int));
  int bad = INT_MAX;
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(flag.p, &bad, sizeof(int), cudaMemcpyHostToDevice, detail::stream()));
  TWINKLE_LAUNCH(k_check_pos, grid_for(tokens), 256, 0, pos, tokens, t.max_pos, flag.as<int>());
  TWINKLE_CUDA_LAUNCHED("rope position check");
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(&bad, flag.p, sizeof(int), cudaMemcpyDeviceToHost, detail::stream()));
  TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  if (bad != INT_MAX) {
    int32_t p = 0;
    TWINKLE_CUDA_CHECK(cudaMemcpy(&p, pos + bad, sizeof(int32_t), cudaMemcpyDeviceToHost));
    throw Error(std::string(fn) + ": position " + std::to_string(p) + " of token " + std::to_string(bad) +
                " is outside the rope table [0, " + std::to_string(t.max_pos) + ")");
  }
  return d;
}

// dw += sum over rows of g * xh, deterministic (see k_dw_partial).
void dw_reduce(const float* x, const float* rstd, const float* dy, const int32_t* pos, const DeviceRope* rope,
               int64_t heads, int64_t rows, int64_t dim, float* dw) {
  if (!dw || rows <= 0) return;
  const int64_t rpc = std::max<int64_t>(64, (rows + 511) / 512);
  const int64_t nch = (rows + rpc - 1) / rpc;
  Scratch part(static_cast<size_t>(nch * dim) * sizeof(double));
  const dim3 grid(static_cast<unsigned>((dim + 31) / 32), static_cast<unsigned>(nch)), block(32, 8);
  TWINKLE_LAUNCH(k_dw_partial, grid, block, 0, x, rstd, dy, pos, rope ? rope->cos : nullptr,
                                                     rope ? rope->sin : nullptr, heads, rows, dim, rpc,
                                                     part.as<double>());
  TWINKLE_CUDA_LAUNCHED("norm dw partial");
  TWINKLE_LAUNCH(k_dw_finish, static_cast<unsigned>((dim + 127) / 128), 128, 0, part.as<double>(), nch, dim, dw);
  TWINKLE_CUDA_LAUNCHED("norm dw finish");
}

}  // namespace

void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps) {
  if (rows <= 0 || dim <= 0) return;
  TWINKLE_LAUNCH(k_rms_fwd, static_cast<unsigned>(rows), kRowThreads, 0, x, nullptr, nullptr, w, y, rstd, dim,
                                                                               eps);
  TWINKLE_CUDA_LAUNCHED("rmsnorm_forward");
}

void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                      int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  dw_reduce(x, rstd, dy, nullptr, nullptr, 1, rows, dim, dw);  // before dx: dx may alias dy
  TWINKLE_LAUNCH(k_rms_bwd, static_cast<unsigned>(rows), kRowThreads, 0, x, w, rstd, dy, nullptr, dx, dim);
  TWINKLE_CUDA_LAUNCHED("rmsnorm_backward");
}

void add_rmsnorm_forward(const float* x, const float* r, float* h, const float* w, float* y, float* rstd,
                         int64_t rows, int64_t dim, float eps) {
  if (rows <= 0 || dim <= 0) return;
  TWINKLE_LAUNCH(k_rms_fwd, static_cast<unsigned>(rows), kRowThreads, 0, x, r, h, w, y, rstd, dim, eps);
  TWINKLE_CUDA_LAUNCHED("add_rmsnorm_forward");
}

void add_rmsnorm_backward(const float* h, const float* w, const float* rstd, const float* dy, const float* dres,
                          float* dh, float* dw, int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  dw_reduce(h, rstd, dy, nullptr, nullptr, 1, rows, dim, dw);  // before dh: dh may alias dy or dres
  TWINKLE_LAUNCH(k_rms_bwd, static_cast<unsigned>(rows), kRowThreads, 0, h, w, rstd, dy, dres, dh, dim);
  TWINKLE_CUDA_LAUNCHED("add_rmsnorm_backward");
}

void rope_forward(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim) {
  const DeviceRope d = rope_args("rope_forward", pos, t, tokens, head_dim);
  const int64_t n = tokens * heads * (head_dim / 2);
  if (n <= 0) return;
  TWINKLE_LAUNCH(k_rope, grid_for(n), 256, 0, x, pos, d.cos, d.sin, tokens, heads, head_dim / 2, 1.0f);
  TWINKLE_CUDA_LAUNCHED("rope_forward");
}

void rope_backward(float* dx, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads,
                   int64_t head_dim) {
  const DeviceRope d = rope_args("rope_backward", pos, t, tokens, head_dim);
  const int64_t n = tokens * heads * (head_dim / 2);
  if (n <= 0) return;
  TWINKLE_LAUNCH(k_rope, grid_for(n), 256, 0, dx, pos, d.cos, d.sin, tokens, heads, head_dim / 2, -1.0f);
  TWINKLE_CUDA_LAUNCHED("rope_backward");
}

void qk_norm_rope_forward(const float* x, const float* w, float* y, float* rstd, const int32_t* pos,
                          const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim, float eps) {
  const DeviceRope d = rope_args("qk_norm_rope_forward", pos, t, tokens, head_dim);
  const int64_t rows = tokens * heads;
  if (rows <= 0) return;
  TWINKLE_LAUNCH(k_qk_norm_rope_fwd, static_cast<unsigned>(rows), kRowThreads, 0, x, w, y, rstd, pos, d.cos,
                                                                                        d.sin, heads, head_dim, eps);
  TWINKLE_CUDA_LAUNCHED("qk_norm_rope_forward");
}

void qk_norm_rope_backward(const float* x, const float* w, const float* rstd, const int32_t* pos, const RopeTable& t,
                           const float* dy, float* dx, float* dw, int64_t tokens, int64_t heads, int64_t head_dim) {
  const DeviceRope d = rope_args("qk_norm_rope_backward", pos, t, tokens, head_dim);
  const int64_t rows = tokens * heads;
  if (rows <= 0) return;
  dw_reduce(x, rstd, dy, pos, &d, heads, rows, head_dim, dw);  // before dx: dx may alias dy
  TWINKLE_LAUNCH(k_qk_norm_rope_bwd, static_cast<unsigned>(rows), kRowThreads, 0, x, w, rstd, pos, d.cos, d.sin,
                                                                                        dy, dx, heads, head_dim);
  TWINKLE_CUDA_LAUNCHED("qk_norm_rope_backward");
}

}  // namespace twinkle::cuda::ops
