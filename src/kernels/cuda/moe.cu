// The CUDA MoeRouterOp, MoePermuteOp and MoeRouterLossOp (twinkle/kernels/ops.h): transformers'
// Qwen3MoeSparseMoeBlock top-k softmax router, Megatron-core's permute / unpermute order (moe_utils.py) and
// the router losses' statistics, with the semantics of twinkle/kernels/cpu/moe_router.h, moe_permute.h and
// moe_aux_loss.h. Each kernel runs the CPU kernel's loop (src/kernels/cpu/moe_*.cpp) for one token, row,
// slot or expert per thread, with the same operations in the same order (float exponentials and products,
// double sums), so in the host emulation the results are the CPU fused set's bit for bit
// (tests/unit/kernels/kernel_conformance.cpp, CudaMoe) — except where the host compiler fuses one of the CPU
// kernels' multiply-adds into an FMA (GCC's default -ffp-contract=fast with an FMA -march: the router
// backward's products, the unpermute's weighted sum, the z-loss sum of squares), which moves those outputs by
// about an ulp. On a GPU, expf / exp / log and nvcc's own FMA contraction make the floating outputs differ from
// the CPU's by ulps; the routing plan, the copies and the order-defined sums stay exact.
// Host arrays of the contract stay on the host: sort_by_expert's counts and routing_stats' prob_sum / counts
// are copied back (those two calls synchronize), aux_loss_backward's counts are uploaded to scratch first.
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../moe_router_row.h"
#include "../moe_routing_check.h"
#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kThreads = 128;

unsigned blocks_for(int64_t n) { return grid_stride_blocks(n, kThreads); }

// for (i = this thread's first index; i < n; i += the grid's threads)
#define TWINKLE_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ bool real_token(const uint8_t* mask, int64_t t) { return !mask || mask[t] != 0; }

// ---------------------------------------------------------------- router: one thread per token

// cpu::moe_router_forward's row (src/kernels/moe_router_row.h), one thread per token.
__global__ void k_router_fwd(const float* __restrict__ logits, float* __restrict__ probs,
                             int32_t* __restrict__ topk_idx, float* __restrict__ topk_w, int64_t T, int64_t E,
                             int64_t k, bool norm) {
  TWINKLE_GRID_STRIDE(t, T) {
    kernels::detail::moe_route_row(logits + t * E, probs + t * E, topk_idx + t * k, topk_w + t * k, E, k, norm);
  }
}

// The gradient of the selected probability j from dtopk_w (0 without it): through w_j = p_j / s when
// norm_topk_prob, dp_j = (dw_j - sum_i dw_i w_i) / s, else dw_j (cpu::moe_router_backward's ds_j).
__device__ __forceinline__ double slot_grad(const float* dw, int64_t j, bool norm, double dotw, double s) {
  if (!dw) return 0.0;
  return norm ? (dw[j] - dotw) / s : static_cast<double>(dw[j]);
}

// cpu::moe_router_backward's loop. The selected slots' gradient ds_j (the CPU kernel's per-token buffer)
// is recomputed where it is used, from the same operands: no per-thread array, any k.
// dlogits may alias dprobs or dlogits_extra (same row, read before written): no __restrict__ on those.
__global__ void k_router_bwd(const float* __restrict__ probs, const int32_t* __restrict__ topk_idx,
                             const float* __restrict__ topk_w, const float* __restrict__ dtopk_w, const float* dprobs,
                             const float* dlogits_extra, float* dlogits, int64_t T, int64_t E, int64_t k, bool norm) {
  TWINKLE_GRID_STRIDE(t, T) {
    const float* p = probs + t * E;
    const int32_t* idx = topk_idx + t * k;
    const float* w = topk_w + t * k;
    const float* dw = dtopk_w ? dtopk_w + t * k : nullptr;
    double s = 0.0, dotw = 0.0;
    if (dw && norm) {
      for (int64_t j = 0; j < k; ++j) s += p[idx[j]];
      for (int64_t j = 0; j < k; ++j) dotw += static_cast<double>(dw[j]) * w[j];
    }
    double dot = 0.0;
    const float* dpr = dprobs ? dprobs + t * E : nullptr;
    if (dpr)
      for (int64_t e = 0; e < E; ++e) dot += static_cast<double>(dpr[e]) * p[e];
    for (int64_t j = 0; j < k; ++j) dot += slot_grad(dw, j, norm, dotw, s) * p[idx[j]];
    float* dl = dlogits + t * E;
    const float* ex = dlogits_extra ? dlogits_extra + t * E : nullptr;
    for (int64_t e = 0; e < E; ++e) {
      const double dpe = dpr ? dpr[e] : 0.0;
      const double extra = ex ? ex[e] : 0.0;
      dl[e] = static_cast<float>(p[e] * (dpe - dot) + extra);
    }
    for (int64_t j = 0; j < k; ++j) dl[idx[j]] += static_cast<float>(p[idx[j]] * slot_grad(dw, j, norm, dotw, s));
  }
}

