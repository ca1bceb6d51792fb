// twinkle/kernels/cuda/caching_allocator.h — a caching block allocator over a raw device allocator
// (the idea of PyTorch's CUDACachingAllocator, c10/cuda/CUDACachingAllocator.cpp: freed blocks go to
// a cache and are handed out again, so a training step that repeats the same allocations makes no
// cudaMalloc after the first step; a cudaMalloc is ~ms and synchronizes the device).
//
// Pure C++ (no CUDA dependency): the raw allocate/free functions are injected, so the caching rules
// are unit-tested on the host (tests/cuda/test_cuda_runtime.cpp, CudaCachingAllocator.*). The CUDA runtime
// (twinkle/kernels/cuda/runtime.h) instantiates it over cudaMalloc/cudaFree.
//
// Size classes: a request is rounded up to 512 bytes below 1 MiB, above that to the next of four
// classes per power of two (2^k, 1.25*2^k, 1.5*2^k, 1.75*2^k; at most 25 % waste, PyTorch's
// roundup_power2_divisions = 4). A request takes the smallest cached free block of its rounded size
// or larger, up to twice the rounded size (blocks are never split); otherwise a new raw block of the
// rounded size. Single-stream use: a block freed and reused is ordered on the one stream.
// Thread-safe (one mutex).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace twinkle::cuda {

class CachingAllocator {
 public:
  /// The raw device memory functions: raw_alloc returns nullptr when out of memory (never throws);
  /// raw_free releases a pointer raw_alloc returned.
  struct Backend {
    std::function<void*(size_t)> raw_alloc;
    std::function<void(void*)> raw_free;
  };
  /// Counters (bytes are rounded block sizes).
  struct Stats {
    int64_t raw_allocs = 0;      ///< raw_alloc calls that succeeded (cudaMalloc count)
    int64_t raw_frees = 0;       ///< raw_free calls (empty_cache)
    int64_t allocs = 0;          ///< allocate() calls
    int64_t cache_hits = 0;      ///< allocate() calls served from the cache
    int64_t bytes_reserved = 0;  ///< held from the device (in use + cached)
    int64_t bytes_in_use = 0;    ///< handed out and not yet returned
    int64_t peak_in_use = 0;     ///< max of bytes_in_use
    int64_t peak_reserved = 0;   ///< max of bytes_reserved
  };

  explicit CachingAllocator(Backend b);
  ~CachingAllocator();  ///< releases every cached block (blocks still in use are leaked to the device)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` (0 allowed). When the raw allocator fails, the cache is emptied and
  /// the request retried once; then throws twinkle::Error naming the size and the counters.
  void* allocate(size_t bytes);
  /// Returns a block to the cache (nullptr: no-op). Throws twinkle::Error for a pointer it did not hand out.
  void deallocate(void* p);
  /// Releases every cached (free) block to the raw allocator.
  void empty_cache();
  Stats stats() const;
  /// Size of the block handed out for `bytes` (the size class).
  static size_t round_size(size_t bytes);
  /// "reserved X MiB, in use Y MiB (peak Z MiB), N raw allocations, H/A cache hits".
  std::string summary() const;

 private:
  Backend b_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;          // cached blocks by size
  std::unordered_map<void*, size_t> in_use_;   // handed-out blocks -> size
  Stats st_;
  void release_cached_locked();
};

}  // namespace twinkle::cuda
