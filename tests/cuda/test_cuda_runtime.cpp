// The CUDA backend's host-side logic, run on every machine of a CUDA build (no GPU needed): the caching
// allocator's rules over a fake raw allocator, device selection from the launcher's environment, the
// peak table, the kernel profile's table, and the error a process gets when it asks for a GPU that is not there.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "error_of.h"
#include "twinkle/core/device_allocator.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cuda/caching_allocator.h"
#include "twinkle/kernels/cuda/kernel_profile.h"
#include "twinkle/kernels/cuda/runtime.h"
#include "twinkle/kernels/registry.h"

using namespace twinkle;
using twinkle::cuda::CachingAllocator;

using twinkle::test_support::error_of;

namespace {

struct FakeRaw {
  std::map<void*, size_t> live;
  int64_t calls = 0, budget = int64_t{1} << 40, used = 0;
  CachingAllocator::Backend backend() {
    return {[this](size_t n) -> void* {
              if (used + static_cast<int64_t>(n) > budget) return nullptr;
              ++calls;
              used += static_cast<int64_t>(n);
              void* p = std::malloc(n);
              live[p] = n;
              return p;
            },
            [this](void* p) {
              used -= static_cast<int64_t>(live.at(p));
              live.erase(p);
              std::free(p);
            }};
  }
};

// One "training step": the allocation pattern of a layer's forward/backward (activations kept until
// the end, scratch freed at once), sizes as a small model's.
void step(CachingAllocator& a) {
  std::vector<void*> keep;
  for (size_t sz : {size_t{4096}, size_t{3} << 20, size_t{1000}, size_t{7} << 20, size_t{12345}}) {
    keep.push_back(a.allocate(sz));
    void* scratch = a.allocate(sz * 2);
    a.deallocate(scratch);
  }
  for (void* p : keep) a.deallocate(p);
}

}  // namespace

TEST(CudaCachingAllocator, ASecondIdenticalStepMakesNoRawAllocation) {
  FakeRaw raw;
  {
    CachingAllocator a(raw.backend());
    step(a);
    const auto first = a.stats();
    EXPECT_GT(first.raw_allocs, 0);
    EXPECT_EQ(first.bytes_in_use, 0);
    for (int i = 0; i < 3; ++i) step(a);
    const auto later = a.stats();
    EXPECT_EQ(later.raw_allocs, first.raw_allocs) << "cudaMalloc per step: the cache is not reused";
    EXPECT_EQ(later.bytes_reserved, first.bytes_reserved);
    EXPECT_EQ(later.cache_hits, later.allocs - first.raw_allocs);
    EXPECT_GE(later.peak_in_use, static_cast<int64_t>((size_t{7} << 20) * 3));
    EXPECT_EQ(raw.calls, first.raw_allocs);
    a.empty_cache();
    EXPECT_EQ(a.stats().bytes_reserved, 0);
    EXPECT_TRUE(raw.live.empty());
  }
  EXPECT_TRUE(raw.live.empty());  // the destructor releases the cache
}

TEST(CudaCachingAllocator, SizeClassesBoundTheWasteAndBlocksAreDistinct) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::round_size((size_t{1} << 20) + 1), (size_t{5} << 20) / 4);
  for (size_t n = 1; n < (size_t{1} << 34); n = n * 3 + 7) {
    const size_t r = CachingAllocator::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_LE(static_cast<double>(r), std::max(512.0, 1.25 * static_cast<double>(n) + 512)) << n;
  }
  FakeRaw raw;
  CachingAllocator a(raw.backend());
  std::set<void*> ptrs;
  for (int i = 0; i < 50; ++i) ptrs.insert(a.allocate(static_cast<size_t>(100 + i)));
  EXPECT_EQ(ptrs.size(), 50u);  // live blocks never alias
  for (void* p : ptrs) a.deallocate(p);
  // a cached block much larger than the request is not handed out (no 2 GiB block for 1 KiB)
  void* big = a.allocate(size_t{64} << 20);
  a.deallocate(big);
  void* small = a.allocate(size_t{1} << 20);
  EXPECT_NE(small, big);
  a.deallocate(small);
  EXPECT_NE(error_of([&] { a.deallocate(small); }).find("did not allocate"), std::string::npos);  // double free
}

TEST(CudaCachingAllocator, OutOfMemoryEmptiesTheCacheThenNamesTheSize) {
  FakeRaw raw;
  raw.budget = int64_t{10} << 20;
  CachingAllocator a(raw.backend());
  void* p = a.allocate(size_t{6} << 20);
  a.deallocate(p);                           // 6 MiB cached
  void* q = a.allocate(size_t{9} << 20 >> 1 << 1);  // needs the cached block released first
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.stats().raw_frees, 1);
  const std::string e = error_of([&] { a.allocate(size_t{8} << 20); });
  EXPECT_NE(e.find("out of memory"), std::string::npos) << e;
  EXPECT_NE(e.find("8.0 MiB"), std::string::npos) << e;
  EXPECT_NE(e.find("in use"), std::string::npos) << e;
  a.deallocate(q);
}