// ---------------------------------------------------------------- sort by expert
// Deterministic and simple rather than fast: one thread per expert scans every slot in order (O(E T k) work
// in E threads). A faster device sort would histogram the experts per block in shared memory, take one
// exclusive scan of the per-block counts (CUB's DeviceScan) and place each block's slots at its offsets
// (or use a stable radix sort by expert, as CUB's DeviceRadixSort::SortPairs): the same plan, in parallel.

// The first token (lowest index) whose experts are out of [0, E) or repeat, into *first_bad (atomicMin).
__global__ void k_check_routing(const int32_t* __restrict__ topk_idx, int64_t T, int64_t k, int64_t E,
                                int* first_bad) {
  TWINKLE_GRID_STRIDE(t, T) {
    const int32_t* idx = topk_idx + t * k;
    bool bad = false;
    for (int64_t j = 0; j < k; ++j) {
      bad |= idx[j] < 0 || idx[j] >= E;
      for (int64_t i = 0; i < j; ++i) bad |= idx[i] == idx[j];
    }
    if (bad) atomicMin(first_bad, static_cast<int>(t));
  }
}

// counts[e] = slots routed to e.
__global__ void k_count_experts(const int32_t* __restrict__ topk_idx, int64_t R, int64_t E,
                                int64_t* __restrict__ counts) {
  TWINKLE_GRID_STRIDE(e, E) {
    int64_t c = 0;
    for (int64_t s = 0; s < R; ++s) c += topk_idx[s] == e;
    counts[e] = c;
  }
}

// Expert e's rows start at sum_{f<e} counts[f]; its slots take them in ascending slot (= token) order.
__global__ void k_place_slots(const int32_t* __restrict__ topk_idx, const int64_t* __restrict__ counts, int64_t R,
                              int64_t E, int32_t* __restrict__ row_of_slot, int32_t* __restrict__ slot_of_row) {
  TWINKLE_GRID_STRIDE(e, E) {
    int64_t r = 0;
    for (int64_t f = 0; f < e; ++f) r += counts[f];
    for (int64_t s = 0; s < R; ++s)
      if (topk_idx[s] == e) {
        row_of_slot[s] = static_cast<int32_t>(r);
        slot_of_row[r] = static_cast<int32_t>(s);
        ++r;
      }
  }
}

// ---------------------------------------------------------------- permute / unpermute

// out[r, h] = x[slot_of_row[r] / k, h]: one thread per element.
__global__ void k_permute_fwd(const float* __restrict__ x, const int32_t* __restrict__ slot_of_row,
                              float* __restrict__ out, int64_t rows, int64_t k, int64_t H) {
  TWINKLE_GRID_STRIDE(i, rows * H) {
    const int64_t r = i / H, h = i - r * H;
    out[i] = x[(slot_of_row[r] / k) * H + h];
  }
}

__global__ void k_permute_keys(const uint64_t* __restrict__ key, const int32_t* __restrict__ slot_of_row,
                               uint64_t* __restrict__ out, int64_t rows, int64_t k) {
  TWINKLE_GRID_STRIDE(r, rows) out[r] = key[slot_of_row[r] / k];
}

