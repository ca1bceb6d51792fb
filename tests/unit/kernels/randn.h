// tests/unit/kernels/randn.h — seeded N(0, scale^2) test inputs shared by the bf16 kernel tests.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace twinkle::testutil {

/// n floats drawn from N(0, scale^2) by std::mt19937_64(seed) (the same values on every run).
inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace twinkle::testutil
