// CUDA element-wise and reduction ops: add, scale, sum of squares (grad norm), AdamW, SwiGLU,
// embedding. Semantics: the CPU kernels of twinkle/kernels/cpu/reduce.h, adamw.h (torch.optim.AdamW,
// _single_tensor_adamw), swiglu.h (HF Qwen3MLP act_fn = SiLU) and embedding.h (torch.nn.Embedding /
// Megatron VocabParallelEmbedding); same fp32 element math, same double scalar factors.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n, int64_t per_block = kThreads) { return grid_stride_blocks(n, per_block); }

// y[r, c] += b[c]: one thread per element.
__global__ void k_add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) y[i] += b[i % cols];
}

// db[c] += sum_r dy[r, c]: one thread per column, the rows in order in double (the CPU sets' sums,
// bit for bit); adjacent threads read adjacent columns of a row.
__global__ void k_bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double s = 0.0;
  for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + c];
  db[c] += static_cast<float>(s);
}

__global__ void k_add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}
__global__ void k_add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}
__global__ void k_scale(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] *= s;
}

// Pass 1: one double partial per block of kSumBlock elements (fixed blocks: the result does not depend
// on the launch geometry); pass 2: one block sums the partials in a fixed tree order.
constexpr int64_t kSumBlock = 8192;
__global__ void k_sumsq_partial(const float* x, int64_t n, double* part) {
  __shared__ double sh[kThreads];
  const int64_t b0 = blockIdx.x * kSumBlock, b1 = min(n, b0 + kSumBlock);
  double s = 0.0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}
__global__ void k_sum_doubles(const double* part, int64_t np, double* out) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < np; i += blockDim.x) s += part[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

struct AdamFactors {
  float b1, b2, one_m_b1, one_m_b2, decay, step_size, bias2_sqrt, eps, grad_scale;
};
__global__ void k_adamw(float* p, const float* g, float* m, float* v, int64_t n, AdamFactors f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = __fmul_rn(g[i], f.grad_scale);
    const float mi = __fadd_rn(__fmul_rn(f.b1, m[i]), __fmul_rn(f.one_m_b1, gi));
    const float vi = __fadd_rn(__fmul_rn(f.b2, v[i]), __fmul_rn(__fmul_rn(f.one_m_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), f.bias2_sqrt), f.eps);
    p[i] = __fsub_rn(__fmul_rn(p[i], f.decay), __fmul_rn(f.step_size, __fdiv_rn(mi, denom)));
  }
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// h = silu(gate) * up on a rows x cols block of strided rows (flat: rows = 1, cols = n).
__global__ void k_swiglu_fwd(const float* g, int64_t ldg, const float* u, int64_t ldu, float* h, int64_t ldh,
                             int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    const float gi = g[r * ldg + c];
    h[r * ldh + c] = gi * sigmoidf_(gi) * u[r * ldu + c];
  }
}
// dgate = dh * up * s * (1 + gate * (1 - s)) = dh * up * (s + silu * (1 - s)); dup = dh * silu.
__global__ void k_swiglu_bwd(const float* g, int64_t ldg, const float* u, int64_t ldu, const float* dh, int64_t lddh,
                             float* dg, int64_t lddg, float* du, int64_t lddu, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    const float gi = g[r * ldg + c], ui = u[r * ldu + c], d = dh[r * lddh + c];
    const float s = sigmoidf_(gi), silu = gi * s;
    dg[r * lddg + c] = d * ui * (s + silu * (1.0f - s));  // element-wise: aliasing gate / dh is safe
    du[r * lddu + c] = d * silu;
  }
}

// out[t, :] = table[ids[t] - vstart, :] inside the shard, zeros outside. One block per token.
__global__ void k_embedding_fwd(const float* table, const int32_t* ids, float* out, int64_t H, int64_t vstart,
                                int64_t Vl) {
  const int64_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(ids[t]) - vstart;
  const bool in = row >= 0 && row < Vl;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) out[t * H + j] = in ? table[row * H + j] : 0.0f;
}
// Deterministic scatter-add without atomics: the block of token t does the work only when t is the FIRST
// token with its id; it marks the later tokens with that id in a bit mask (shared memory, one bit per
// token) and sums their dout rows in token order (the CPU kernel's order), adding the sum to dtable once.
// Without room for the mask (T > kMaskTokens) it rescans the ids per column instead (slower, same result).
constexpr int64_t kMaskTokens = 48 * 1024 * 8;  // 48 KiB of shared memory
__global__ void k_embedding_bwd(const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H,
                                int64_t vstart, int64_t Vl) {
  TWINKLE_DYN_SMEM(uint32_t, mask);
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const int64_t row = static_cast<int64_t>(id) - vstart;
  if (row < 0 || row >= Vl) return;  // uniform over the block
  int earlier = 0;
  for (int64_t s = threadIdx.x; s < t; s += blockDim.x) earlier |= ids[s] == id;
  if (__syncthreads_or(earlier)) return;
  const bool use_mask = T <= kMaskTokens;
  const int64_t w0 = t / 32, nw = (T + 31) / 32;
  if (use_mask) {
    for (int64_t w = w0 + threadIdx.x; w < nw; w += blockDim.x) {
      uint32_t bits = 0;
      for (int b = 0; b < 32; ++b) {
        const int64_t s = w * 32 + b;
        if (s >= t && s < T && ids[s] == id) bits |= 1u << b;
      }
      mask[w] = bits;
    }
    __syncthreads();
  }
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    float acc = 0.0f;
    if (use_mask) {
      for (int64_t w = w0; w < nw; ++w)
        for (uint32_t bits = mask[w]; bits; bits &= bits - 1) acc += dout[(w * 32 + __ffs(bits) - 1) * H + j];
    } else {
      for (int64_t s = t; s < T; ++s)
        if (ids[s] == id) acc += dout[s * H + j];
    }
    dtable[row * H + j] += acc;
  }
}