// dx[t, h] (= 0, or its value when accumulating) += dout[row_of_slot[t*k + j], h] for j in order, in float:
// one thread per element, a gather (no atomics).
__global__ void k_permute_bwd(const float* __restrict__ dout, const int32_t* __restrict__ row_of_slot,
                              float* __restrict__ dx, int64_t T, int64_t k, int64_t H, bool accumulate) {
  TWINKLE_GRID_STRIDE(i, T * H) {
    const int64_t t = i / H, h = i - t * H;
    float d = accumulate ? dx[i] : 0.0f;
    for (int64_t j = 0; j < k; ++j) d += dout[static_cast<int64_t>(row_of_slot[t * k + j]) * H + h];
    dx[i] = d;
  }
}

// out[t, h] = sum_j topk_w[t, j] * y[row_of_slot[t*k + j], h] (j in order, float): one thread per element.
__global__ void k_unpermute_fwd(const float* __restrict__ y, const int32_t* __restrict__ row_of_slot,
                                const float* __restrict__ topk_w, float* __restrict__ out, int64_t T, int64_t k,
                                int64_t H) {
  TWINKLE_GRID_STRIDE(i, T * H) {
    const int64_t t = i / H, h = i - t * H;
    float o = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      o += topk_w[t * k + j] * y[static_cast<int64_t>(row_of_slot[t * k + j]) * H + h];
    out[i] = o;
  }
}

// dy[row_of_slot[s], h] = topk_w[s] * dout[s / k, h]: one thread per element of the R = T*k slots.
__global__ void k_unpermute_bwd_dy(const int32_t* __restrict__ row_of_slot, const float* __restrict__ topk_w,
                                   const float* __restrict__ dout, float* __restrict__ dy, int64_t R, int64_t k,
                                   int64_t H) {
  TWINKLE_GRID_STRIDE(i, R * H) {
    const int64_t s = i / H, h = i - s * H;
    dy[static_cast<int64_t>(row_of_slot[s]) * H + h] = topk_w[s] * dout[(s / k) * H + h];
  }
}

// dtopk_w[s] = <dout[s / k], y[row_of_slot[s]]>, h in order in double: one thread per slot. (The CPU kernel's
// `omp simd` reduction may sum in vector-lane partials instead; the float*float products are exact in double,
// so the two sums differ only by double roundings, which the final float rounding hides unless a sum lies
// within them of a float rounding boundary.)
__global__ void k_unpermute_bwd_dw(const float* __restrict__ y, const int32_t* __restrict__ row_of_slot,
                                   const float* __restrict__ dout, float* __restrict__ dtopk_w, int64_t R, int64_t k,
                                   int64_t H) {
  TWINKLE_GRID_STRIDE(s, R) {
    const float* g = dout + (s / k) * H;
    const float* src = y + static_cast<int64_t>(row_of_slot[s]) * H;
    double dot = 0.0;
    for (int64_t h = 0; h < H; ++h) dot += static_cast<double>(g[h]) * src[h];
    dtopk_w[s] = static_cast<float>(dot);
  }
}

// ---------------------------------------------------------------- router losses

// One thread per expert over the real tokens in order: prob_sum[e] (starting from the host's value, uploaded:
// the CPU kernel adds each token to it) += probs[t, e] in double; counts[e] = slots routed to e (from 0).
// Thread 0 also counts the real tokens into *n.
__global__ void k_routing_stats(const float* __restrict__ probs, const int32_t* __restrict__ topk_idx,
                                const uint8_t* __restrict__ mask, int64_t T, int64_t E, int64_t k,
                                double* __restrict__ prob_sum, int64_t* __restrict__ counts, int64_t* __restrict__ n) {
  TWINKLE_GRID_STRIDE(e, E) {
    double ps = prob_sum[e];
    int64_t c = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!real_token(mask, t)) continue;
      ps += probs[t * E + e];
      for (int64_t j = 0; j < k; ++j) c += topk_idx[t * k + j] == e;
    }
    prob_sum[e] = ps;
    counts[e] = c;
    if (e == 0) {
      int64_t m = 0;
      for (int64_t t = 0; t < T; ++t) m += real_token(mask, t) ? 1 : 0;
      *n = m;
    }
  }
}

// dprobs[t, e] += float(coeff_scale * counts[e]) for the real tokens: one thread per element.
__global__ void k_aux_bwd(const int64_t* __restrict__ counts, const uint8_t* __restrict__ mask, int64_t T, int64_t E,
                          double coeff_scale, float* __restrict__ dprobs) {
  TWINKLE_GRID_STRIDE(i, T * E) {
    const int64_t t = i / E, e = i - t * E;
    if (real_token(mask, t)) dprobs[i] += static_cast<float>(coeff_scale * static_cast<double>(counts[e]));
  }
}

