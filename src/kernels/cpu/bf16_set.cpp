// The CPU "bf16" kernel set: the GEMM ops with bf16 inputs and fp32 accumulation
// (twinkle/kernels/cpu/bf16_ops.h) and attention with the fp32 forward and the bf16 backward
// (twinkle/kernels/cpu/attention_bf16.h), registered per op.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/attention_block.h"
#include "twinkle/kernels/cpu/attention_bf16.h"
#include "twinkle/kernels/cpu/bf16_ops.h"
#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/gemm_bf16.h"
#include "twinkle/kernels/cpu/swiglu.h"
#include "twinkle/kernels/registry.h"

namespace twinkle::kernels::cpu {

void gate_up_swiglu_forward_bf16(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I,
                                 int64_t H) {
  linear_forward_bf16(X, Wgu, gu, T, 2 * I, H);
  swiglu_forward_rows(gu, 2 * I, gu + I, 2 * I, a, I, T, I);
}

void gate_up_swiglu_backward_bf16(const float* X, const float* Wgu, const float* gu, const float* da, float* /*dgu*/,
                                  float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx) {
  // d(gu) goes straight to bf16 (the GEMMs' operand) through an L2-sized fp32 block of rows instead of
  // a [T, 2I] fp32 buffer written and read back: the same fp32 values (swiglu_backward_rows), rounded
  // by the same f32_to_bf16_rne as linear_backward_bf16 would; the fp32 dgu scratch is left untouched.
  uint16_t* dgub = bf16_scratch(ScratchSlot::Grad, T * 2 * I);
  constexpr int64_t kRows = 8;
  const int64_t nb = (T + kRows - 1) / kRows;
#pragma omp parallel if (nb > 1 && T * I > 65536)
  {
    thread_local std::vector<float> blk;  // grow-only, per thread
    if (blk.size() < static_cast<size_t>(kRows * 2 * I)) blk.resize(static_cast<size_t>(kRows * 2 * I));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t r0 = b * kRows, rn = std::min(kRows, T - r0);
      // the block's work stays on this thread: no nested region (OMP_MAX_ACTIVE_LEVELS > 1 oversubscribes)
      swiglu_backward_rows_serial(gu + r0 * 2 * I, 2 * I, gu + r0 * 2 * I + I, 2 * I, da + r0 * I, I, blk.data(),
                                  2 * I, blk.data() + I, 2 * I, rn, I);
      f32_to_bf16_rne_serial(blk.data(), dgub + r0 * 2 * I, rn * 2 * I);
    }
  }
  linear_backward_bf16_dy(X, Wgu, dgub, dX, dWgu, T, 2 * I, H, accumulate_dx);
}

namespace {

// fp32 -> bf16 in place: element i's bf16 lands at byte 2i, below its fp32 at byte 4i, so a sequential
// pass in blocks (each block read whole before it is written) never overwrites an unread value.
void f32_to_bf16_inplace(float* buf, int64_t n) {
  constexpr int64_t kBlock = 4096;
  uint16_t tmp[kBlock];
  auto* out = reinterpret_cast<uint16_t*>(buf);
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t b = std::min(kBlock, n - i0);
    f32_to_bf16_rne(buf + i0, tmp, b);
    std::memcpy(out + i0, tmp, static_cast<size_t>(b) * 2);
  }
}

}  // namespace