// The shortest decimal that round-trips the float (0.999f -> 0.999), as the CPU AdamW (adamw.h).
double decimal_of(float x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf) - 1, x);
  if (res.ec != std::errc()) return x;
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace

void add_inplace(float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  TWINKLE_LAUNCH(k_add_inplace, blocks_for(n), kThreads, 0, y, x, n);
  TWINKLE_CUDA_LAUNCHED("add_inplace");
}

void add(float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  TWINKLE_LAUNCH(k_add, blocks_for(n), kThreads, 0, out, a, b, n);
  TWINKLE_CUDA_LAUNCHED("add");
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  TWINKLE_LAUNCH(k_add_bias_rows, blocks_for(rows * cols), kThreads, 0, y, b, rows, cols);
  TWINKLE_CUDA_LAUNCHED("add_bias_rows");
}

void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols) {
  if (db == nullptr || rows <= 0 || cols <= 0) return;
  TWINKLE_LAUNCH(k_bias_grad_rows, blocks_for(cols), kThreads, 0, dy, db, rows, cols);
  TWINKLE_CUDA_LAUNCHED("bias_grad_rows");
}

void scale(float* x, int64_t n, float s) {
  if (n <= 0) return;
  TWINKLE_LAUNCH(k_scale, blocks_for(n), kThreads, 0, x, n, s);
  TWINKLE_CUDA_LAUNCHED("scale");
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t np = (n + kSumBlock - 1) / kSumBlock;
  auto& a = allocator();
  auto* part = static_cast<double*>(a.allocate(static_cast<size_t>(np + 1) * sizeof(double)));
  double out = 0.0;
  try {
    TWINKLE_LAUNCH(k_sumsq_partial, static_cast<unsigned>(np), kThreads, 0, x, n, part);
    TWINKLE_CUDA_LAUNCHED("sum_squares partial");
    TWINKLE_LAUNCH(k_sum_doubles, 1, kThreads, 0, part, np, part + np);
    TWINKLE_CUDA_LAUNCHED("sum_squares final");
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(&out, part + np, sizeof(double), cudaMemcpyDeviceToHost, detail::stream()));
    TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  } catch (...) {
    a.deallocate(part);
    throw;
  }
  a.deallocate(part);
  return out;
}

void swiglu_forward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* h, int64_t ld_h,
                         int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  TWINKLE_LAUNCH(k_swiglu_fwd, blocks_for(rows * cols), kThreads, 0, gate, ld_gate, up, ld_up, h, ld_h, rows,
                                                                            cols);
  TWINKLE_CUDA_LAUNCHED("swiglu_forward");
}

void swiglu_backward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, const float* dh,
                          int64_t ld_dh, float* dgate, int64_t ld_dgate, float* dup, int64_t ld_dup, int64_t rows,
                          int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  TWINKLE_LAUNCH(k_swiglu_bwd, blocks_for(rows * cols), kThreads, 0, gate, ld_gate, up, ld_up, dh, ld_dh, dgate,
                                                                            ld_dgate, dup, ld_dup, rows, cols);
  TWINKLE_CUDA_LAUNCHED("swiglu_backward");
}

void swiglu_forward(const float* gate, const float* up, float* h, int64_t n) {
  swiglu_forward_rows(gate, n, up, n, h, n, 1, n);
}

void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  swiglu_backward_rows(gate, n, up, n, dh, n, dgate, n, dup, n, 1, n);
}

void embedding_forward(const float* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t vstart,
                       int64_t Vl) {
  if (T <= 0 || H <= 0) return;
  TWINKLE_LAUNCH(k_embedding_fwd, static_cast<unsigned>(T), 128, 0, table, ids, out, H, vstart, Vl);
  TWINKLE_CUDA_LAUNCHED("embedding_forward");
}

void embedding_backward(const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H, int64_t vstart,
                        int64_t Vl) {
  if (T <= 0 || H <= 0) return;
  const size_t shmem = T <= kMaskTokens ? static_cast<size_t>((T + 31) / 32) * 4 : 0;
  TWINKLE_LAUNCH(k_embedding_bwd, static_cast<unsigned>(T), 128, shmem, dout, ids, dtable, T, H, vstart, Vl);
  TWINKLE_CUDA_LAUNCHED("embedding_backward");
}

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float grad_scale) {
  check(step >= 1, "adamw_step (cuda): step must be >= 1 (1-based), got " + std::to_string(step));
  if (n <= 0) return;
  const double b1 = decimal_of(beta1), b2 = decimal_of(beta2);
  AdamFactors f;
  f.b1 = beta1;
  f.b2 = beta2;
  f.one_m_b1 = static_cast<float>(1.0 - b1);
  f.one_m_b2 = static_cast<float>(1.0 - b2);
  f.decay = static_cast<float>(1.0 - decimal_of(lr) * decimal_of(weight_decay));
  f.step_size = static_cast<float>(decimal_of(lr) / (1.0 - std::pow(b1, static_cast<double>(step))));
  f.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(step))));
  f.eps = eps;
  f.grad_scale = grad_scale;
  TWINKLE_LAUNCH(k_adamw, blocks_for(n), kThreads, 0, p, g, m, v, n, f);
  TWINKLE_CUDA_LAUNCHED("adamw");
}

}  // namespace twinkle::cuda::ops