// lse[t] = max + log(sum_e exp(double(x_e) - max)) (double); sq[t] = lse^2 for a real token, else 0 (summed
// on the host in token order, as the CPU kernel's reduction at one thread). One thread per token.
__global__ void k_z_fwd(const float* __restrict__ logits, const uint8_t* __restrict__ mask, int64_t T, int64_t E,
                        float* __restrict__ lse, double* __restrict__ sq) {
  TWINKLE_GRID_STRIDE(t, T) {
    const float* x = logits + t * E;
    float mx = x[0];
    for (int64_t e = 1; e < E; ++e) mx = mx < x[e] ? x[e] : mx;  // std::max(mx, x[e])
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += exp(static_cast<double>(x[e]) - mx);
    const double l = mx + log(s);
    lse[t] = static_cast<float>(l);
    sq[t] = real_token(mask, t) ? l * l : 0.0;
  }
}

// dlogits[t, e] += float(2 * scale * lse[t] * probs[t, e]) for the real tokens: one thread per element.
__global__ void k_z_bwd(const float* __restrict__ probs, const float* __restrict__ lse,
                        const uint8_t* __restrict__ mask, int64_t T, int64_t E, double scale,
                        float* __restrict__ dlogits) {
  TWINKLE_GRID_STRIDE(i, T * E) {
    const int64_t t = i / E;
    if (!real_token(mask, t)) continue;
    const double c = 2.0 * scale * lse[t];
    dlogits[i] += static_cast<float>(c * probs[i]);
  }
}

#undef TWINKLE_GRID_STRIDE

void check_router_sizes(const char* fn, int64_t T, int64_t E, int64_t k) {
  if (T < 0 || E < 1 || k < 1 || k > E)
    throw Error(std::string(fn) + ": need T >= 0, E >= 1 and 1 <= k <= E, got T=" + std::to_string(T) +
                " E=" + std::to_string(E) + " k=" + std::to_string(k));
}

// The CPU kernel's message for token t's experts idx [k] (host), which the device check found bad.
[[noreturn]] void throw_bad_routing(const int32_t* idx, int64_t t, int64_t k, int64_t E) {
  kernels::detail::check_token_routing(idx, t, k, E);
  throw Error("moe_sort_by_expert: token " + std::to_string(t) + " has a bad routing");  // not reached
}

}  // namespace

void moe_router_forward(const float* logits, float* probs, int32_t* topk_idx, float* topk_w, int64_t T, int64_t E,
                        int64_t k, bool norm_topk_prob) {
  check_router_sizes("moe_router_forward", T, E, k);
  if (T == 0) return;
  TWINKLE_LAUNCH(k_router_fwd, blocks_for(T), kThreads, 0, logits, probs, topk_idx, topk_w, T, E, k, norm_topk_prob);
  TWINKLE_CUDA_LAUNCHED("moe_router_forward");
}

void moe_router_backward(const float* probs, const int32_t* topk_idx, const float* topk_w, const float* dtopk_w,
                         const float* dprobs, const float* dlogits_extra, float* dlogits, int64_t T, int64_t E,
                         int64_t k, bool norm_topk_prob) {
  check_router_sizes("moe_router_backward", T, E, k);
  if (T == 0) return;
  TWINKLE_LAUNCH(k_router_bwd, blocks_for(T), kThreads, 0, probs, topk_idx, topk_w, dtopk_w, dprobs, dlogits_extra,
                 dlogits, T, E, k, norm_topk_prob);
  TWINKLE_CUDA_LAUNCHED("moe_router_backward");
}

