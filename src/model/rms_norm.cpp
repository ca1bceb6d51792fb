#include "twinkle/model/rms_norm.h"

#include "twinkle/kernels/cpu/rmsnorm.h"

namespace twinkle {

namespace k = kernels::cpu;

RMSNorm::RMSNorm(parallel::TensorTable& table, const std::string& name, int64_t dim, double eps, bool tp_partial_grad)
    : table_(&table), dim_(dim), eps_(static_cast<float>(eps)) {
  parallel::TensorEntry e = parallel::replicated_entry(name, {dim}, parallel::ParamInit::Ones);
  e.weight_decay = false;
  e.tp_duplicate = true;
  e.tp_grad_allreduce = tp_partial_grad;
  weight_ = table.add(std::move(e));
}

void RMSNorm::forward(const float* x, float* y, float* rstd, int64_t rows) const {
  k::rmsnorm_forward(x, table_->data(weight_), y, rstd, rows, dim_, eps_);
}

void RMSNorm::backward(const float* x, const float* rstd, const float* dy, float* dx, int64_t rows) const {
  k::rmsnorm_backward(x, table_->data(weight_), rstd, dy, dx, table_->grad(weight_), rows, dim_);
}

}  // namespace twinkle
