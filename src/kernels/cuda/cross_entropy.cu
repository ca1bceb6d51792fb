// CUDA token cross entropy in Megatron's vocab-parallel pieces (VocabParallelCrossEntropy,
// megatron/core/tensor_parallel/cross_entropy.py) and the single-shard forward
// (torch.nn.functional.cross_entropy(reduction="sum", ignore_index=-100)); semantics of
// twinkle/kernels/cpu/cross_entropy.h. One block per row; sums of exponentials in double; the loss is
// summed on the host in row order (as the CPU kernel).
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kThreads = 256;
constexpr int32_t kIgnore = -100;

__device__ float block_max(float v) {
  __shared__ float sh[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = sh[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, sh[w]);
  return m;
}
__device__ double block_sum(double v) {
  __shared__ double sh[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) s += sh[w];
  return s;
}

__device__ float row_max(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, x[j]);
  return block_max(m);
}
__device__ double row_sumexp(const float* x, int64_t n, float mx) {
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += static_cast<double>(expf(x[j] - mx));
  return block_sum(s);
}

__global__ void k_local_max(const float* logits, int64_t Vl, int64_t valid, float* out) {
  const float m = row_max(logits + blockIdx.x * Vl, valid);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}

__global__ void k_local_sumexp_target(const float* logits, const int32_t* labels, const float* gmax, int64_t Vl,
                                      int64_t valid, int64_t vstart, float* sum_exp, float* target) {
  const int64_t t = blockIdx.x;
  const float* x = logits + t * Vl;
  const double s = row_sumexp(x, valid, gmax[t]);
  if (threadIdx.x == 0) {
    sum_exp[t] = static_cast<float>(s);
    const int64_t lab = labels[t];
    target[t] = (lab != kIgnore && lab >= vstart && lab < vstart + valid) ? x[lab - vstart] : 0.0f;
  }
}

// d = scale * (exp(x - lse) - onehot) for j < valid, 0 beyond; whole row 0 for an ignored label.
// row_scale == nullptr: the constant `cscale`. d may alias x (element-wise).
__global__ void k_ce_backward(const float* logits, const int32_t* labels, const float* lse, int64_t Vl, int64_t valid,
                              int64_t vstart, const float* row_scale, float cscale, float* dlogits) {
  const int64_t t = blockIdx.x;
  const float* x = logits + t * Vl;
  float* d = dlogits + t * Vl;
  const int64_t lab = labels[t];
  const bool ign = lab == kIgnore;
  const float sc = row_scale ? row_scale[t] : cscale;
  const float l = lse[t];
  const int64_t hit = (!ign && lab >= vstart && lab < vstart + valid) ? lab - vstart : -1;
  for (int64_t j = threadIdx.x; j < Vl; j += blockDim.x) {
    float v = 0.0f;
    if (!ign && j < valid) {
      v = sc * expf(x[j] - l);
      if (j == hit) v -= sc;
    }
    d[j] = v;
  }
}

// lse[t] = max + log(sumexp); row_loss[t] = lse - x[label] (double; 0 for ignored rows).
__global__ void k_ce_forward_rows(const float* logits, const int32_t* labels, int64_t V, float* lse, double* row_loss) {
  const int64_t t = blockIdx.x;
  const float* x = logits + t * V;
  const float mx = row_max(x, V);
  const double s = row_sumexp(x, V, mx);
  if (threadIdx.x == 0) {
    const double l = static_cast<double>(mx) + log(s);
    lse[t] = static_cast<float>(l);
    const int32_t lab = labels[t];
    row_loss[t] = (lab != kIgnore && lab >= 0 && lab < V) ? l - static_cast<double>(x[lab]) : 0.0;
  }
}

__global__ void k_check_labels(const int32_t* labels, int64_t T, int64_t V, int* first_bad) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < T;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t l = labels[t];
    if (l != kIgnore && (l < 0 || l >= V)) atomicMin(first_bad, static_cast<int>(t));
  }
}

unsigned rows_grid(int64_t T) {
  check(T < (int64_t{1} << 31), "cross entropy (cuda): more than 2^31 rows");
  return static_cast<unsigned>(T);
}

}  // namespace

