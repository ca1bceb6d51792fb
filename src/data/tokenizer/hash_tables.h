// src/data/tokenizer/hash_tables.h — hashing and the small open-addressing tables of the BPE
// model: the merge table (models/bpe/model.rs of Rust `tokenizers` 0.22: rank = line index of
// the merge, a later duplicate overwrites) and the per-thread word cache. Header-only: the
// lookups run per pre-token / per merge and must inline into the merge loop (bpe.cpp).
// Internal header (not installed).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace twinkle::tok {

inline uint64_t mix64(uint64_t a, uint64_t b) {
  __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w, 0xbf58476d1ce4e5b9ull);
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    h = mix64(h ^ w, 0x94d049bb133111ebull);
  }
  return mix64(h, 0x2545F4914F6CDD1Dull);
}

/// (left id, right id) -> (rank, merged id); linear probing, power-of-two capacity.
class MergeTable {
 public:
  void init(size_t n) {
    size_t cap = 16;
    while (cap < n * 2 + 16) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, 0);
    mask_ = cap - 1;
  }
  // Inserts or overwrites.
  void put(int32_t a, int32_t b, uint32_t rank, int32_t id) {
    const uint64_t key = pack(a, b);
    size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    keys_[i] = key;
    vals_[i] = (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(id);
  }
  // true when found; rank/id out.
  inline bool get(int32_t a, int32_t b, uint32_t& rank, int32_t& id) const {
    const uint64_t key = pack(a, b);
    size_t i = slot(key);
    for (;;) {
      const uint64_t k = keys_[i];
      if (k == key) {
        rank = static_cast<uint32_t>(vals_[i] >> 32);
        id = static_cast<int32_t>(static_cast<uint32_t>(vals_[i]));
        return true;
      }
      if (k == kEmpty) return false;
      i = (i + 1) & mask_;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const { return mix64(key, 0x9E3779B97F4A7C15ull) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<uint64_t> vals_;
  size_t mask_ = 0;
};

/// Per-thread cache: pre-token bytes -> ids. Cleared when full; keyed by Impl uid.
class WordCache {
 public:
  static constexpr size_t kMaxWord = 256;  // like the Rust BPE cache: only short words
  static constexpr size_t kCap = 1u << 17;
  static constexpr size_t kMaxEntries = kCap / 2;

  void reset(uint64_t owner) {
    owner_ = owner;
    if (slots_.size() != kCap) slots_.assign(kCap, Slot{});
    else std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    count_ = 0;
  }
  uint64_t owner() const { return owner_; }
  size_t size() const { return count_; }

  // Appends the cached ids to out and returns true when present.
  inline bool lookup(const char* p, size_t n, uint64_t h, std::vector<int32_t>& out) const {
    size_t i = h & (kCap - 1);
    for (;;) {
      const Slot& s = slots_[i];
      if (s.len_plus1 == 0) return false;
      if (s.hash == h && s.len_plus1 - 1 == n && std::memcmp(keys_.data() + s.key_off, p, n) == 0) {
        out.insert(out.end(), ids_.begin() + s.val_off, ids_.begin() + s.val_off + s.val_len);
        return true;
      }
      i = (i + 1) & (kCap - 1);
    }
  }
  void insert(const char* p, size_t n, uint64_t h, const int32_t* ids, size_t m) {
    if (count_ >= kMaxEntries || keys_.size() > (64u << 20)) reset(owner_);
    size_t i = h & (kCap - 1);
    while (slots_[i].len_plus1 != 0) i = (i + 1) & (kCap - 1);
    Slot& s = slots_[i];
    s.hash = h;
    s.key_off = static_cast<uint32_t>(keys_.size());
    s.len_plus1 = static_cast<uint32_t>(n + 1);
    s.val_off = static_cast<uint32_t>(ids_.size());
    s.val_len = static_cast<uint32_t>(m);
    keys_.insert(keys_.end(), p, p + n);
    ids_.insert(ids_.end(), ids, ids + m);
    ++count_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0;
    uint32_t len_plus1 = 0;  // 0 = empty
    uint32_t val_off = 0;
    uint32_t val_len = 0;
  };
  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::vector<char> keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

}  // namespace twinkle::tok
