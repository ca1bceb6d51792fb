// The memory seam of core (twinkle/core/device_allocator.h): tensors of an accelerator device allocate,
// zero, copy and free through the allocator its backend registered. Tested with a fake "device" whose
// memory is host memory kept apart (a counting allocator registered for Device::NPU), so every path of
// Tensor that must go through the allocator is seen doing so — and a path that silently used host memcpy
// on device pointers would be caught by the counters and the poisoned fresh blocks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>

#include "error_of.h"
#include "twinkle/core/device_allocator.h"
#include "twinkle/core/error.h"

using namespace twinkle;

using twinkle::test_support::error_of;

namespace {

struct FakeDevice : DeviceAllocator {
  std::map<void*, size_t> live;
  int allocs = 0, frees = 0, h2d = 0, d2h = 0, d2d = 0, zeros = 0, syncs = 0;
  void* alloc(size_t bytes) override {
    void* p = std::malloc(bytes ? bytes : 1);
    std::memset(p, 0xAB, bytes);  // fresh device memory is not zero: Storage must zero it
    live[p] = bytes;
    ++allocs;
    return p;
  }
  void free(void* p) override {
    if (!p) return;
    check(live.erase(p) == 1, "FakeDevice: unknown pointer");
    std::free(p);
    ++frees;
  }
  bool owns(const void* p, size_t n) const {
    for (auto& [b, sz] : live)
      if (p >= b && static_cast<const char*>(p) + n <= static_cast<const char*>(b) + sz) return true;
    return false;
  }
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind) override {
    EXPECT_EQ(owns(dst, bytes), kind != CopyKind::DeviceToHost);
    EXPECT_EQ(owns(src, bytes), kind != CopyKind::HostToDevice);
    (kind == CopyKind::HostToDevice ? h2d : kind == CopyKind::DeviceToHost ? d2h : d2d)++;
    std::memcpy(dst, src, bytes);
  }
  void fill_zero(void* p, size_t bytes) override {
    EXPECT_TRUE(owns(p, bytes));
    ++zeros;
    std::memset(p, 0, bytes);
  }
  void synchronize() override { ++syncs; }
  std::string describe() const override { return "fake"; }
};

}  // namespace

TEST(DeviceAllocator, TensorsOfADeviceLiveInItsAllocatorAndCopyThroughIt) {
  FakeDevice dev;
  register_device_allocator(Device::NPU, &dev);
  {
    Tensor d = Tensor::zeros({3, 5}, DType::F32, Device::NPU);
    EXPECT_EQ(d.device(), Device::NPU);
    EXPECT_EQ(dev.allocs, 1);
    EXPECT_EQ(dev.zeros, 1);
    EXPECT_EQ(d.to_vector(), std::vector<float>(15, 0.0f));  // zeroed despite the 0xAB poison
    std::vector<float> v(15);
    for (int i = 0; i < 15; ++i) v[i] = 0.5f * i;
    Tensor h = Tensor::from_vector({3, 5}, v);
    d.copy_(h);
    EXPECT_EQ(dev.h2d, 1);
    Tensor back = d.to(Device::CPU);
    EXPECT_EQ(back.device(), Device::CPU);
    EXPECT_EQ(back.to_vector(), v);
    Tensor c = d.clone();  // device to device
    EXPECT_EQ(c.device(), Device::NPU);
    EXPECT_EQ(dev.d2d, 1);
    d.zero_();
    EXPECT_EQ(d.to_vector(), std::vector<float>(15, 0.0f));
    EXPECT_EQ(c.to_vector(), v);
    Tensor up = h.narrow(0, 1, 2).to(Device::NPU);  // a contiguous row range uploads directly
    EXPECT_EQ(up.to_vector(), std::vector<float>(v.begin() + 5, v.end()));
    Tensor col = h.narrow(1, 1, 2).to(Device::NPU);  // non-contiguous host source: packed first
    EXPECT_EQ(col.to_vector(), (std::vector<float>{0.5f, 1.0f, 3.0f, 3.5f, 5.5f, 6.0f}));
    EXPECT_THROW(d.narrow(1, 0, 2).clone().to_vector(), Error);  // non-contiguous device view: refused
    EXPECT_THROW(d.fill_(1.0f), Error);                           // host-only helpers name the device
    const std::string msg = [&] {
      try {
        d.fill_(1.0f);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    EXPECT_NE(msg.find("'npu'"), std::string::npos) << msg;
  }
  EXPECT_EQ(dev.allocs, dev.frees);  // every device block went back to the allocator
  EXPECT_TRUE(dev.live.empty());
  register_device_allocator(Device::NPU, nullptr);
}

TEST(DeviceAllocator, UnregisteredDevicesFailNamingWhatToDo) {
  const std::string npu = error_of([] { Tensor::zeros({2}, DType::F32, Device::NPU); });
  EXPECT_NE(npu.find("'npu'"), std::string::npos) << npu;
  EXPECT_NE(npu.find("CANN"), std::string::npos) << npu;
  if (!has_device_allocator(Device::CUDA)) {
    const std::string cuda = error_of([] { Tensor::zeros({2}, DType::F32, Device::CUDA); });
    EXPECT_NE(cuda.find("device 'cuda'"), std::string::npos) << cuda;
    // either "not built in (configure with -DTWINKLE_CUDA=ON ...)" or "not initialized (... init())"
    EXPECT_TRUE(cuda.find("-DTWINKLE_CUDA=ON") != std::string::npos || cuda.find("cuda::init()") != std::string::npos)
        << cuda;
  }
  EXPECT_THROW(register_device_allocator(Device::CPU, nullptr), Error);
  EXPECT_THROW(device_allocator(Device::CPU), Error);
}
