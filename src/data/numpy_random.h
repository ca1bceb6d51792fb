// src/data/numpy_random.h (internal) — the two NumPy random streams ms-swift's train/validation split
// draws from (twinkle/data/train_val_split.h), reproduced bit for bit so that twinkle picks the rows
// ms-swift picks:
//  * np.random.RandomState(seed).randint(0, 2**31 - 1): the legacy MT19937 seeded by init_genrand
//    (numpy/random/src/mt19937/mt19937.c, the same engine and seeding as std::mt19937), and
//    randint's masked rejection sampling of 32-bit draws (numpy/random/src/distributions/
//    distributions.c, buffered_bounded_masked_uint32 with mask 0x7fffffff).
//  * np.random.default_rng(seed).permutation(n): SeedSequence(seed) (numpy/random/bit_generator.pyx:
//    the entropy as 32-bit words, mix_entropy into a pool of 4, generate_state(4, uint64)), PCG64
//    seeded with those words (numpy/random/src/pcg64/pcg64.h: pcg_setseq_128 XSL-RR 128/64; the
//    32-bit draws are the low then the high half of one 64-bit draw) and Generator.shuffle's
//    Fisher-Yates from the back with random_interval (masked rejection) for j in [0, i].
// Checked against NumPy itself in tests/unit/data/test_train_val_split.cpp (values NumPy printed) and
// tests/reference/check_eval.py (datasets' train_test_split).
#pragma once
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

namespace twinkle::detail {

// One draw of ms-swift's get_seed (swift/utils/np_utils.py): random_state.randint(0, 2**31 - 1) on a
// legacy RandomState whose MT19937 is `mt`.
inline int64_t numpy_randint_int32_max(std::mt19937& mt) {
  constexpr uint32_t rng = 0x7ffffffeu;  // high - low - 1 for randint(0, 2**31 - 1)
  constexpr uint32_t mask = 0x7fffffffu;
  uint32_t v;
  do v = static_cast<uint32_t>(mt()) & mask;
  while (v > rng);
  return static_cast<int64_t>(v);
}

// NumPy's SeedSequence(seed).generate_state(4, np.uint64) for a non-negative integer seed.
inline void numpy_seed_sequence_u64x4(uint64_t seed, uint64_t out[4]) {
  constexpr uint32_t INIT_A = 0x43b0d7e5u, MULT_A = 0x931e8875u, INIT_B = 0x8b51f9ddu, MULT_B = 0x58f38dedu;
  constexpr uint32_t MIX_MULT_L = 0xca01f9ddu, MIX_MULT_R = 0x4973f715u;
  std::vector<uint32_t> entropy;  // _coerce_to_uint32_array: little-endian 32-bit words, [0] for 0
  if (seed == 0) entropy.push_back(0);
  for (uint64_t s = seed; s > 0; s >>= 32) entropy.push_back(static_cast<uint32_t>(s));
  uint32_t hash_const = INIT_A;
  auto hashmix = [&](uint32_t v) {
    v ^= hash_const;
    hash_const *= MULT_A;
    v *= hash_const;
    v ^= v >> 16;
    return v;
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = MIX_MULT_L * x - MIX_MULT_R * y;
    r ^= r >> 16;
    return r;
  };
  uint32_t pool[4];
  for (size_t i = 0; i < 4; ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0u);
  for (size_t s = 0; s < 4; ++s)
    for (size_t d = 0; d < 4; ++d)
      if (s != d) pool[d] = mix(pool[d], hashmix(pool[s]));
  for (size_t s = 4; s < entropy.size(); ++s)
    for (size_t d = 0; d < 4; ++d) pool[d] = mix(pool[d], hashmix(entropy[s]));
  uint32_t h = INIT_B;
  uint32_t words[8];
  for (size_t i = 0; i < 8; ++i) {
    uint32_t v = pool[i % 4];
    v ^= h;
    h *= MULT_B;
    v *= h;
    v ^= v >> 16;
    words[i] = v;
  }
  for (size_t k = 0; k < 4; ++k) out[k] = static_cast<uint64_t>(words[2 * k]) | (static_cast<uint64_t>(words[2 * k + 1]) << 32);
}

// NumPy's PCG64 bit generator (seeded as PCG64(seed) is) with its buffered 32-bit draws.
class NumpyPcg64 {
  __extension__ typedef unsigned __int128 u128;  // GCC / Clang's 128-bit integer (PCG64's state)

 public:
  explicit NumpyPcg64(uint64_t seed) {
    uint64_t v[4];
    numpy_seed_sequence_u64x4(seed, v);
    const u128 initstate = (static_cast<u128>(v[0]) << 64) | v[1];
    const u128 initseq = (static_cast<u128>(v[2]) << 64) | v[3];
    state_ = 0;
    inc_ = (initseq << 1) | 1u;
    step();
    state_ += initstate;
    step();
  }
  uint64_t next_u64() {
    step();
    const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned r = static_cast<unsigned>(state_ >> 122);
    return (x >> r) | (x << ((64u - r) & 63u));
  }
  uint32_t next_u32() {
    if (has_u32_) {
      has_u32_ = false;
      return u32_;
    }
    const uint64_t v = next_u64();
    has_u32_ = true;
    u32_ = static_cast<uint32_t>(v >> 32);
    return static_cast<uint32_t>(v);
  }
  // random_interval(bitgen, max): uniform in [0, max] by masked rejection
  uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (unsigned sh = 1; sh <= 32; sh <<= 1) mask |= mask >> sh;
    uint64_t v;
    if (max <= 0xffffffffu) {
      do v = next_u32() & mask;
      while (v > max);
    } else {
      do v = next_u64() & mask;
      while (v > max);
    }
    return v;
  }

 private:
  void step() {
    const u128 mult = (static_cast<u128>(2549297995355413924ull) << 64) | 4865540595714422341ull;
    state_ = state_ * mult + inc_;
  }
  u128 state_ = 0, inc_ = 0;
  bool has_u32_ = false;
  uint32_t u32_ = 0;
};

// np.random.default_rng(seed).permutation(n).
inline std::vector<int64_t> numpy_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  NumpyPcg64 g(seed);
  for (int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<size_t>(g.interval(static_cast<uint64_t>(i)));
    std::swap(p[static_cast<size_t>(i)], p[j]);
  }
  return p;
}

}  // namespace twinkle::detail