void moe_sort_by_expert(const int32_t* topk_idx, int64_t T, int64_t k, int64_t E, int64_t* counts,
                        int32_t* row_of_slot, int32_t* slot_of_row) {
  if (T < 0 || k < 1 || E < 1 || k > E)
    throw Error("moe_sort_by_expert: need T >= 0, E >= 1 and 1 <= k <= E, got T=" + std::to_string(T) +
                " k=" + std::to_string(k) + " E=" + std::to_string(E));
  check(T * k < (int64_t{1} << 31) && T < INT_MAX, "moe_sort_by_expert (cuda): more than 2^31 slots");
  const int64_t R = T * k;
  // device scratch: the counts [E] (i64), then the first bad token (int); one copy back, one synchronize
  Scratch scratch(static_cast<size_t>(E) * sizeof(int64_t) + sizeof(int));
  int64_t* dcounts = scratch.as<int64_t>();
  int* first_bad = reinterpret_cast<int*>(dcounts + E);
  const int none = INT_MAX;
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(first_bad, &none, sizeof(int), cudaMemcpyHostToDevice, detail::stream()));
  if (T > 0) {
    TWINKLE_LAUNCH(k_check_routing, blocks_for(T), kThreads, 0, topk_idx, T, k, E, first_bad);
    TWINKLE_CUDA_LAUNCHED("moe_sort_by_expert check");
  }
  // out-of-range slots are counted nowhere and duplicates twice within R rows: both kernels stay in bounds
  // on a bad plan, which is then reported below
  TWINKLE_LAUNCH(k_count_experts, blocks_for(E), kThreads, 0, topk_idx, R, E, dcounts);
  TWINKLE_CUDA_LAUNCHED("moe_sort_by_expert count");
  TWINKLE_LAUNCH(k_place_slots, blocks_for(E), kThreads, 0, topk_idx, dcounts, R, E, row_of_slot, slot_of_row);
  TWINKLE_CUDA_LAUNCHED("moe_sort_by_expert place");
  std::vector<char> host(static_cast<size_t>(E) * sizeof(int64_t) + sizeof(int));
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(host.data(), scratch.p, host.size(), cudaMemcpyDeviceToHost, detail::stream()));
  TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  int bad = 0;
  std::memcpy(&bad, host.data() + E * sizeof(int64_t), sizeof(int));
  if (bad != INT_MAX) {
    std::vector<int32_t> idx(static_cast<size_t>(k));
    TWINKLE_CUDA_CHECK(cudaMemcpy(idx.data(), topk_idx + static_cast<int64_t>(bad) * k, idx.size() * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost));
    throw_bad_routing(idx.data(), bad, k, E);
  }
  std::memcpy(counts, host.data(), static_cast<size_t>(E) * sizeof(int64_t));
}

void moe_permute_forward(const float* x, const int32_t* slot_of_row, float* out, int64_t rows, int64_t k, int64_t H) {
  if (rows <= 0 || H <= 0) return;
  TWINKLE_LAUNCH(k_permute_fwd, blocks_for(rows * H), kThreads, 0, x, slot_of_row, out, rows, k, H);
  TWINKLE_CUDA_LAUNCHED("moe_permute_forward");
}

void moe_permute_backward(const float* dout, const int32_t* row_of_slot, float* dx, int64_t T, int64_t k, int64_t H,
                          bool accumulate) {
  if (T <= 0 || H <= 0) return;
  TWINKLE_LAUNCH(k_permute_bwd, blocks_for(T * H), kThreads, 0, dout, row_of_slot, dx, T, k, H, accumulate);
  TWINKLE_CUDA_LAUNCHED("moe_permute_backward");
}

void moe_unpermute_forward(const float* y, const int32_t* row_of_slot, const float* topk_w, float* out, int64_t T,
                           int64_t k, int64_t H) {
  if (T <= 0 || H <= 0) return;
  TWINKLE_LAUNCH(k_unpermute_fwd, blocks_for(T * H), kThreads, 0, y, row_of_slot, topk_w, out, T, k, H);
  TWINKLE_CUDA_LAUNCHED("moe_unpermute_forward");
}

void moe_unpermute_backward(const float* y, const int32_t* row_of_slot, const float* topk_w, const float* dout,
                            float* dy, float* dtopk_w, int64_t T, int64_t k, int64_t H) {
  const int64_t R = T * k;
  if (R <= 0) return;
  if (H > 0) {
    TWINKLE_LAUNCH(k_unpermute_bwd_dy, blocks_for(R * H), kThreads, 0, row_of_slot, topk_w, dout, dy, R, k, H);
    TWINKLE_CUDA_LAUNCHED("moe_unpermute_backward dy");
  }
  TWINKLE_LAUNCH(k_unpermute_bwd_dw, blocks_for(R), kThreads, 0, y, row_of_slot, dout, dtopk_w, R, k, H);
  TWINKLE_CUDA_LAUNCHED("moe_unpermute_backward dtopk_w");
}

