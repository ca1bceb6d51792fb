// bf16 GEMMs with fp32 accumulation through oneDNN's matmul primitive (see twinkle/kernels/cpu/gemm_bf16.h).
#include "twinkle/kernels/cpu/gemm_bf16.h"

#include <dnnl.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "transpose16.h"

namespace twinkle::kernels::cpu {

namespace {

// Grow-only 64-byte-aligned scratch, one set per thread (kept between calls: no allocation per step).
struct Scratch {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> p;
  size_t bytes = 0;
  void* get(size_t want) {
    if (want > bytes) {
      const size_t b = (want + 63) / 64 * 64;
      p.reset(std::aligned_alloc(64, b));
      if (!p) throw Error("gemm_bf16: cannot allocate " + std::to_string(b) + " bytes of scratch");
      bytes = b;
    }
    return p.get();
  }
};
enum Slot { kX = 0, kW, kDY, kFa, kFb, kPad, kSlots };
thread_local Scratch g_scratch[kSlots];

float* f32_scratch(Slot s, int64_t n) { return static_cast<float*>(g_scratch[s].get(static_cast<size_t>(n) * 4)); }
uint16_t* bf16_scratch(Slot s, int64_t n) { return static_cast<uint16_t*>(g_scratch[s].get(static_cast<size_t>(n) * 2)); }

inline uint16_t rne(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN: keep quiet
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void bf16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

// rows x cols bf16 values at stride ld -> a dense fp32 [rows, cols] copy
void widen_rows(const uint16_t* src, int64_t ld, float* dst, int64_t rows, int64_t cols) {
  if (ld == cols) {
    bf16_to_f32_n(src, dst, rows * cols);
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t u = static_cast<uint32_t>(src[r * ld + c]) << 16;
      std::memcpy(dst + r * cols + c, &u, 4);
    }
}

bool native_now() {
  static const bool native = [] {
    const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    return (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) & bf16) == bf16;
  }();
  return native;
}

// (trans_a, trans_b, M, N, K, lda, ldb, ldc, accumulate, B packed as BA16a64b2a)
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>;
struct Prim {
  dnnl::matmul mm;
  dnnl::memory::desc a, b, c, pad;
  bool brgemm;  // oneDNN chose a brgemm kernel (not its reference loops)
};

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

Prim& primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool acc,
                bool packed_b = false) {
  thread_local std::map<Key, Prim> cache;
  const Key key{ta, tb, M, N, K, lda, ldb, ldc, acc, packed_b};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  using md = dnnl::memory::desc;
  using dt = dnnl::memory::data_type;
  // logical A [M,K], B [K,N], C [M,N]; strides give the stored layout
  md a({M, K}, dt::bf16, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  md b = packed_b ? md({K, N}, dt::bf16, dnnl::memory::format_tag::BA16a64b2a)
                  : md({K, N}, dt::bf16, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  md c({M, N}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // our grow-only buffer, not a malloc per call
  if (acc) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    if (cache.size() > 4096) cache.clear();  // many distinct shapes (MoE expert counts): bound the cache
    const bool brg = std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
    return cache.emplace(key, Prim{dnnl::matmul(pd), a, b, c, pd.scratchpad_desc(), brg}).first->second;
  } catch (const dnnl::error& e) {
    throw Error(std::string("gemm_bf16: oneDNN bf16 matmul primitive for M=") + std::to_string(M) + " N=" +
                std::to_string(N) + " K=" + std::to_string(K) + " failed: " + e.what());
  }
}

constexpr int64_t kPackK = 32, kPackN = 64;  // BA16a64b2a: 32-row (16 pairs) x 64-column blocks
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// One [32 k x 64 n] block of the packed layout (pack_b_bf16 in gemm_bf16.h): rows k0, k0+1, ... of
// B(k, n) = S[k * ld + n], n from n0; rows >= K and columns >= N are written as zeros.
void pack_block(const float* S, int64_t ld, int64_t K, int64_t N, int64_t k0, int64_t n0, uint16_t* d) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  // pair (k, k+1) of 16 columns: vcvtne2ps2bf16 gives [row k | row k+1] as 32 bf16, vpermw interleaves them
  const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t j = 0; j < kPackK / 2; ++j) {
    const int64_t k = k0 + 2 * j;
    for (int64_t s = 0; s < kPackN / 16; ++s) {
      const int64_t n = n0 + 16 * s, left = N - n;
      const __mmask16 m = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      const __m512 r0 = k < K ? _mm512_maskz_loadu_ps(m, S + k * ld + n) : _mm512_setzero_ps();
      const __m512 r1 = k + 1 < K ? _mm512_maskz_loadu_ps(m, S + (k + 1) * ld + n) : _mm512_setzero_ps();
      const __m512bh b = _mm512_cvtne2ps_pbh(r1, r0);
      _mm512_storeu_si512(d + j * 128 + s * 32, _mm512_permutexvar_epi16(pairs, reinterpret_cast<const __m512i&>(b)));
    }
  }
#else
  for (int64_t j = 0; j < kPackK / 2; ++j)
    for (int64_t c = 0; c < kPackN; ++c)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t k = k0 + 2 * j + h, n = n0 + c;
        uint16_t v = 0;
        if (k < K && n < N) {
          uint32_t u;
          std::memcpy(&u, S + k * ld + n, 4);
          v = rne(u);
        }
        d[j * 128 + c * 2 + h] = v;
      }
#endif
}

