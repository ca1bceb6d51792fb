// twinkle/core/workspace.h — named, grow-only scratch tensors reused across steps.
//
// Page faults on fresh memory cost 12-17 us per 4 KiB page on the development machine, so
// activations and scratch buffers are allocated once and reused: get() returns a view of a
// buffer that only grows. The buffers live on the workspace's device (the model's: host memory,
// or the GPU for device_type cuda).
#pragma once
#include <map>
#include <string>

#include "twinkle/core/tensor.h"

namespace twinkle {

class Workspace {
 public:
  /// Buffers live on `dev` (device memory through twinkle/core/device_allocator.h).
  Workspace() = default;  // host memory
  explicit Workspace(Device dev) : dev_(dev) {}
  Device device() const { return dev_; }
  /// Moves the workspace to `dev` (drops every buffer).
  void set_device(Device dev) {
    bufs_.clear();
    dev_ = dev;
  }
  /// A contiguous f32 (or `dt`) tensor of `shape` backed by the buffer named `key`.
  /// Contents are unspecified (whatever the previous user left) unless zero = true.
  /// The view stays valid until the next get() of the same key with a larger size.
  Tensor get(const std::string& key, const Shape& shape, DType dt = DType::F32, bool zero = false);
  /// Bytes currently held.
  size_t bytes() const;
  void clear() { bufs_.clear(); }

 private:
  std::map<std::string, Tensor> bufs_;
  Device dev_ = Device::CPU;
};

}  // namespace twinkle