TEST(CudaDeviceSelection, LocalRankFromTheLaunchersEnvironment) {
  auto env = [](std::map<std::string, std::string> m) {
    return [m](const char* k) -> const char* {
      auto it = m.find(k);
      return it == m.end() ? nullptr : it->second.c_str();
    };
  };
  EXPECT_EQ(cuda::local_rank_from_env(env({})), 0);
  EXPECT_EQ(cuda::local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"SLURM_LOCALID", "1"}})), 3);
  EXPECT_EQ(cuda::local_rank_from_env(env({{"SLURM_LOCALID", "2"}, {"LOCAL_RANK", "5"}})), 2);
  EXPECT_EQ(cuda::local_rank_from_env(env({{"LOCAL_RANK", "5"}})), 5);
  const std::string bad = error_of([&] { cuda::local_rank_from_env(env({{"OMPI_COMM_WORLD_LOCAL_RANK", "x1"}})); });
  EXPECT_NE(bad.find("OMPI_COMM_WORLD_LOCAL_RANK='x1'"), std::string::npos) << bad;
  EXPECT_EQ(cuda::select_device(0, 8), 0);
  EXPECT_EQ(cuda::select_device(5, 8), 5);
  EXPECT_EQ(cuda::select_device(5, 1), 0);  // 4 ranks sharing one lent GPU
  EXPECT_EQ(cuda::select_device(3, 2), 1);
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const std::string none = error_of([] { cuda::select_device(0, 0, "no CUDA-capable device"); });
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_NE(none.find("device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES="), std::string::npos) << none;
  EXPECT_NE(none.find("no CUDA-capable device"), std::string::npos) << none;
}

TEST(CudaDeviceSelection, PeakTableByName) {
  EXPECT_EQ(cuda::peak_tflops_for("NVIDIA H200").first, 989.0);
  EXPECT_EQ(cuda::peak_tflops_for("NVIDIA H100 80GB HBM3").second, 67.0);
  EXPECT_EQ(cuda::peak_tflops_for("NVIDIA H100 PCIe").first, 756.0);
  EXPECT_EQ(cuda::peak_tflops_for("NVIDIA A100-SXM4-80GB").first, 312.0);
  EXPECT_EQ(cuda::peak_tflops_for("NVIDIA GeForce GTX 1080").first, 0.0);
}

TEST(CudaRuntime, WithoutAGpuEveryEntryFailsClearly) {
  EXPECT_TRUE(kernels::device_built("cuda"));
  std::string why;
  if (cuda::visible_device_count(&why) > 0) GTEST_SKIP() << "a GPU is visible: covered by the gpu-labelled tests";
  EXPECT_FALSE(why.empty());
  const std::string init = error_of([] { cuda::init(); });
  EXPECT_NE(init.find("no GPU visible"), std::string::npos) << init;
  const std::string table = error_of([] { kernels::resolve_kernels("cuda"); });
  EXPECT_NE(table.find("no GPU visible"), std::string::npos) << table;
  const std::string t = error_of([] { Tensor::zeros({4}, DType::F32, Device::CUDA); });
  EXPECT_NE(t.find("device 'cuda'"), std::string::npos) << t;
  EXPECT_NE(error_of([] { cuda::stream_handle(); }).find("not initialized"), std::string::npos);
  EXPECT_TRUE(cuda::device_info().empty());
  // the CUDA ops are registered (a table could be resolved on a machine with a GPU)
  for (const char* op : {"adamw", "norms", "add"})
    EXPECT_EQ(kernels::Registry::global().implementations(op, "cuda"), std::vector<std::string>{"fused"}) << op;
}

TEST(CudaKernelProfile, TableSharesPerStepFiguresAndTheOtherKernelsLine) {
  // 3 kernels over 2 steps: 60 + 30 + 10 ms of device time in 200 ms of wall time
  std::vector<cuda::KernelProfileRow> rows = {
      {"small_kernel", 4, 10.0}, {"attention_fwd<128>", 2, 60.0}, {"void gemm_kernel_with_a_long_name", 8, 30.0}};
  const std::string t = cuda::format_kernel_profile(rows, 0.2, 2, 2, 20);
  std::vector<std::string> lines;
  for (size_t a = 0, b; (b = t.find('\n', a)) != std::string::npos; a = b + 1) lines.push_back(t.substr(a, b - a));
  ASSERT_EQ(lines.size(), 5u) << t;  // header, 2 rows, the rest, the total
  // largest first: share, total ms, ms per step, calls per step, us per call, name
  EXPECT_EQ(lines[1], " 60.0%      60.000     30.000       1.0   30000.00  attention_fwd<128>") << t;
  EXPECT_EQ(lines[2], " 30.0%      30.000     15.000       4.0    3750.00  void gemm_kernel_...") << t;  // cut to 20
  EXPECT_EQ(lines[3], " 10.0%      10.000      5.000       2.0    2500.00  (1 other kernels)") << t;
  EXPECT_NE(lines[4].find("kernels: 50.000 ms per step summed over 3 kernel names; wall 100.000 ms per step"),
            std::string::npos) << t;
  EXPECT_NE(lines[4].find("ran kernels 50.0% of the wall time"), std::string::npos) << t;
}

TEST(CudaKernelProfile, StopWithoutStartIsEmpty) { EXPECT_TRUE(cuda::kernel_profile_stop().empty()); }
