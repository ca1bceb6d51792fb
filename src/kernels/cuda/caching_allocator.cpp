// Caching block allocator (twinkle/kernels/cuda/caching_allocator.h). Host-only C++.
#include "twinkle/kernels/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "twinkle/core/error.h"

namespace twinkle::cuda {

CachingAllocator::CachingAllocator(Backend b) : b_(std::move(b)) {
  check(static_cast<bool>(b_.raw_alloc) && static_cast<bool>(b_.raw_free),
        "CachingAllocator: raw_alloc and raw_free are required");
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lk(mu_);
  release_cached_locked();
}

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = size_t{1} << 20;
  if (bytes <= kSmall) return std::max<size_t>(512, (bytes + 511) / 512 * 512);
  size_t p = kSmall;  // largest power of two <= bytes
  while (p * 2 <= bytes) p *= 2;
  const size_t step = p / 4;
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t sz = round_size(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  ++st_.allocs;
  void* p = nullptr;
  size_t got = sz;
  auto it = free_.lower_bound(sz);
  if (it != free_.end() && it->first <= 2 * sz) {
    got = it->first;
    p = it->second;
    free_.erase(it);
    ++st_.cache_hits;
  } else {
    p = b_.raw_alloc(sz);
    if (!p) {  // out of memory: give the cache back and try once more
      release_cached_locked();
      p = b_.raw_alloc(sz);
    }
    if (!p) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "device out of memory: allocating %.1f MiB failed (", sz / 1048576.0);
      throw Error(std::string(buf) + "reserved " + std::to_string(st_.bytes_reserved >> 20) + " MiB, in use " +
                  std::to_string(st_.bytes_in_use >> 20) + " MiB, peak " + std::to_string(st_.peak_in_use >> 20) +
                  " MiB)");
    }
    ++st_.raw_allocs;
    st_.bytes_reserved += static_cast<int64_t>(sz);
    st_.peak_reserved = std::max(st_.peak_reserved, st_.bytes_reserved);
  }
  in_use_.emplace(p, got);
  st_.bytes_in_use += static_cast<int64_t>(got);
  st_.peak_in_use = std::max(st_.peak_in_use, st_.bytes_in_use);
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = in_use_.find(p);
  check(it != in_use_.end(), "CachingAllocator: free of a pointer it did not allocate (double free?)");
  st_.bytes_in_use -= static_cast<int64_t>(it->second);
  free_.emplace(it->second, p);
  in_use_.erase(it);
}

void CachingAllocator::release_cached_locked() {
  for (auto& [sz, p] : free_) {
    b_.raw_free(p);
    ++st_.raw_frees;
    st_.bytes_reserved -= static_cast<int64_t>(sz);
  }
  free_.clear();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lk(mu_);
  release_cached_locked();
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return st_;
}

std::string CachingAllocator::summary() const {
  const Stats s = stats();
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "reserved %.1f MiB, in use %.1f MiB (peak %.1f MiB), %lld raw allocations, %lld/%lld cache hits",
                s.bytes_reserved / 1048576.0, s.bytes_in_use / 1048576.0, s.peak_in_use / 1048576.0,
                static_cast<long long>(s.raw_allocs), static_cast<long long>(s.cache_hits),
                static_cast<long long>(s.allocs));
  return buf;
}

}  // namespace twinkle::cuda
