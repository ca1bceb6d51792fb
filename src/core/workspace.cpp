#include "twinkle/core/workspace.h"

namespace twinkle {

Tensor Workspace::get(const std::string& key, const Shape& shape, DType dt, bool zero) {
  check(dt == DType::F32, "Workspace::get: only F32 buffers are supported (key " + key + ")");
  int64_t n = 1;
  for (auto d : shape) n *= d;
  auto it = bufs_.find(key);
  if (it == bufs_.end() || it->second.numel() < n) {
    // 25% headroom so slowly growing sequence lengths do not reallocate every step
    bufs_[key] = Tensor::zeros({n + n / 4 + 16}, DType::F32, dev_);
    it = bufs_.find(key);
  }
  Tensor out = it->second.narrow(0, 0, n).view(shape);
  if (zero) out.zero_();
  return out;
}

size_t Workspace::bytes() const {
  size_t b = 0;
  for (auto& [k, t] : bufs_) b += t.nbytes();
  return b;
}

}  // namespace twinkle
