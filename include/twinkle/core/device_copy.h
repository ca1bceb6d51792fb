// twinkle/core/device_copy.h — raw byte moves on a tensor's device, for layer code that holds pointers.
//
// Layers and the optimizer work on raw pointers into ParamStore / activation / workspace buffers that
// live on the model's device. These helpers move bytes there: on the host they are memcpy / memset
// (inline: the CPU path costs nothing extra); on an accelerator they go through the device's
// DeviceAllocator (twinkle/core/device_allocator.h; stream-ordered, host-side copies synchronous).
#pragma once
#include <cstddef>
#include <cstring>
#include <string>

#include "twinkle/core/tensor.h"

namespace twinkle {

/// "cpu" / "cuda" / "npu" (a DeviceMesh device_type) as a Device. Throws twinkle::Error naming any
/// other value.
Device parse_device(const std::string& device_type);

namespace device_detail {
void copy_d2d(Device d, void* dst, const void* src, size_t bytes);
void copy_h2d(Device d, void* dst, const void* src, size_t bytes);
void copy_d2h(Device d, void* dst, const void* src, size_t bytes);
void zero(Device d, void* p, size_t bytes);
void copy_2d(Device d, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height);
}  // namespace device_detail

/// dst = src, both buffers on device `d` (may not overlap).
inline void copy_bytes(Device d, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (d == Device::CPU) std::memcpy(dst, src, bytes);
  else device_detail::copy_d2d(d, dst, src, bytes);
}
/// Host buffer `src` into `dst` on device `d` (synchronous for src).
inline void upload_bytes(Device d, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (d == Device::CPU) std::memcpy(dst, src, bytes);
  else device_detail::copy_h2d(d, dst, src, bytes);
}
/// `src` on device `d` into host buffer `dst` (returns when dst holds the bytes).
inline void download_bytes(Device d, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (d == Device::CPU) std::memcpy(dst, src, bytes);
  else device_detail::copy_d2h(d, dst, src, bytes);
}
/// rows x width floats on device `d`: row r from src + r * src_ld to dst + r * dst_ld (leading dimensions in
/// floats; one cudaMemcpy2DAsync on an accelerator).
inline void copy_rows_2d(Device d, float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t width,
                         int64_t rows) {
  if (width <= 0 || rows <= 0) return;
  if (d == Device::CPU) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * dst_ld, src + r * src_ld, static_cast<size_t>(width) * sizeof(float));
  } else {
    device_detail::copy_2d(d, dst, static_cast<size_t>(dst_ld) * sizeof(float), src,
                           static_cast<size_t>(src_ld) * sizeof(float), static_cast<size_t>(width) * sizeof(float),
                           static_cast<size_t>(rows));
  }
}
/// Zeroes `bytes` at `p` on device `d`.
inline void zero_bytes(Device d, void* p, size_t bytes) {
  if (bytes == 0) return;
  if (d == Device::CPU) std::memset(p, 0, bytes);
  else device_detail::zero(d, p, bytes);
}

}  // namespace twinkle