void ce_local_max(const float* logits, int64_t T, int64_t Vl, int64_t valid, float* row_max_out) {
  if (T <= 0) return;
  TWINKLE_LAUNCH(k_local_max, rows_grid(T), kThreads, 0, logits, Vl, valid, row_max_out);
  TWINKLE_CUDA_LAUNCHED("ce_local_max");
}

void ce_local_sumexp_target(const float* logits, const int32_t* labels, const float* global_max, int64_t T,
                            int64_t Vl, int64_t valid, int64_t vstart, float* sum_exp, float* target_logit) {
  if (T <= 0) return;
  TWINKLE_LAUNCH(k_local_sumexp_target, rows_grid(T), kThreads, 0, logits, labels, global_max, Vl, valid, vstart,
                                                                         sum_exp, target_logit);
  TWINKLE_CUDA_LAUNCHED("ce_local_sumexp_target");
}

void ce_backward(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl, int64_t valid,
                 int64_t vstart, const float* row_scale, float* dlogits) {
  if (T <= 0) return;
  TWINKLE_LAUNCH(k_ce_backward, rows_grid(T), kThreads, 0, logits, labels, lse, Vl, valid, vstart, row_scale,
                                                                 1.0f, dlogits);
  TWINKLE_CUDA_LAUNCHED("ce_backward");
}

void ce_backward_const(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t V,
                       float scale, float* dlogits) {
  if (T <= 0) return;
  TWINKLE_LAUNCH(k_ce_backward, rows_grid(T), kThreads, 0, logits, labels, lse, V, V, 0, nullptr, scale,
                                                                 dlogits);
  TWINKLE_CUDA_LAUNCHED("ce_backward (constant scale)");
}

void check_labels(const int32_t* labels, int64_t T, int64_t V, const char* fn) {
  if (T <= 0) return;
  int* flag = static_cast<int*>(allocator().allocate(sizeof(int)));
  int bad = INT_MAX;
  try {
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(flag, &bad, sizeof(int), cudaMemcpyHostToDevice, detail::stream()));
    const int64_t b = std::min<int64_t>((T + 255) / 256, 4096);
    TWINKLE_LAUNCH(k_check_labels, static_cast<unsigned>(b), 256, 0, labels, T, V, flag);
    TWINKLE_CUDA_LAUNCHED("label check");
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(&bad, flag, sizeof(int), cudaMemcpyDeviceToHost, detail::stream()));
    TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  } catch (...) {
    allocator().deallocate(flag);
    throw;
  }
  allocator().deallocate(flag);
  if (bad != INT_MAX) {
    int32_t l = 0;
    TWINKLE_CUDA_CHECK(cudaMemcpy(&l, labels + bad, sizeof(int32_t), cudaMemcpyDeviceToHost));
    throw Error(std::string(fn) + ": label " + std::to_string(l) + " of row " + std::to_string(bad) +
                " is outside [0, " + std::to_string(V) + ") and is not -100");
  }
}

void ce_forward_rows(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse, double* row_loss) {
  if (T <= 0) return;
  TWINKLE_LAUNCH(k_ce_forward_rows, rows_grid(T), kThreads, 0, logits, labels, V, lse, row_loss);
  TWINKLE_CUDA_LAUNCHED("cross_entropy_forward rows");
}

double cross_entropy_forward(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse) {
  if (T <= 0) return 0.0;
  check_labels(labels, T, V, "cross_entropy_forward");
  auto* rl = static_cast<double*>(allocator().allocate(static_cast<size_t>(T) * sizeof(double)));
  std::vector<double> host(static_cast<size_t>(T));
  try {
    ce_forward_rows(logits, labels, T, V, lse, rl);
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(host.data(), rl, host.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                       detail::stream()));
    TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  } catch (...) {
    allocator().deallocate(rl);
    throw;
  }
  allocator().deallocate(rl);
  double loss = 0.0;  // row order, as the CPU kernel
  for (double v : host) loss += v;
  return loss;
}

}  // namespace twinkle::cuda::ops
