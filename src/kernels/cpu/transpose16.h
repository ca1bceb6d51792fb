// src/kernels/cpu/transpose16.h — 32-bit matrix transposes in 16 x 16 register tiles (AVX-512), with a
// scalar form for the edges and for builds without AVX-512. Internal to the CPU kernels: the bf16
// GEMM packing (gemm_bf16.cpp) transposes bf16 pairs as dwords; linear_cross_entropy transposes its
// chunk's X and adds each vocab block's transposed dW.
#pragma once
#include <algorithm>
#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace twinkle::kernels::cpu::transpose16 {

#ifdef __AVX512F__
// (The all-lanes maskz forms: GCC 12 warns about the undefined pass-through operand of the unmasked
// intrinsics.)
inline __m512i unlo32(__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi32(__mmask16(0xffff), a, b); }
inline __m512i unhi32(__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi32(__mmask16(0xffff), a, b); }
inline __m512i unlo64(__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi64(__mmask8(0xff), a, b); }
inline __m512i unhi64(__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi64(__mmask8(0xff), a, b); }
template <int Imm>
inline __m512i lanes(__m512i a, __m512i b) {
  return _mm512_maskz_shuffle_i32x4(__mmask16(0xffff), a, b, Imm);
}

/// In-register transpose of 16 rows of 16 dwords (r[c][j] -> r[j][c]): unpack 32 / 64-bit pairs within
/// 128-bit lanes, then two rounds of 128-bit lane shuffles.
inline void transpose16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = unlo32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = unhi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // r[4g + e]: lane L holds element 4L + e of rows 4g..4g+3
    r[4 * g] = unlo64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = unhi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = unlo64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = unhi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i x0 = lanes<0x88>(r[e], r[4 + e]), y0 = lanes<0xdd>(r[e], r[4 + e]);
    const __m512i x1 = lanes<0x88>(r[8 + e], r[12 + e]), y1 = lanes<0xdd>(r[8 + e], r[12 + e]);
    t[e] = lanes<0x88>(x0, x1);       // element e of lane 0 -> output row e
    t[8 + e] = lanes<0xdd>(x0, x1);   // lane 2 -> row 8 + e
    t[4 + e] = lanes<0x88>(y0, y1);   // lane 1 -> row 4 + e
    t[12 + e] = lanes<0xdd>(y0, y1);  // lane 3 -> row 12 + e
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}
#endif

/// out[c * ldo + r] = in[r * ldi + c] (kAdd: +=) for r < R, c < C: in is [R, C], out [C, R]. Full
/// 16 x 16 tiles in registers, the edges element by element; every output element is written (or
/// added to) exactly once, so the result does not depend on the tiling.
template <bool kAdd>
inline void transpose_floats(const float* in, int64_t R, int64_t C, int64_t ldi, float* out, int64_t ldo) {
  int64_t R16 = 0, C16 = 0;
#ifdef __AVX512F__
  R16 = R / 16 * 16, C16 = C / 16 * 16;
  for (int64_t r0 = 0; r0 < R16; r0 += 16)
    for (int64_t c0 = 0; c0 < C16; c0 += 16) {
      __m512i t[16];
      for (int i = 0; i < 16; ++i) t[i] = _mm512_castps_si512(_mm512_loadu_ps(in + (r0 + i) * ldi + c0));
      transpose16x16_epi32(t);
      for (int i = 0; i < 16; ++i) {
        float* o = out + (c0 + i) * ldo + r0;
        __m512 v = _mm512_castsi512_ps(t[i]);
        if constexpr (kAdd) v = _mm512_add_ps(_mm512_loadu_ps(o), v);
        _mm512_storeu_ps(o, v);
      }
    }
#endif
  auto one = [&](int64_t r, int64_t c) {
    float& o = out[c * ldo + r];
    if constexpr (kAdd)
      o += in[r * ldi + c];
    else
      o = in[r * ldi + c];
  };
  for (int64_t r = 0; r < R16; ++r)  // the right edge of the tiled rows
    for (int64_t c = C16; c < C; ++c) one(r, c);
  for (int64_t r0 = R16; r0 < R; r0 += 16)  // the bottom rows, in 16-column strips
    for (int64_t c0 = 0; c0 < C; c0 += 16)
      for (int64_t r = r0; r < std::min(R, r0 + 16); ++r)
        for (int64_t c = c0; c < std::min(C, c0 + 16); ++c) one(r, c);
}

}  // namespace twinkle::kernels::cpu::transpose16