void moe_permute_keys(const uint64_t* key, const int32_t* slot_of_row, uint64_t* out, int64_t rows, int64_t k) {
  if (rows <= 0) return;
  TWINKLE_LAUNCH(k_permute_keys, blocks_for(rows), kThreads, 0, key, slot_of_row, out, rows, k);
  TWINKLE_CUDA_LAUNCHED("moe_permute_keys");
}

int64_t moe_routing_stats(const float* probs, const int32_t* topk_idx, const uint8_t* token_mask, int64_t T,
                          int64_t E, int64_t k, double* prob_sum, int64_t* counts) {
  if (E <= 0) return 0;
  // device scratch: prob_sum [E] (f64, uploaded), counts [E] (i64), the real tokens (i64); one copy each way
  const size_t bytes = static_cast<size_t>(E) * (sizeof(double) + sizeof(int64_t)) + sizeof(int64_t);
  Scratch scratch(bytes);
  double* dsum = scratch.as<double>();
  int64_t* dcounts = reinterpret_cast<int64_t*>(dsum + E);
  int64_t* dn = dcounts + E;
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(dsum, prob_sum, static_cast<size_t>(E) * sizeof(double), cudaMemcpyHostToDevice,
                                     detail::stream()));
  TWINKLE_LAUNCH(k_routing_stats, blocks_for(E), kThreads, 0, probs, topk_idx, token_mask, T, E, k, dsum, dcounts, dn);
  TWINKLE_CUDA_LAUNCHED("moe_routing_stats");
  std::vector<char> host(bytes);
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(host.data(), scratch.p, bytes, cudaMemcpyDeviceToHost, detail::stream()));
  TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream()));
  std::memcpy(prob_sum, host.data(), static_cast<size_t>(E) * sizeof(double));
  const char* c = host.data() + E * sizeof(double);
  for (int64_t e = 0; e < E; ++e) {
    int64_t v = 0;
    std::memcpy(&v, c + e * sizeof(int64_t), sizeof(int64_t));
    counts[e] += v;
  }
  int64_t n = 0;
  std::memcpy(&n, c + E * sizeof(int64_t), sizeof(int64_t));
  return n;
}

void moe_aux_loss_backward(const int64_t* counts, const uint8_t* token_mask, int64_t T, int64_t E,
                           double coeff_scale, float* dprobs) {
  if (T <= 0 || E <= 0) return;
  Scratch dcounts(static_cast<size_t>(E) * sizeof(int64_t));  // counts are host values: uploaded
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(dcounts.p, counts, static_cast<size_t>(E) * sizeof(int64_t),
                                     cudaMemcpyHostToDevice, detail::stream()));
  TWINKLE_LAUNCH(k_aux_bwd, blocks_for(T * E), kThreads, 0, dcounts.as<int64_t>(), token_mask, T, E, coeff_scale,
                 dprobs);
  TWINKLE_CUDA_LAUNCHED("moe_aux_loss_backward");
}

double moe_z_loss_forward(const float* logits, const uint8_t* token_mask, int64_t T, int64_t E, float* lse) {
  if (T <= 0) return 0.0;
  Scratch sq(static_cast<size_t>(T) * sizeof(double));
  TWINKLE_LAUNCH(k_z_fwd, blocks_for(T), kThreads, 0, logits, token_mask, T, E, lse, sq.as<double>());
  TWINKLE_CUDA_LAUNCHED("moe_z_loss_forward");
  return sum_row_losses(sq.as<double>(), T);  // token order on the host (synchronizes)
}

void moe_z_loss_backward(const float* probs, const float* lse, const uint8_t* token_mask, int64_t T, int64_t E,
                         double scale, float* dlogits) {
  if (T <= 0 || E <= 0) return;
  TWINKLE_LAUNCH(k_z_bwd, blocks_for(T * E), kThreads, 0, probs, lse, token_mask, T, E, scale, dlogits);
  TWINKLE_CUDA_LAUNCHED("moe_z_loss_backward");
}

}  // namespace twinkle::cuda::ops