// The transposed source, B(k, n) = S[n * ld + k], for the 16 columns n0..n0+15 of one 64-column block
// column (d = its first element): row n of S holds column n, its values along k contiguous. Per 32 k
// (one block row): 16 rows rounded to 16 bf16 pairs each (one dword per pair), transposed in registers
// so that pair j of the 16 columns is one 64-byte store. 16 sequential read streams; the block column
// written (Kp x 64 bf16) stays in L2 across the four 16-column passes.
void pack_cols_t(const float* S, int64_t ld, int64_t K, int64_t N, int64_t n0, uint16_t* d) {
  const int64_t Kp = round_up(K, kPackK);
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  for (int64_t k0 = 0; k0 < Kp; k0 += kPackK) {
    const int64_t kl = K - k0;
    const __mmask16 mlo = kl >= 16 ? __mmask16(0xffff) : __mmask16((1u << kl) - 1);
    const __mmask16 mhi = kl >= 32 ? __mmask16(0xffff) : kl <= 16 ? __mmask16(0) : __mmask16((1u << (kl - 16)) - 1);
    __m512i r[16];
    for (int64_t c = 0; c < 16; ++c) {
      if (n0 + c < N) {
        const float* row = S + (n0 + c) * ld + k0;
        const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mhi, row + 16), _mm512_maskz_loadu_ps(mlo, row));
        r[c] = reinterpret_cast<const __m512i&>(b);
      } else {
        r[c] = _mm512_setzero_si512();
      }
    }
    transpose16::transpose16x16_epi32(r);
    uint16_t* o = d + k0 * kPackN;
    for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(o + j * 128, r[j]);
  }
#else
  for (int64_t k = 0; k < Kp; ++k)
    for (int64_t c = 0; c < 16; ++c) {
      const int64_t n = n0 + c;
      uint16_t v = 0;
      if (k < K && n < N) {
        uint32_t u;
        std::memcpy(&u, S + n * ld + k, 4);
        v = rne(u);
      }
      d[(k / 2) * 128 + c * 2 + (k & 1)] = v;
    }
#endif
}

// Whether oneDNN runs a matmul with BA16a64b2a weights on its brgemm bf16 kernels (probed once): the
// packed operand then saves the kernel's own copy of B into that layout (5-10 % of a training GEMM).
bool packed_b_fast() {
  static const bool fast = [] {
    if (!native_now()) return false;
#if !(defined(__AVX512BF16__) && defined(__AVX512F__))
    return false;  // the portable packer loop would cost more than it saves
#else
    try {
      using md = dnnl::memory::desc;
      using dt = dnnl::memory::data_type;
      md a({64, 64}, dt::bf16, dnnl::memory::dims{64, 1});
      md b({64, 64}, dt::bf16, dnnl::memory::format_tag::BA16a64b2a);
      md c({64, 64}, dt::f32, dnnl::memory::dims{64, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), cpu_engine());
      return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
    } catch (const dnnl::error&) {
      return false;
    }
#endif
  }();
  return fast;
}

}  // namespace

int64_t packed_b_elems(int64_t K, int64_t N) { return round_up(K, kPackK) * round_up(N, kPackN); }

void pack_b_bf16(const float* S, int64_t ld, int64_t K, int64_t N, uint16_t* dst) {
  const int64_t Kp = round_up(K, kPackK), nkb = Kp / kPackK, nnb = round_up(N, kPackN) / kPackN;
#pragma omp parallel for collapse(2) schedule(static) if (K * N > 65536)
  for (int64_t kb = 0; kb < nkb; ++kb)
    for (int64_t nb = 0; nb < nnb; ++nb)
      pack_block(S, ld, K, N, kb * kPackK, nb * kPackN, dst + nb * Kp * kPackN + kb * kPackK * kPackN);
}

void pack_bt_bf16(const float* S, int64_t ld, int64_t K, int64_t N, uint16_t* dst) {
  const int64_t Kp = round_up(K, kPackK), ng = round_up(N, kPackN) / 16;
#pragma omp parallel for schedule(static) if (K * N > 65536)
  for (int64_t g = 0; g < ng; ++g)  // 16-column group g: block column g / 4, columns 16 (g % 4)..
    pack_cols_t(S, ld, K, N, 16 * g, dst + (g / 4) * Kp * kPackN + (g % 4) * 32);
}

