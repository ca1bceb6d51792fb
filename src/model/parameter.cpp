#include "twinkle/model/parameter.h"

#include "twinkle/core/error.h"

namespace twinkle {

size_t ParamStore::add(Param p) {
  check(!finalized_, "ParamStore::add after finalize (" + p.name + ")");
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

void ParamStore::finalize(int64_t align) {
  check(!finalized_, "ParamStore::finalize called twice");
  int64_t off = 0;
  for (auto& p : params_) {
    int64_t n = 1;
    for (auto d : p.shape) n *= d;
    p.flat_offset = off;
    off += (n + 15) / 16 * 16;  // 64-byte aligned starts
  }
  numel_ = (off + align - 1) / align * align;
  if (numel_ == 0) numel_ = align;
  flat_params_ = Tensor::zeros({numel_});
  flat_grads_ = Tensor::zeros({numel_});
  for (auto& p : params_) {
    int64_t n = 1;
    for (auto d : p.shape) n *= d;
    p.data = flat_params_.narrow(0, p.flat_offset, n).view(p.shape);
    p.grad = flat_grads_.narrow(0, p.flat_offset, n).view(p.shape);
  }
  finalized_ = true;
}

const Param* ParamStore::find(const std::string& name) const {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}
Param* ParamStore::find(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void ParamStore::zero_grad() {
  if (flat_grads_.defined()) flat_grads_.zero_();
}

}  // namespace twinkle
