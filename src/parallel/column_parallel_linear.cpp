#include "twinkle/parallel/column_parallel_linear.h"

#include <vector>

#include "twinkle/core/error.h"

namespace twinkle::parallel {

ColumnParallelLinear::ColumnParallelLinear(TensorTable& table, const TensorParallel& tp, int64_t in_features,
                                           std::vector<Part> parts, bool bias)
    : table_(&table), tp_(tp), in_(in_features) {
  for (const auto& p : parts) {
    TensorEntry w = split_entry(p.name + ".weight", {p.out_features, in_features}, 0, tp.rank, tp.size, ParamInit::Normal);
    local_out_.push_back(w.local[0]);
    weight_.push_back(table.add(std::move(w)));
    if (bias) {
      TensorEntry b = split_entry(p.name + ".bias", {p.out_features}, 0, tp.rank, tp.size, ParamInit::Zeros);
      b.weight_decay = false;
      bias_.push_back(table.add(std::move(b)));
    }
  }
}

void ColumnParallelLinear::set_lora(size_t part, const LoraPair& p) {
  check(part < weight_.size(), "ColumnParallelLinear::set_lora: no part " + std::to_string(part));
  lora_.resize(weight_.size());
  lora_[part] = p;
}

const float* ColumnParallelLinear::weight_block() const {
  check(bias_.empty(), "ColumnParallelLinear::weight_block: the parts have biases between their weights");
  const float* w0 = table_->data(weight_[0]);
  int64_t off = 0;
  for (size_t i = 0; i < weight_.size(); ++i) {
    check(table_->data(weight_[i]) == w0 + off, "ColumnParallelLinear::weight_block: parts are not adjacent");
    off += local_out_[i] * in_;
  }
  return w0;
}

bool ColumnParallelLinear::has_weight_block() const {
  if (!bias_.empty() || weight_.empty()) return false;
  for (const auto& l : lora_)
    if (l.active()) return false;  // a LoRA part adds its own term: the unfused path runs it
  int64_t off = 0;
  const float* g0 = table_->grad(weight_[0]);  // null for a frozen base: no gradient block at all
  for (size_t i = 0; i < weight_.size(); ++i) {
    if (table_->data(weight_[i]) != table_->data(weight_[0]) + off) return false;
    const float* gi = table_->grad(weight_[i]);
    if ((g0 == nullptr) != (gi == nullptr) || (g0 != nullptr && gi != g0 + off)) return false;
    off += local_out_[i] * in_;
  }
  return true;
}

const float* ColumnParallelLinear::forward_swiglu(const float* x_local, float* x_full, float* gu, float* act,
                                                  int64_t T) const {
  check(weight_.size() == 2 && local_out_[0] == local_out_[1] && has_weight_block(),
        "ColumnParallelLinear::forward_swiglu needs two equal, adjacent parts without bias");
  const float* x = sp_gather_rows(tp_, x_local, x_full, T, in_);
  table_->kernels().gate_up_swiglu.forward(x, weight_block(), gu, act, T, local_out_[0], in_);
  return x;
}

const float* ColumnParallelLinear::backward_swiglu(const float* x, const float* gu, const float* dact, int64_t T,
                                                   Workspace& scratch) const {
  const int64_t I = local_out_[0];
  const kernels::GateUpSwigluOp& op = table_->kernels().gate_up_swiglu;
  float* dgu = op.uses_dgu ? scratch.get("tp.dgu", {T, 2 * I}).f32() : nullptr;  // bf16: never written
  float* dx_full = scratch.get("tp.dx_full", {T, in_}).f32();
  op.backward(x, weight_block(), gu, dact, dgu, dx_full, table_->grad(weight_[0]), T, I,
                                            in_, false);
  float* dx_local = tp_.sequence_parallel ? scratch.get("tp.dx_local", {tp_.local_rows(T), in_}).f32() : nullptr;
  return tp_reduce_rows(tp_, dx_full, dx_local, T, in_);
}

const float* ColumnParallelLinear::forward(const float* x_local, float* x_full, float* const* y, int64_t T,
                                          Workspace& scratch) const {
  const float* x = sp_gather_rows(tp_, x_local, x_full, T, in_);
  const kernels::LinearOp& lin = table_->kernels().linear;
  for (size_t i = 0; i < weight_.size(); ++i) lin.forward(x, table_->data(weight_[i]), y[i], T, local_out_[i], in_, false);
  for (size_t i = 0; i < bias_.size(); ++i)
    table_->kernels().add.add_bias_rows(y[i], table_->data(bias_[i]), T, local_out_[i]);
  for (size_t i = 0; i < lora_.size(); ++i)
    if (lora_[i].active()) lora_column_forward(*table_, lora_[i], x, y[i], T, in_, local_out_[i], scratch);
  return x;
}

const float* ColumnParallelLinear::backward(const float* x, const float* const* dy, int64_t T,
                                            Workspace& scratch) const {
  for (size_t i = 0; i < bias_.size(); ++i)
    table_->kernels().add.bias_grad_rows(dy[i], table_->grad(bias_[i]), T, local_out_[i]);
  float* dx_full = scratch.get("tp.dx_full", {T, in_}).f32();
  const kernels::LinearOp& lin = table_->kernels().linear;
  for (size_t i = 0; i < weight_.size(); ++i)
    lin.backward(x, table_->data(weight_[i]), dy[i], dx_full, table_->grad(weight_[i]), T, local_out_[i], in_,
                 /*accumulate_dx=*/i > 0);
  for (size_t i = 0; i < lora_.size(); ++i)
    if (lora_[i].active()) lora_column_backward(*table_, lora_[i], x, dy[i], dx_full, T, in_, local_out_[i], scratch);
  float* dx_local = tp_.sequence_parallel ? scratch.get("tp.dx_local", {tp_.local_rows(T), in_}).f32() : nullptr;
  return tp_reduce_rows(tp_, dx_full, dx_local, T, in_);
}

}  // namespace twinkle::parallel
