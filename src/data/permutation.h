// src/data/permutation.h (internal) — the one seeded permutation of the data layer: the DataLoader's
// per-epoch shuffle and the dataset mixture's sampling and shuffle (twinkle/data/mixture.h).
#pragma once
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace twinkle::detail {

// Unbiased integer in [0, bound) from a 64-bit engine (rejection of the short tail); defined here
// rather than std::uniform_int_distribution so the permutation is the same with every standard
// library.
inline uint64_t uniform_below(std::mt19937_64& g, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  uint64_t x;
  do x = g();
  while (x < threshold);
  return x % bound;
}

// Fisher-Yates over `v` (from the back) with std::mt19937_64(seed).
template <class T>
void shuffle_seeded(std::vector<T>& v, uint64_t seed) {
  std::mt19937_64 g(seed);
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(uniform_below(g, i));
    std::swap(v[i - 1], v[j]);
  }
}

// 0..n-1 shuffled with shuffle_seeded.
inline std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  shuffle_seeded(p, seed);
  return p;
}

}  // namespace twinkle::detail