bool packed_b_native() { return packed_b_fast(); }

void f32_to_bf16_rne_serial(const float* src, uint16_t* dst, int64_t n) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  // vcvtneps2bf16: round to nearest even in one instruction (1.6x the integer sequence); it treats fp32
  // denormal inputs (|x| < 2^-126) as zero, the only inputs where it differs from rne().
  const int64_t nb = n / 16;
  for (int64_t b = 0; b < nb; ++b) {
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + 16 * b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * b), reinterpret_cast<const __m256i&>(r));
  }
  for (int64_t i = 16 * nb; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    dst[i] = rne(u);
  }
#else
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    dst[i] = rne(u);
  }
#endif
}

void f32_to_bf16_rne(const float* src, uint16_t* dst, int64_t n) {
  // element-wise: the blocks (a multiple of 16 values) give the serial function's bits
  constexpr int64_t kBlock = 4096;
  const int64_t nb = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < nb; ++b)
    f32_to_bf16_rne_serial(src + b * kBlock, dst + b * kBlock, std::min(kBlock, n - b * kBlock));
}

std::string dnnl_isa_name() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "isa#" + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa()));
  }
}

bool bf16_gemm_native() { return native_now(); }

uint16_t* bf16_scratch(ScratchSlot slot, int64_t n) {
  return bf16_scratch(slot == ScratchSlot::Input ? kX : slot == ScratchSlot::Weight ? kW : kDY, n);
}

void bgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
           const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (beta != 0.0f && beta != 1.0f) throw Error("bgemm: beta must be 0 or 1, got " + std::to_string(beta));
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, static_cast<size_t>(N) * 4);
    return;
  }
  if (!native_now()) {  // exact emulation: bf16 values widened to fp32, fp32 GEMM
    // Only the operand's rows x cols are widened, into a dense fp32 copy (leading dimension = cols): an
    // operand that is a column block of a wider matrix (the lm head's [rows, vocab] gradient read 4096
    // vocab columns at a time, lda = vocab) must not be widened whole (311 MB more for Qwen3's 151,936
    // vocab on 512 rows; twinkle plan's bf16 model counts these copies, train/plan.cpp).
    const int64_t ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
    float* fa = f32_scratch(kFa, ar * ac);
    float* fb = f32_scratch(kFb, br * bc);
    widen_rows(A, lda, fa, ar, ac);
    widen_rows(B, ldb, fb, br, bc);
    sgemm(trans_a, trans_b, M, N, K, 1.0f, fa, ac, fb, bc, beta, C, ldc);
    return;
  }
  Prim& p = primitive(trans_a, trans_b, M, N, K, lda, ldb, ldc, beta != 0.0f);
  thread_local dnnl::stream s(cpu_engine());
  try {
    dnnl::memory am(p.a, cpu_engine(), const_cast<uint16_t*>(A)), bm(p.b, cpu_engine(), const_cast<uint16_t*>(B)),
        cm(p.c, cpu_engine(), C), pm(p.pad, cpu_engine(), g_scratch[kPad].get(std::max<size_t>(p.pad.get_size(), 64)));
    p.mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, pm}});
    s.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("gemm_bf16: oneDNN bf16 matmul failed: ") + e.what());
  }
}

bool packed_b_fast_for(bool trans_a, int64_t M, int64_t N, int64_t K, int64_t lda, float beta, int64_t ldc) {
  if (!packed_b_fast() || M == 0 || N == 0 || K == 0) return false;
  return primitive(trans_a, false, M, N, K, lda, 0, ldc, beta != 0.0f, true).brgemm;
}

void bgemm_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* Bp,
                    float beta, float* C, int64_t ldc) {
  if (beta != 0.0f && beta != 1.0f) throw Error("bgemm_packed_b: beta must be 0 or 1, got " + std::to_string(beta));
  if (!packed_b_fast())
    throw Error("bgemm_packed_b: this CPU / oneDNN has no fast packed-B bf16 matmul (check packed_b_native() first)");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, static_cast<size_t>(N) * 4);
    return;
  }
  Prim& p = primitive(trans_a, false, M, N, K, lda, 0, ldc, beta != 0.0f, true);
  thread_local dnnl::stream s(cpu_engine());
  try {
    dnnl::memory am(p.a, cpu_engine(), const_cast<uint16_t*>(A)), bm(p.b, cpu_engine(), const_cast<uint16_t*>(Bp)),
        cm(p.c, cpu_engine(), C), pm(p.pad, cpu_engine(), g_scratch[kPad].get(std::max<size_t>(p.pad.get_size(), 64)));
    p.mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, pm}});
    s.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("gemm_bf16: oneDNN bf16 matmul (packed B) failed: ") + e.what());
  }
}

