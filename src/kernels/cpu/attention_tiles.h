// src/kernels/cpu/attention_tiles.h (internal) — the tile bookkeeping shared by the fp32 and the bf16
// flash-attention kernels (attention.cpp, attention_bf16.cpp): tile size, causal / sliding-window
// visibility, the online-softmax rows (base 2) and the backward's P / dS rows, grow-only scratch.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/vmath.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu::attention_tiles {

constexpr int64_t kB = 64;  // query tile = key tile
constexpr float kLog2e = 1.44269504088896341f;
constexpr double kLn2 = 0.69314718055994530942;

inline int64_t rup16(int64_t x) { return (x + 15) & ~int64_t{15}; }

// Grow-only, 64-byte aligned scratch. Fresh pages cost microseconds each to fault in on the target
// machines, so every buffer of these kernels is reused across calls (thread_local: one set per
// calling thread and per OpenMP worker; memory is held until the thread exits).
struct Scratch {
  float* p = nullptr;
  size_t cap = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(p); }
  // n floats; zeroed when `zero` (else contents unspecified)
  float* get(size_t n, bool zero) {
    if (n > cap) {
      std::free(p);
      const size_t bytes = ((std::max<size_t>(n, 16) * sizeof(float) + 63) / 64) * 64;
      p = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      cap = bytes / sizeof(float);
    }
    if (zero) std::memset(p, 0, n * sizeof(float));
    return p;
  }
};

inline void validate(const char* fn, const int32_t* cu, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D) {
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

// number of keys of key tile [k0, k0+kn) visible to the query at segment offset qpos
inline int64_t visible(int64_t qpos, int64_t k0, int64_t kn) { return std::min(kn, qpos - k0 + 1); }
// first column of key tile [k0, k0+kn) inside the sliding window of the query at qpos (keys
// qpos-window+1 .. qpos; window 0 = no window)
inline int64_t window_lo(int64_t qpos, int64_t k0, int64_t kn, int64_t window) {
  return window > 0 ? std::clamp<int64_t>(qpos - window + 1 - k0, 0, kn) : 0;
}
// first key tile any query of the tile starting at q0 sees
inline int64_t first_key_tile(int64_t q0, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, q0 - window + 1) / kB : 0;
}

// s[c] <- 2^(s[c]*c2 - mx) for c < n, and 0 for c in [n, rup16(n)); returns the sum.
// (Rows have room for rup16(n) columns.)
inline float exp2_row(float* s, int64_t n, float c2, float mx) {
#ifdef __AVX512F__
  const __m512 cv = _mm512_set1_ps(c2), mv = _mm512_set1_ps(mx);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k = vmath::tail_mask(n - c);
    const __m512 p = _mm512_maskz_mov_ps(k, vmath::exp2_16(_mm512_fmsub_ps(_mm512_loadu_ps(s + c), cv, mv)));
    _mm512_storeu_ps(s + c, p);
    acc = _mm512_add_ps(acc, p);
  }
  alignas(64) float t[16];
  _mm512_store_ps(t, acc);
  float sum = 0.0f;
  for (float x : t) sum += x;
  return sum;
#else
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < n; ++c) {
    const float p = vmath::exp2(s[c] * c2 - mx);
    s[c] = p;
    sum += p;
  }
  for (int64_t c = n; c < rup16(n); ++c) s[c] = 0.0f;
  return sum;
#endif
}

// p[c] <- 2^(p[c]*c2 - l2), ds[c] <- p[c] * (ds[c] - dl) for c < n; both 0 in [n, rup16(n)).
inline void prob_dscore_row(float* p, float* ds, int64_t n, float c2, float l2, float dl) {
#ifdef __AVX512F__
  const __m512 cv = _mm512_set1_ps(c2), lv = _mm512_set1_ps(l2), dv = _mm512_set1_ps(dl);
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k = vmath::tail_mask(n - c);
    const __m512 pv = _mm512_maskz_mov_ps(k, vmath::exp2_16(_mm512_fmsub_ps(_mm512_loadu_ps(p + c), cv, lv)));
    _mm512_storeu_ps(p + c, pv);
    _mm512_storeu_ps(ds + c, _mm512_maskz_mul_ps(k, pv, _mm512_sub_ps(_mm512_loadu_ps(ds + c), dv)));
  }
