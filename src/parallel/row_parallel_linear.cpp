#include "twinkle/parallel/row_parallel_linear.h"

#include "twinkle/parallel/column_parallel_linear.h"

namespace twinkle::parallel {

RowParallelLinear::RowParallelLinear(TensorTable& table, const TensorParallel& tp, const std::string& name,
                                     int64_t in_features, int64_t out_features, bool bias)
    : table_(&table), tp_(tp), out_(out_features) {
  TensorEntry w = split_entry(name + ".weight", {out_features, in_features}, 1, tp.rank, tp.size, ParamInit::Normal);
  local_in_ = w.local[1];
  weight_ = table.add(std::move(w));
  if (bias) {
    TensorEntry b = replicated_entry(name + ".bias", {out_features}, ParamInit::Zeros);
    b.weight_decay = false;
    b.tp_duplicate = true;
    b.tp_grad_allreduce = tp.sequence_parallel;  // each rank sees T/tp token rows of d(output)
    bias_ = table.add(std::move(b));
  }
}

const float* RowParallelLinear::forward(const float* x, int64_t T, Workspace& scratch) const {
  float* y_full = scratch.get("tp.y_full", {T, out_}).f32();
  table_->kernels().linear.forward(x, table_->data(weight_), y_full, T, out_, local_in_, false);
  if (lora_.active()) lora_row_forward(*table_, lora_, x, y_full, T, local_in_, out_, scratch);
  float* y_local = tp_.sequence_parallel ? scratch.get("tp.y_local", {tp_.local_rows(T), out_}).f32() : nullptr;
  float* y = tp_reduce_rows(tp_, y_full, y_local, T, out_);
  if (bias_ != kNoParam) table_->kernels().add.add_bias_rows(y, table_->data(bias_), tp_.local_rows(T), out_);
  return y;
}

void RowParallelLinear::backward(const float* x, const float* dy_local, float* dx, int64_t T,
                                 Workspace& scratch) const {
  if (bias_ != kNoParam) table_->kernels().add.bias_grad_rows(dy_local, table_->grad(bias_), tp_.local_rows(T), out_);
  float* dy_full = tp_.sequence_parallel ? scratch.get("tp.dy_full", {T, out_}).f32() : nullptr;
  const float* dy = sp_gather_rows(tp_, dy_local, dy_full, T, out_);
  table_->kernels().linear.backward(x, table_->data(weight_), dy, dx, table_->grad(weight_), T, out_, local_in_, false);
  if (lora_.active()) lora_row_backward(*table_, lora_, x, dy, dx, T, local_in_, out_, scratch);
}

}  // namespace twinkle::parallel
