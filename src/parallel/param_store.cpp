#include "twinkle/parallel/param_store.h"

#include <algorithm>
#include <cstring>

#include "twinkle/core/error.h"

namespace twinkle {

namespace {
int64_t local_cols(const Shape& local) { return local.size() > 1 ? local[1] : 1; }
}  // namespace

void shard_from_full(const ShardSpec& s, const Shape& local, const float* full, float* dst) {
  int64_t n = 1;
  for (auto d : local) n *= d;
  std::memset(dst, 0, static_cast<size_t>(n) * 4);
  if (s.split_dim == -1) {
    std::memcpy(dst, full, static_cast<size_t>(n) * 4);
  } else if (s.split_dim == 0) {
    std::memcpy(dst, full + s.offset * s.full_cols, static_cast<size_t>(s.valid * s.full_cols) * 4);
  } else {
    const int64_t lc = local_cols(local);
    for (int64_t r = 0; r < s.full_rows; ++r)
      std::memcpy(dst + r * lc, full + r * s.full_cols + s.offset, static_cast<size_t>(s.valid) * 4);
  }
}

void shard_into_full(const ShardSpec& s, const Shape& local, const float* src, float* full) {
  if (s.split_dim == -1) {
    std::memcpy(full, src, static_cast<size_t>(s.full_rows * s.full_cols) * 4);
  } else if (s.split_dim == 0) {
    std::memcpy(full + s.offset * s.full_cols, src, static_cast<size_t>(s.valid * s.full_cols) * 4);
  } else {
    const int64_t lc = local_cols(local);
    for (int64_t r = 0; r < s.full_rows; ++r)
      std::memcpy(full + r * s.full_cols + s.offset, src + r * lc, static_cast<size_t>(s.valid) * 4);
  }
}

size_t ParamStore::add(Param p) {
  check(!finalized_, "ParamStore::add after finalize (" + p.name + ")");
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

void ParamStore::finalize(int64_t align, int64_t expert_align, Device dev) {
  check(!finalized_, "ParamStore::finalize called twice");
  check(align >= 1 && expert_align >= 0, "ParamStore::finalize: alignment must be >= 1");
  if (expert_align == 0) expert_align = align;
  auto round_up = [](int64_t n, int64_t a) { return (n + a - 1) / a * a; };
  int64_t off = 0;
  bool any_expert = false;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& p : params_) {
      if (p.expert != (pass == 1)) continue;
      any_expert = any_expert || p.expert;
      int64_t n = 1;
      for (auto d : p.shape) n *= d;
      p.flat_offset = off;
      off += (n + 15) / 16 * 16;  // 64-byte aligned starts
    }
    if (pass == 0) {
      // The dense region is never empty: an empty one becomes one aligned block of zeros, whether
      // or not this rank holds experts. Its length is then a function of the dense entries alone,
      // the same on every rank of the dp-cp group; a LoRA store whose targets are some experts
      // only (experts.0.gate_proj) holds no dense pair, and its dense region was 0 long on the ep
      // ranks owning a targeted expert but one block long on the others, so their dp-cp bucket
      // collectives differed and the step hung.
      off = std::max(round_up(off, align), align);
      expert_offset_ = off;
    }
  }
  numel_ = any_expert ? expert_offset_ + round_up(off - expert_offset_, expert_align) : expert_offset_;
  dev_ = dev;
  flat_params_ = Tensor::zeros({numel_}, DType::F32, dev);
  flat_grads_ = Tensor::zeros({numel_}, DType::F32, dev);
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

void ParamStore::drop_grads() {
  for (auto& p : params_) p.grad = Tensor();
  flat_grads_ = Tensor();
}

void ParamStore::zero_grad() {
  if (flat_grads_.defined()) flat_grads_.zero_();
}

}  // namespace twinkle
