#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "twinkle/core/tensor.h"
#include "twinkle/kernels/cpu/gemm.h"

using namespace twinkle;

TEST(Tensor, AlignedZeroedAndViews) {
  Tensor t = Tensor::zeros({3, 4});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  EXPECT_EQ(t.numel(), 12);
  for (float v : t.to_vector()) EXPECT_EQ(v, 0.0f);
  float* p = t.f32();
  for (int i = 0; i < 12; ++i) p[i] = static_cast<float>(i);
  Tensor n = t.narrow(1, 1, 2);
  EXPECT_FALSE(n.is_contiguous());
  Tensor c = n.clone();
  EXPECT_EQ(c.to_vector(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_THROW(t.view({5, 2}), Error);
  EXPECT_EQ(t.view({-1}).size(0), 12);
  EXPECT_THROW(t.data<int32_t>(), Error);
}

TEST(Tensor, Bf16RoundTripAndRounding) {
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even -> 1.0
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 rounds up to 1 + 2^-6
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.333251953125f)), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

TEST(Gemm, MatchesNaiveAllTransposes) {
  const int M = 7, N = 5, K = 9;
  std::vector<float> A(M * K), B(K * N), C(M * N, 1.0f);
  for (int i = 0; i < M * K; ++i) A[i] = std::sin(0.3f * i);
  for (int i = 0; i < K * N; ++i) B[i] = std::cos(0.7f * i);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      // store A as [M,K] or [K,M], B as [K,N] or [N,K]
      std::vector<float> As(M * K), Bs(K * N);
      for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k) As[ta ? k * M + m : m * K + k] = A[m * K + k];
      for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; ++n) Bs[tb ? n * K + k : k * N + n] = B[k * N + n];
      std::vector<float> Cc = C;
      kernels::cpu::sgemm(ta, tb, M, N, K, 2.0f, As.data(), ta ? M : K, Bs.data(), tb ? K : N, 0.5f, Cc.data(), N);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          double ref = 0.5;
          for (int k = 0; k < K; ++k) ref += 2.0 * A[m * K + k] * B[k * N + n];
          EXPECT_NEAR(Cc[m * N + n], ref, 1e-4);
        }
    }
}
