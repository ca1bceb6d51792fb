// Megatron's per-layer router losses over a split sequence (see twinkle/parallel/moe_router_loss.h).
#include "twinkle/parallel/moe_router_loss.h"

#include <string>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/moe_aux_loss.h"

namespace twinkle::parallel {

namespace kc = twinkle::kernels::cpu;

void PerLayerRouterLoss::forward(dist::ProcessGroup& seq, const float* probs, const int32_t* topk_idx,
                                 const float* logits, const uint8_t* token_mask, int64_t T, int64_t E, int64_t k,
                                 double aux_coeff, double z_coeff) {
  if (T < 0 || E < 1 || k < 1 || k > E)
    throw Error("PerLayerRouterLoss: need T >= 0, E >= 1, 1 <= k <= E, got T=" + std::to_string(T) + " E=" +
                std::to_string(E) + " k=" + std::to_string(k));
  if (z_coeff != 0.0 && !logits) throw Error("PerLayerRouterLoss: z_coeff != 0 needs the router logits");
  T_ = T;
  E_ = E;
  k_ = k;
  aux_coeff_ = aux_coeff;
  z_coeff_ = z_coeff;
  counts_.assign(static_cast<size_t>(E + 1), 0);
  psum_.assign(static_cast<size_t>(E), 0.0);
  const int64_t n_local = kc::moe_routing_stats(probs, topk_idx, token_mask, T, E, k, psum_.data(), counts_.data());
  counts_[E] = n_local;
  seq.all_reduce(counts_.data(), E + 1);  // counts and N over the sequence partition
  n_ = counts_[E];
  counts_.resize(static_cast<size_t>(E));
  scale_ = kc::moe_aux_scale_per_layer(E, k, n_);
  double parts[2] = {aux_coeff * kc::moe_aux_loss_value(psum_.data(), counts_.data(), E, scale_), 0.0};
  if (z_coeff != 0.0) {
    if (lse_.size() < static_cast<size_t>(T)) lse_.resize(static_cast<size_t>(T));
    const double zsum = kc::moe_z_loss_forward(logits, token_mask, T, E, lse_.data());
    parts[1] = n_ > 0 ? z_coeff * zsum / static_cast<double>(n_) : 0.0;
  }
  seq.all_reduce_f64(parts, 2);  // this rank's parts -> the micro-batch's values
  aux_ = parts[0];
  z_ = parts[1];
}

void PerLayerRouterLoss::backward(const float* probs, const uint8_t* token_mask, double grad_scale, float* dprobs,
                                  float* dlogits_extra) const {
  if (aux_coeff_ != 0.0) kc::moe_aux_loss_backward(counts_.data(), token_mask, T_, E_, grad_scale * aux_coeff_ * scale_, dprobs);
  if (z_coeff_ != 0.0 && n_ > 0) {
    if (!dlogits_extra) throw Error("PerLayerRouterLoss::backward: z-loss on but dlogits_extra is null");
    kc::moe_z_loss_backward(probs, lse_.data(), token_mask, T_, E_, grad_scale * z_coeff_ / static_cast<double>(n_),
                            dlogits_extra);
  }
}

}  // namespace twinkle::parallel
