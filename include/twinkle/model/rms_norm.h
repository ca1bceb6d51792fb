// twinkle/model/rms_norm.h — an RMSNorm layer with a replicated weight.
//
// y = x * rsqrt(mean(x^2) + eps) * w over the last dim (HF Qwen3RMSNorm; kernels/cpu/rmsnorm.h).
// The weight [dim] is replicated over tp. Its gradient is a tp-partial sum when each tp rank
// sees only part of the rows it normalises — token rows under sequence parallelism
// (Megatron's sequence_parallel layernorm grads), or its own heads for q_norm/k_norm under
// tp > 1 — and then `tp_partial_grad` marks it for finalize_grads.
#pragma once
#include <cstdint>
#include <string>

#include "twinkle/parallel/tensor_table.h"

namespace twinkle {

class RMSNorm {
 public:
  RMSNorm() = default;
  /// Adds `name` [dim] (ones init, no weight decay, tp-duplicate) to `table`.
  RMSNorm(parallel::TensorTable& table, const std::string& name, int64_t dim, double eps, bool tp_partial_grad);
  size_t weight_entry() const { return weight_; }
  /// x, y [rows, dim]; rstd [rows] saved for backward.
  void forward(const float* x, float* y, float* rstd, int64_t rows) const;
  /// dx [rows, dim] (OVERWRITTEN; may alias dy); accumulates dw.
  void backward(const float* x, const float* rstd, const float* dy, float* dx, int64_t rows) const;

  /// Residual add fused with the norm (the add_rms_norm op): h = x + r, y = RMSNorm(h); h saved.
  void add_forward(const float* x, const float* r, float* h, float* y, float* rstd, int64_t rows) const;
  /// Backward of a norm whose input also feeds a residual: dx = RMSNorm backward(dy) + dres
  /// (OVERWRITTEN; may alias dres); accumulates dw. x is the norm's input (h of add_forward).
  void add_backward(const float* x, const float* rstd, const float* dy, const float* dres, float* dx,
                    int64_t rows) const;
  /// Per-head norm fused with RoPE (the qk_norm_rope op; Qwen3's q_norm/k_norm then
  /// apply_rotary_pos_emb): x, y [tokens, heads, dim]; rstd [tokens*heads].
  void forward_rope(const float* x, float* y, float* rstd, const int32_t* pos, const kernels::RopeTable& t,
                    int64_t tokens, int64_t heads) const;
  /// Backward of forward_rope: dx OVERWRITTEN (may alias dy); accumulates dw.
  void backward_rope(const float* x, const float* rstd, const int32_t* pos, const kernels::RopeTable& t,
                     const float* dy, float* dx, int64_t tokens, int64_t heads) const;
  /// The kernels this layer computes with (its TensorTable's).
  const kernels::KernelTable& kernels() const { return table_->kernels(); }

 private:
  const parallel::TensorTable* table_ = nullptr;
  size_t weight_ = parallel::kNoParam;
  int64_t dim_ = 0;
  float eps_ = 1e-6f;
};

}  // namespace twinkle
