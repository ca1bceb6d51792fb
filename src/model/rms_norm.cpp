#include "twinkle/model/rms_norm.h"


namespace twinkle {

RMSNorm::RMSNorm(parallel::TensorTable& table, const std::string& name, int64_t dim, double eps, bool tp_partial_grad)
    : table_(&table), dim_(dim), eps_(static_cast<float>(eps)) {
  parallel::TensorEntry e = parallel::replicated_entry(name, {dim}, parallel::ParamInit::Ones);
  e.weight_decay = false;
  e.tp_duplicate = true;
  e.tp_grad_allreduce = tp_partial_grad;
  weight_ = table.add(std::move(e));
}

void RMSNorm::forward(const float* x, float* y, float* rstd, int64_t rows) const {
  table_->kernels().rms_norm.forward(x, table_->data(weight_), y, rstd, rows, dim_, eps_);
}

void RMSNorm::backward(const float* x, const float* rstd, const float* dy, float* dx, int64_t rows) const {
  table_->kernels().rms_norm.backward(x, table_->data(weight_), rstd, dy, dx, table_->grad(weight_), rows, dim_);
}

void RMSNorm::add_forward(const float* x, const float* r, float* h, float* y, float* rstd, int64_t rows) const {
  table_->kernels().add_rms_norm.forward(x, r, h, table_->data(weight_), y, rstd, rows, dim_, eps_);
}

void RMSNorm::add_backward(const float* x, const float* rstd, const float* dy, const float* dres, float* dx,
                           int64_t rows) const {
  table_->kernels().add_rms_norm.backward(x, table_->data(weight_), rstd, dy, dres, dx, table_->grad(weight_), rows,
                                          dim_);
}

void RMSNorm::forward_rope(const float* x, float* y, float* rstd, const int32_t* pos, const kernels::RopeTable& t,
                           int64_t tokens, int64_t heads) const {
  table_->kernels().qk_norm_rope.forward(x, table_->data(weight_), y, rstd, pos, t, tokens, heads, dim_, eps_);
}

void RMSNorm::backward_rope(const float* x, const float* rstd, const int32_t* pos, const kernels::RopeTable& t,
                            const float* dy, float* dx, int64_t tokens, int64_t heads) const {
  table_->kernels().qk_norm_rope.backward(x, table_->data(weight_), rstd, pos, t, dy, dx, table_->grad(weight_), tokens,
                                          heads, dim_);
}

}  // namespace twinkle
