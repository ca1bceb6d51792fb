// bf16 / f16 conversion against IEEE 754 bit patterns worked out by hand: round to nearest,
// ties to even (PyTorch's rule), overflow to infinity, subnormals, NaN kept.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "twinkle/core/dtype.h"

using namespace twinkle;

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  // 1 + 2^-8 lies halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): ties to even.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3*2^-8 lies halfway between 0x3F81 (odd) and 0x3F82 (even).
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  // just above the halfway point rounds up
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  EXPECT_EQ(bf16_to_f32(0x3F81), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
}

TEST(DType, F16RoundsOverflowsAndKeepsSubnormals) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);                          // largest finite half
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);                          // halfway to 2^16: rounds to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);              // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);              // smallest normal
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);       // tie to even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);   // tie to even (up)
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
}

// A NaN half keeps its sign and payload and gets the quiet bit, as vcvtph2ps (F16C / AVX-512) converts
// it: the safetensors reader converts a tensor's body with that instruction and its tail with
// f16_to_f32, so a row loaded whole and the same row loaded in column slices must agree bit for bit
// (found by fuzz_safetensors on an AVX2 machine: an F16 signalling NaN came back as 0x7fc00000 from the
// scalar path and 0x7fcb6000 from the vector one). Bits worked out by hand from IEEE 754.
TEST(DType, F16NanKeepsSignAndPayloadQuieted) {
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  EXPECT_EQ(bits(f16_to_f32(0x7c5b)), 0x7fcb6000u);  // signalling NaN, payload 0x05b -> quiet, payload << 13
  EXPECT_EQ(bits(f16_to_f32(0xfe01)), 0xffc02000u);  // negative quiet NaN
  EXPECT_EQ(bits(f16_to_f32(0x7c00)), 0x7f800000u);  // +inf stays inf
  EXPECT_EQ(bits(f16_to_f32(0xfc00)), 0xff800000u);
}