#else
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    const float pc = vmath::exp2(p[c] * c2 - l2);
    p[c] = pc;
    ds[c] = pc * (ds[c] - dl);
  }
  for (int64_t c = n; c < rup16(n); ++c) p[c] = 0.0f, ds[c] = 0.0f;
#endif
}

// ---------------------------------------------------------------- backward

// delta[i] = sum_d dO*O (FlashAttention-2's D_i) and lse2[i] = lse in log2 units, for the rows
// i = t*Hq + h of the tokens [T0, T0+Tn) (out, dout [T][Hq][D]; lse [T][Hq]).
inline void backward_delta(const float* out, const float* dout, const float* lse, int64_t T0, int64_t Tn,
                           int64_t Hq, int64_t D, float* delta, float* lse2) {
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
}

// One task of the backward: key tiles [kt_begin, kt_end) of kv head g in segment seg; cost ~ the
// number of (query tile, key tile) pairs it computes.
struct BwdTask {
  int64_t seg, g, kt_begin, kt_end, cost;
};

// The backward's work list, most expensive first: one task per (segment, kv head) when by_head, else
// one per key tile; with key tiles of one kv head running concurrently, dq_acc's rows of (segment,
// q head, query tile) are guarded by locks[tile_base[seg] + h * n_query_tiles(seg) + qi].
struct BwdSchedule {
  std::vector<BwdTask> tasks;
  bool by_head = false;
  std::vector<int64_t> tile_base;
  std::unique_ptr<std::mutex[]> locks;  // null when by_head
};

// by_head: 1 = per kv head, 0 = per key tile, -1 = choose (per head on one thread, or when there are
// at least two heads per thread and no head costs more than half a thread's share).
inline BwdSchedule backward_schedule(const int32_t* cu, int64_t n_seqs, int64_t Hq, int64_t Hkv, int nthreads,
                                     int by_head) {
  const int64_t group = Hq / Hkv;
  std::vector<BwdTask> per_head, per_tile;
  int64_t total = 0, max_head = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t nt = (cu[s + 1] - cu[s] + kB - 1) / kB;
    if (nt == 0) continue;
    const int64_t c = nt * (nt + 1) / 2 * group;
    for (int64_t g = 0; g < Hkv; ++g) {
      per_head.push_back({s, g, 0, nt, c});
      for (int64_t j = 0; j < nt; ++j) per_tile.push_back({s, g, j, j + 1, (nt - j) * group});
      total += c;
      max_head = std::max(max_head, c);
    }
  }
  BwdSchedule r;
  r.by_head = by_head >= 0 ? by_head == 1
                           : nthreads == 1 || (static_cast<int64_t>(per_head.size()) >= 2 * nthreads &&
                                               2 * max_head * nthreads <= total);
  r.tasks = std::move(r.by_head ? per_head : per_tile);
  std::stable_sort(r.tasks.begin(), r.tasks.end(), [](const BwdTask& a, const BwdTask& b) { return a.cost > b.cost; });
  r.tile_base.assign(static_cast<size_t>(n_seqs) + 1, 0);
  for (int64_t s = 0; s < n_seqs; ++s) r.tile_base[s + 1] = r.tile_base[s] + (cu[s + 1] - cu[s] + kB - 1) / kB * Hq;
  if (!r.by_head) r.locks.reset(new std::mutex[std::max<int64_t>(1, r.tile_base[n_seqs])]);
  return r;
}

inline void zero_prefix(float* x, int64_t rows, int64_t row_len) {
  if (rows > 0) std::memset(x, 0, static_cast<size_t>(rows * row_len) * sizeof(float));
}

}  // namespace twinkle::kernels::cpu::attention_tiles