void linear_forward_bf16w(const float* X, const uint16_t* Wb, float* Y, int64_t M, int64_t N, int64_t K,
                          bool accumulate) {
  if (M == 0 || N == 0) return;
  uint16_t* xb = bf16_scratch(kX, M * K);
  f32_to_bf16_rne(X, xb, M * K);
  bgemm(false, true, M, N, K, xb, K, Wb, K, accumulate ? 1.0f : 0.0f, Y, N);
}

void linear_backward_bf16w(const float* X, const uint16_t* Wb, const float* dY, float* dX, float* dW, int64_t M,
                           int64_t N, int64_t K, bool accumulate_dx) {
  if (M == 0 || N == 0) {
    if (dX && !accumulate_dx && M > 0) std::memset(dX, 0, static_cast<size_t>(M * K) * 4);
    return;
  }
  uint16_t* dyb = bf16_scratch(kDY, M * N);
  f32_to_bf16_rne(dY, dyb, M * N);
  if (dX) bgemm(false, false, M, K, N, dyb, N, Wb, K, accumulate_dx ? 1.0f : 0.0f, dX, K);
  if (dW) {
    uint16_t* xb = bf16_scratch(kX, M * K);
    f32_to_bf16_rne(X, xb, M * K);
    bgemm(true, false, N, K, M, dyb, N, xb, K, 1.0f, dW, K);
  }
}

void linear_forward_bf16(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (M == 0 || N == 0) return;
  if (packed_b_fast_for(false, M, N, K, K, accumulate ? 1.0f : 0.0f, N)) {  // W^T rounded straight into the blocked layout
    uint16_t* wp = bf16_scratch(kW, packed_b_elems(K, N));
    pack_bt_bf16(W, K, K, N, wp);  // B = W^T, B(k, n) = W[n * K + k]
    uint16_t* xb = bf16_scratch(kX, M * K);
    f32_to_bf16_rne(X, xb, M * K);
    bgemm_packed_b(false, M, N, K, xb, K, wp, accumulate ? 1.0f : 0.0f, Y, N);
    return;
  }
  uint16_t* wb = bf16_scratch(kW, N * K);
  f32_to_bf16_rne(W, wb, N * K);
  linear_forward_bf16w(X, wb, Y, M, N, K, accumulate);
}

void linear_backward_bf16_dy(const float* X, const float* W, const uint16_t* dyb, float* dX, float* dW, int64_t M,
                             int64_t N, int64_t K, bool accumulate_dx) {
  if (M == 0 || N == 0) {
    if (dX && !accumulate_dx && M > 0) std::memset(dX, 0, static_cast<size_t>(M * K) * 4);
    return;
  }
  if (packed_b_fast_for(false, M, K, N, N, accumulate_dx ? 1.0f : 0.0f, K) &&
      packed_b_fast_for(true, N, K, M, N, 1.0f, K)) {  // W and X rounded straight into the blocked layout
    if (dX) {
      uint16_t* wp = bf16_scratch(kW, packed_b_elems(N, K));
      pack_b_bf16(W, K, N, K, wp);  // B = W [N, K]
      bgemm_packed_b(false, M, K, N, dyb, N, wp, accumulate_dx ? 1.0f : 0.0f, dX, K);
    }
    if (dW) {
      uint16_t* xp = bf16_scratch(kX, packed_b_elems(M, K));
      pack_b_bf16(X, K, M, K, xp);  // B = X [M, K]
      bgemm_packed_b(true, N, K, M, dyb, N, xp, 1.0f, dW, K);
    }
    return;
  }
  if (dX) {
    uint16_t* wb = bf16_scratch(kW, N * K);
    f32_to_bf16_rne(W, wb, N * K);
    bgemm(false, false, M, K, N, dyb, N, wb, K, accumulate_dx ? 1.0f : 0.0f, dX, K);
  }
  if (dW) {
    uint16_t* xb = bf16_scratch(kX, M * K);
    f32_to_bf16_rne(X, xb, M * K);
    bgemm(true, false, N, K, M, dyb, N, xb, K, 1.0f, dW, K);
  }
}

void linear_backward_bf16(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                          int64_t K, bool accumulate_dx) {
  uint16_t* dyb = nullptr;
  if (M > 0 && N > 0) {
    dyb = bf16_scratch(kDY, M * N);
    f32_to_bf16_rne(dY, dyb, M * N);
  }
  linear_backward_bf16_dy(X, W, dyb, dX, dW, M, N, K, accumulate_dx);
}

}  // namespace twinkle::kernels::cpu