double linear_cross_entropy_bf16(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V,
                                 int64_t H, float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows) {
  // Half the fp32 kernel's rows per chunk (chunk_rows is an upper bound): the fp32 logits buffer is the
  // largest transient of the step, and halving it pays for the bf16 copies, so that the bf16 step's peak
  // memory stays below the fp32 step's (bench/README.md "bf16 mixed precision").
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>((chunk_rows > 0 ? chunk_rows : 1024) / 2, T));
  // W is rounded in blocks of vocab rows (a [vb, H] bf16 block, not the whole [V, H] copy: the tied
  // embedding of a 150k vocab would need 300 MB more), once for the logits and once for the backward.
  const int64_t vb = std::min<int64_t>(V, 4096);
  thread_local std::vector<float> logits, scale;  // grow-only, kept between calls
  if (logits.size() < static_cast<size_t>(chunk * V)) logits.resize(static_cast<size_t>(chunk * V));
  if (scale.size() < static_cast<size_t>(chunk)) scale.resize(static_cast<size_t>(chunk));
  uint16_t* wbp = bf16_scratch(ScratchSlot::Weight, vb * H);  // shared with the linear ops' scratch
  uint16_t* xbp = bf16_scratch(ScratchSlot::Input, chunk * H);
  double loss = 0.0;
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c = std::min(chunk, T - c0);
    f32_to_bf16_rne(X + c0 * H, xbp, c * H);
    for (int64_t v0 = 0; v0 < V; v0 += vb) {  // logits[:, v0:v0+n] = bf16(X) bf16(W[v0:v0+n])^T
      const int64_t n = std::min(vb, V - v0);
      f32_to_bf16_rne(W + v0 * H, wbp, n * H);
      bgemm(false, true, c, n, H, xbp, H, wbp, H, 0.0f, logits.data() + v0, V);
    }
    loss += cross_entropy_forward(logits.data(), labels + c0, c, V, lse + c0);
    if (dX) {
      std::fill(scale.begin(), scale.begin() + c, grad_scale);
      ce_backward(logits.data(), labels + c0, lse + c0, c, V, V, 0, scale.data(), logits.data());
      f32_to_bf16_inplace(logits.data(), c * V);  // xbp still holds bf16(X) of this chunk  // the gradient as bf16 rows of stride V
      const auto* g = reinterpret_cast<const uint16_t*>(logits.data());
      for (int64_t v0 = 0; v0 < V; v0 += vb) {
        const int64_t n = std::min(vb, V - v0);
        f32_to_bf16_rne(W + v0 * H, wbp, n * H);
        bgemm(false, false, c, H, n, g + v0, V, wbp, H, v0 == 0 ? 0.0f : 1.0f, dX + c0 * H, H);
        if (dW) bgemm(true, false, n, H, c, g + v0, V, xbp, H, 1.0f, dW + v0 * H, H);
      }
    }
  }
  return loss;
}

void grouped_linear_forward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                                 float* Y, int64_t N, int64_t K, bool accumulate) {
  if (E < 0 || N < 1 || K < 1 || w_stride < N * K)
    throw Error("grouped_linear_forward: need E >= 0, N, K >= 1 and w_stride >= N*K, got E=" + std::to_string(E) +
                " N=" + std::to_string(N) + " K=" + std::to_string(K) + " w_stride=" + std::to_string(w_stride));
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = counts[e];
    if (m < 0) throw Error("grouped_linear_forward: counts[" + std::to_string(e) + "] = " + std::to_string(m) + " < 0");
    if (m > 0) linear_forward_bf16(X + row * K, W + e * w_stride, Y + row * N, m, N, K, accumulate);
    row += m;
  }
}

void grouped_linear_backward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts,
                                  int64_t E, const float* dY, float* dX, float* dW, int64_t N, int64_t K,
                                  bool accumulate_dx) {
  if (E < 0 || N < 1 || K < 1 || w_stride < N * K)
    throw Error("grouped_linear_backward: need E >= 0, N, K >= 1 and w_stride >= N*K, got E=" + std::to_string(E) +
                " N=" + std::to_string(N) + " K=" + std::to_string(K) + " w_stride=" + std::to_string(w_stride));
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = counts[e];
    if (m < 0)
      throw Error("grouped_linear_backward: counts[" + std::to_string(e) + "] = " + std::to_string(m) + " < 0");
    if (m > 0)
      linear_backward_bf16(X + row * K, W + e * w_stride, dY + row * N, dX ? dX + row * K : nullptr,
                           dW ? dW + e * w_stride : nullptr, m, N, K, accumulate_dx);
    row += m;
  }
}

void register_bf16_kernels(Registry& r) {
  const std::string dev = "cpu", name = "bf16";
  r.add(dev, name, LinearOp{linear_forward_bf16, linear_backward_bf16});
  r.add(dev, name, GateUpSwigluOp{gate_up_swiglu_forward_bf16, gate_up_swiglu_backward_bf16, false});
  r.add(dev, name, LinearCrossEntropyOp{linear_cross_entropy_bf16});
  r.add(dev, name, GroupedLinearOp{grouped_linear_forward_bf16, grouped_linear_backward_bf16});
  r.add(dev, name, AttentionOp{flash_attention_forward, flash_attention_backward_bf16});
  // ring attention's block backward rounds at the same points (context parallelism in bf16)
  r.add(dev, name, AttentionBlockOp{attention_block_forward, attention_block_backward_bf16, attention_lse_merge,
                                    attention_softmax_delta});
}

}  // namespace twinkle::kernels::cpu
