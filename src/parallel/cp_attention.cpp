// ContextParallelAttention: p2p / a2a dispatch with per-micro-batch Ulysses state (see cp_attention.h).
#include "twinkle/parallel/cp_attention.h"

#include <string>

#include "twinkle/core/error.h"

namespace twinkle::parallel {

ContextParallelAttention::ContextParallelAttention(std::shared_ptr<dist::ProcessGroup> cp, CpCommType type,
                                                   int64_t num_heads, int64_t num_kv_heads, int tp,
                                                   const kernels::KernelTable* kernels, Device device)
    : cp_(cp), type_(type), tp_(tp), dev_(device), ring_(cp, kernels, device) {
  check(tp >= 1, "ContextParallelAttention: tp size must be >= 1, got " + std::to_string(tp));
  if (type_ == CpCommType::A2A) UlyssesAttention::check_heads(num_heads, num_kv_heads, cp_->size(), tp);
}

UlyssesAttention& ContextParallelAttention::ulysses(const void* key) {
  auto& u = ulysses_[key];
  if (!u) u = std::make_unique<UlyssesAttention>(cp_, tp_, dev_);
  return *u;
}

void ContextParallelAttention::forward(const void* key, const CpLayout& lay, const float* q, const float* k, const float* v,
                                       float* out, float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                       int64_t window, const kernels::AttentionOp* attn) {
  if (type_ == CpCommType::P2P) {
    check(lse != nullptr, "ContextParallelAttention::forward: p2p needs an lse buffer");
    ring_.forward(lay, q, k, v, out, lse, Hq, Hkv, D, scale, window);
  } else {
    ulysses(key).forward(lay, q, k, v, out, Hq, Hkv, D, scale, window, attn);
  }
}

void ContextParallelAttention::backward(const void* key, const CpLayout& lay, const float* q, const float* k, const float* v,
                                        const float* out, const float* lse, const float* dout, float* dq, float* dk,
                                        float* dv, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window,
                                        const kernels::AttentionOp* attn) {
  if (type_ == CpCommType::P2P)
    ring_.backward(lay, q, k, v, out, lse, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
  else
    ulysses(key).backward(lay, dout, dq, dk, dv, Hq, Hkv, D, scale, window, attn);
}

}  // namespace twinkle::parallel
