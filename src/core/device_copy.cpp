#include "twinkle/core/device_copy.h"

#include "twinkle/core/device_allocator.h"

namespace twinkle {

Device parse_device(const std::string& t) {
  if (t == "cpu") return Device::CPU;
  if (t == "cuda") return Device::CUDA;
  if (t == "npu") return Device::NPU;
  throw Error("device_type '" + t + "' is unknown (cpu, cuda, npu)");
}

namespace device_detail {
void copy_d2d(Device d, void* dst, const void* src, size_t bytes) {
  device_allocator(d).copy(dst, src, bytes, CopyKind::DeviceToDevice);
}
void copy_h2d(Device d, void* dst, const void* src, size_t bytes) {
  device_allocator(d).copy(dst, src, bytes, CopyKind::HostToDevice);
}
void copy_d2h(Device d, void* dst, const void* src, size_t bytes) {
  device_allocator(d).copy(dst, src, bytes, CopyKind::DeviceToHost);
}
void zero(Device d, void* p, size_t bytes) { device_allocator(d).fill_zero(p, bytes); }
void copy_2d(Device d, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
  device_allocator(d).copy_2d(dst, dpitch, src, spitch, width, height);
}
}  // namespace device_detail

}  // namespace twinkle
