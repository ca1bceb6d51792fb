#include "twinkle/kernels/cpu/linear_cross_entropy.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ce_rows.h"
#include "transpose16.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/gemm.h"

namespace twinkle::kernels::cpu {

namespace {

// Vocab columns per block. A block of the logits is a [rows, 512] matrix of its own (2 MiB for 1024
// rows, in L3): right after its GEMM each row is replaced by exp(logit - r) in one pass, r the row's
// reference (step 0; one exp per logit, summed as one float partial sum, ce_rows::kSumBlock); in the
// backward the block is scaled to dlogits (exp(r - lse) per row) into the thread's dlogits buffer,
// which feeds the dX and dW GEMMs right away: the [rows, V] logits are written once and read once (the
// scaled copy is never written back to DRAM), never read by the GEMMs from DRAM. (Measured on config a:
// the logits GEMM writing straight into the store and exp in place beats a cache-resident GEMM output
// streamed to the store with non-temporal stores by 2-4 %; in the backward the separate dlogits buffer
// and scaling in place time the same at one thread, and the buffer spares DRAM the write-back.)
constexpr int64_t kVocabBlock = ce_rows::kSumBlock;
constexpr int64_t kParWork = 32768;  // logits elements below which one thread does the chunk
constexpr int64_t kSlabs = 16;       // at most this many dX partial sums in the backward (each [rows, H])
constexpr int64_t kSlabBytes = 16 << 20;  // ... and at most about this many bytes of them
constexpr int64_t kDwRows = 256;          // dW^T is made [kDwRows, 512] at a time (512 KiB: stays in L2 for any H)

struct Sizes {
  int64_t chunk, nblk, nslab;
};

Sizes sizes(int64_t T, int64_t V, int64_t H, int64_t chunk_rows) {
  Sizes z;
  z.chunk = std::max<int64_t>(1, std::min<int64_t>(chunk_rows > 0 ? chunk_rows : 1024, T));
  z.nblk = (V + kVocabBlock - 1) / kVocabBlock;
  z.nslab = std::min(z.nblk, std::clamp<int64_t>(kSlabBytes / (4 * z.chunk * H), 2, kSlabs));
  return z;
}

struct Scratch {  // grow-only, kept between calls (one per calling thread)
  // the chunk's logits, then exp(logit - r); one [chunk, 512] dlogits block per thread; per-block row
  // references r and sums; each row's label logit; each row's starting reference; dX partial sums; the
  // chunk's X^T and one [min(H, 256), 512] dW^T tile per thread
  std::vector<float> logits, dlogits, bref, bsum, target, ref, dx_part, xt, dwt;
  std::vector<double> row_loss;
};

// First block of slab k of n over nblk blocks. Slab sizes fall linearly (weights n, n-1, ..., 1): taken
// in order by dynamic scheduling, the last slabs are small, so the threads finish close together.
int64_t slab_start(int64_t k, int64_t n, int64_t nblk) {
  const int64_t w = k * n - k * (k - 1) / 2, total = n * (n + 1) / 2;
  return nblk * w / total;
}

template <class T>
T* grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

}  // namespace

double linear_cross_entropy(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H,
                            float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows) {
  for (int64_t t = 0; t < T; ++t)
    if (labels[t] != kIgnoreIndex && (labels[t] < 0 || labels[t] >= V))
      throw Error("linear_cross_entropy: label " + std::to_string(labels[t]) + " of row " + std::to_string(t) +
                  " is outside [0, " + std::to_string(V) + ") and is not -100");
  const Sizes z = sizes(T, V, H, chunk_rows);
  const int64_t chunk = z.chunk, nblk = z.nblk, nslab = z.nslab;
  thread_local Scratch s;
  float* buf = grow(s.logits, chunk * V);
  float* bref = grow(s.bref, nblk * chunk);
  float* bsum = grow(s.bsum, nblk * chunk);
  float* target = grow(s.target, chunk);
  float* ref = grow(s.ref, chunk);
  double* row_loss = grow(s.row_loss, chunk);
  // Blocks are spread over the threads dynamically (a thread preempted on a shared machine does not hold
  // the others up); each block's GEMMs run on one thread (oneDNN runs single-threaded inside a parallel
  // region): no fork/join per block. The backward sums dX over a fixed set of slabs of consecutive
  // blocks (slab_start), each into its own buffer, added in slab order: the result depends neither on
  // the thread count nor on timing.
  const bool par = nblk > 1 && chunk * V > kParWork && omp_get_max_threads() > 1 && !omp_in_parallel();
  const int nthr = par ? std::min<int>(omp_get_max_threads(), static_cast<int>(nblk)) : 1;
  // Per-thread buffers of the backward (a region whose if clause is false has one thread, number 0).
  auto own = [&](float* all, int64_t per_thread) { return all + omp_get_thread_num() * per_thread; };
  float* dlogits_all = dX ? grow(s.dlogits, nthr * chunk * kVocabBlock) : nullptr;
  float* part = dX && nslab > 1 ? grow(s.dx_part, (nslab - 1) * chunk * H) : nullptr;
  // dW: the chunk's X^T [H, chunk] and one [min(H, 256), 512] tile of dW^T per thread (see step 3)
  const int64_t dw_rows = std::min(H, kDwRows);
  float* xt = dX && dW ? grow(s.xt, H * chunk) : nullptr;
  float* dwt_all = dX && dW ? grow(s.dwt, nthr * dw_rows * kVocabBlock) : nullptr;
  double loss = 0.0;
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c = std::min(chunk, T - c0);
    const float* Xc = X + c0 * H;
    const int32_t* lab = labels + c0;
    // Block b: columns [b*512, b*512 + n) of the chunk's logits, stored as its own [c, n] matrix.
    auto block = [&](int64_t b, int64_t& v0, int64_t& n) {
      v0 = b * kVocabBlock;
      n = std::min(kVocabBlock, V - v0);
      return buf + v0 * c;
    };
    // 0. each row's reference for the exp pass: its label's logit (column 0's for an ignored row), a value
    //    of the row, so not above its maximum, and near it for any model that predicts its labels at all
    for (int64_t t = 0; t < c; ++t) {
      const float* x = Xc + t * H;
      const float* w = W + (lab[t] == kIgnoreIndex ? 0 : static_cast<int64_t>(lab[t])) * H;
      float d = 0.0f;
#pragma omp simd reduction(+ : d)
      for (int64_t h = 0; h < H; ++h) d += x[h] * w[h];
      ref[t] = d;
    }
    // 1. logits block by block; each row replaced by exp(logit - r) while it is in cache, in one pass:
    //    r is the row's reference, or the block row's max where a logit exceeds it by more than 32
    //    (ce_rows::row_exp_inplace_sum_ref). Against a separate max pass, one read of the block fewer.
#pragma omp parallel for schedule(dynamic, 2) num_threads(nthr) if (par)
    for (int64_t b = 0; b < nblk; ++b) {
      int64_t v0, n;
      float* Y = block(b, v0, n);
      sgemm(false, true, c, n, H, 1.0f, Xc, H, W + v0 * H, H, 0.0f, Y, n);
      for (int64_t t = 0; t < c; ++t) {
        float* y = Y + t * n;
        const int64_t l = lab[t];
        if (l >= v0 && l < v0 + n) target[t] = y[l - v0];
        float r = ref[t];
        bsum[b * c + t] = static_cast<float>(ce_rows::row_exp_inplace_sum_ref(y, n, r));  // y = exp(logit - r)
        bref[b * c + t] = r;
      }
    }
    // 2. lse = M + log(sum_b sum_b' exp(r_b - M)), M the largest reference, in double
#pragma omp parallel for schedule(static) num_threads(nthr) if (par)
    for (int64_t t = 0; t < c; ++t) {
      float M = -std::numeric_limits<float>::infinity();
      for (int64_t b = 0; b < nblk; ++b) M = std::max(M, bref[b * c + t]);
      double S = 0.0;
      for (int64_t b = 0; b < nblk; ++b)
        S += static_cast<double>(bsum[b * c + t]) *
             std::exp(static_cast<double>(bref[b * c + t]) - static_cast<double>(M));
      const double l = static_cast<double>(M) + std::log(S);
      lse[c0 + t] = static_cast<float>(l);
      row_loss[t] = lab[t] != kIgnoreIndex ? l - static_cast<double>(target[t]) : 0.0;
    }
    for (int64_t t = 0; t < c; ++t) loss += row_loss[t];  // row order: independent of the thread count
    if (!dX) continue;
    // 3. per block: dlogits = grad_scale * (softmax - onehot) into the block buffer, then dX += dlogits W_b
    //    and dW_b += dlogits^T X while it is hot. dW_b goes through its transpose, X^T dlogits [H, n], in
    //    tiles of 256 rows of H: oneDNN runs that GEMM with both operands plain, 7-9 % faster than dlogits^T X
    //    with the transposed [c, n] operand on hot operands (config a's block); each [256, n] tile (in L2)
    //    is added to dW_b transposed in 16 x 16 register tiles.
    float* dXc = dX + c0 * H;
    if (xt) transpose16::transpose_floats<false>(Xc, c, H, H, xt, c);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr) if (par)
    for (int64_t sl = 0; sl < nslab; ++sl) {
      float* dx = sl == 0 ? dXc : part + (sl - 1) * c * H;
      const int64_t b0 = slab_start(sl, nslab, nblk), b1 = slab_start(sl + 1, nslab, nblk);
      if (b0 == b1) std::fill(dx, dx + c * H, 0.0f);
      float* D = own(dlogits_all, chunk * kVocabBlock);  // the block's dlogits [c, n]
      for (int64_t b = b0; b < b1; ++b) {
        int64_t v0, n;
        const float* Y = block(b, v0, n);
        for (int64_t t = 0; t < c; ++t) {
          float* d = D + t * n;
          const int64_t l = lab[t];
          if (l == kIgnoreIndex) {
            std::fill(d, d + n, 0.0f);
            continue;
          }
          // softmax = exp(logit - r) * exp(r - lse), the first factor stored by the forward
          const double f = std::exp(static_cast<double>(bref[b * c + t]) - static_cast<double>(lse[c0 + t]));
          ce_rows::row_scale_to(Y + t * n, d, n, static_cast<float>(static_cast<double>(grad_scale) * f));
          if (l >= v0 && l < v0 + n) d[l - v0] -= grad_scale;
        }
        sgemm(false, false, c, H, n, 1.0f, D, n, W + v0 * H, H, b == b0 ? 0.0f : 1.0f, dx, H);
        if (dW) {
          float* dwt = own(dwt_all, dw_rows * kVocabBlock);
          for (int64_t h0 = 0; h0 < H; h0 += dw_rows) {  // dW_b[:, h0:h0+hn] += (X^T[h0:h0+hn] D)^T
            const int64_t hn = std::min(dw_rows, H - h0);
            sgemm(false, false, hn, n, c, 1.0f, xt + h0 * c, c, D, n, 0.0f, dwt, n);
            transpose16::transpose_floats<true>(dwt, hn, n, n, dW + v0 * H + h0, H);
          }
        }
      }
    }
    if (nslab > 1) {
#pragma omp parallel for schedule(static) num_threads(nthr) if (par)
      for (int64_t i = 0; i < c * H; ++i)
        for (int64_t k = 1; k < nslab; ++k) dXc[i] += part[(k - 1) * c * H + i];
    }
  }
  return loss;
}

int64_t linear_cross_entropy_scratch_bytes(int64_t T, int64_t V, int64_t H, int64_t chunk_rows, bool backward,
                                           bool with_dw, int threads) {
  const Sizes z = sizes(T, V, H, chunk_rows);
  threads = z.nblk > 1 && z.chunk * V > kParWork ? static_cast<int>(std::clamp<int64_t>(threads, 1, z.nblk)) : 1;
  int64_t b = 4 * (z.chunk * V + 2 * z.nblk * z.chunk + 2 * z.chunk) + 8 * z.chunk;
  if (backward && z.nslab > 1) b += 4 * (z.nslab - 1) * z.chunk * H;
  if (backward) b += 4 * threads * z.chunk * kVocabBlock;                                   // dlogits blocks
  if (backward && with_dw) b += 4 * (H * z.chunk + threads * std::min(H, kDwRows) * kVocabBlock);  // X^T, dW^T tiles
  return b;
}

}  // namespace twinkle::kernels::cpu
