// Registry of accelerator allocators (twinkle/core/device_allocator.h).
#include "twinkle/core/device_allocator.h"

#include <atomic>

namespace twinkle {

namespace {
std::atomic<DeviceAllocator*>& slot(Device d) {
  static std::atomic<DeviceAllocator*> slots[3] = {nullptr, nullptr, nullptr};
  return slots[static_cast<int>(d)];
}
}  // namespace

void register_device_allocator(Device d, DeviceAllocator* a) {
  check(d != Device::CPU, "register_device_allocator: host memory (device 'cpu') has no DeviceAllocator");
  slot(d).store(a);
}

bool has_device_allocator(Device d) { return d != Device::CPU && slot(d).load() != nullptr; }

DeviceAllocator& device_allocator(Device d) {
  if (d != Device::CPU)
    if (DeviceAllocator* a = slot(d).load()) return *a;
  switch (d) {
    case Device::CPU: throw Error("device_allocator: device 'cpu' (host memory) has no DeviceAllocator");
    case Device::NPU:
      throw Error("device 'npu' is not built in: the NPU backend needs Huawei Ascend's CANN toolkit, which is not "
                  "available here");
    case Device::CUDA:
#ifdef TWINKLE_CUDA_BUILT
      throw Error("device 'cuda': the CUDA backend is built but not initialized (call twinkle::cuda::init() from "
                  "twinkle/kernels/cuda/runtime.h; resolve_kernels(\"cuda\") calls it)");
#else
      throw Error("device 'cuda' is not built in (configure with -DTWINKLE_CUDA=ON where nvcc exists)");
#endif
  }
  throw Error("device_allocator: unknown device");
}

}  // namespace twinkle
