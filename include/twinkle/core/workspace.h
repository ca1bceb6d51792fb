// twinkle/core/workspace.h — named, grow-only scratch tensors reused across steps.
//
// Page faults on fresh memory cost 12-17 us per 4 KiB page on the development machine
// (../shared/spec/machine-figures.md), so activations and scratch buffers are
// allocated once and reused: get() returns a view of a buffer that only grows.
#pragma once
#include <map>
#include <string>

#include "twinkle/core/tensor.h"

namespace twinkle {

class Workspace {
 public:
  /// A contiguous f32 (or `dt`) tensor of `shape` backed by the buffer named `key`.
  /// Contents are unspecified (whatever the previous user left) unless zero = true.
  /// The view stays valid until the next get() of the same key with a larger size.
  Tensor get(const std::string& key, const Shape& shape, DType dt = DType::F32, bool zero = false);
  /// Bytes currently held.
  size_t bytes() const;
  void clear() { bufs_.clear(); }

 private:
  std::map<std::string, Tensor> bufs_;
};

}  // namespace twinkle
