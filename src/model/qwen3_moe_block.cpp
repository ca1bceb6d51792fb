#include "twinkle/model/qwen3_moe_block.h"

#include <cstring>
#include <string>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/moe_aux_loss.h"
#include "twinkle/kernels/cpu/moe_permute.h"
#include "twinkle/kernels/cpu/moe_router.h"
#include "twinkle/kernels/registry.h"

namespace twinkle {

namespace k = kernels::cpu;

Qwen3MoeBlock::Qwen3MoeBlock(parallel::TensorTable& table, const ModelConfig& cfg, int64_t layer, int ep_size)
    : table_(&table),
      H_(cfg.hidden_size),
      E_(cfg.num_experts),
      k_(cfg.num_experts_per_tok),
      I_(cfg.moe_intermediate_size),
      norm_topk_prob_(cfg.norm_topk_prob) {
  check(E_ > 0 && k_ >= 1 && k_ <= E_ && I_ > 0,
        "Qwen3MoeBlock: layer " + std::to_string(layer) + " needs num_experts > 0, 1 <= num_experts_per_tok <= "
        "num_experts and moe_intermediate_size > 0");
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  gate_ = table.add(parallel::replicated_entry(p + "gate.weight", {E_, H_}, parallel::ParamInit::Normal));
  const char* proj[3] = {"gate_proj", "up_proj", "down_proj"};
  (void)ep_size;  // ep > 1 (an owner per expert entry) is not implemented yet: every rank holds every expert
  for (int j = 0; j < 3; ++j) {
    const Shape full = j < 2 ? Shape{I_, H_} : Shape{H_, I_};
    experts_[j].reserve(static_cast<size_t>(E_));
    for (int64_t e = 0; e < E_; ++e) {
      parallel::TensorEntry en = parallel::replicated_entry(
          p + "experts." + std::to_string(e) + "." + proj[j] + ".weight", full, parallel::ParamInit::Normal);
      en.expert = true;
      experts_[j].push_back(table.add(std::move(en)));
    }
  }
}

Qwen3MoeBlock::Weights Qwen3MoeBlock::weights() const {
  Weights w{};
  w.router = table_->data(gate_);
  w.drouter = table_->grad(gate_);
  for (int j = 0; j < 3; ++j) {
    const auto& ids = experts_[j];
    w.w[j] = table_->data(ids[0]);
    w.dw[j] = table_->grad(ids[0]);
    w.stride[j] = E_ > 1 ? table_->data(ids[1]) - w.w[j] : I_ * H_;
    // The grouped GEMM reads expert e at W_0 + e * stride: the entries must be equally spaced.
    for (size_t e = 1; e < ids.size(); ++e)
      check(table_->data(ids[e]) - w.w[j] == static_cast<int64_t>(e) * w.stride[j] &&
                (w.dw[j] == nullptr ||  // a frozen base (LoRA) has no gradient buffer
                 table_->grad(ids[e]) - w.dw[j] == static_cast<int64_t>(e) * w.stride[j]),
            "Qwen3MoeBlock: expert tensors of one projection are not equally spaced in the ParamStore");
  }
  return w;
}

const float* Qwen3MoeBlock::forward(const float* x, const StageBatch& b, MoeActivations& a, Workspace& scratch) const {
  const int64_t T = b.T, R = T * k_;
  const Weights w = weights();
  const kernels::KernelTable& kt = table_->kernels();
  a.x = x;
  a.logits.resize(static_cast<size_t>(T * E_));
  a.probs.resize(static_cast<size_t>(T * E_));
  a.lse.resize(static_cast<size_t>(T));
  a.topk_w.resize(static_cast<size_t>(R));
  a.topk_idx.resize(static_cast<size_t>(R));
  a.row_of_slot.resize(static_cast<size_t>(R));
  a.slot_of_row.resize(static_cast<size_t>(R));
  a.counts.resize(static_cast<size_t>(E_));
  a.xp.resize(static_cast<size_t>(R * H_));
  a.gate.resize(static_cast<size_t>(R * I_));
  a.up.resize(static_cast<size_t>(R * I_));
  a.act.resize(static_cast<size_t>(R * I_));
  a.y.resize(static_cast<size_t>(R * H_));
  a.aux_counts = nullptr;
  a.aux_coeff_scale = 0.0;
  a.z_scale = 0.0;
  // Router: fp32 logits, softmax over all experts, top-k (moe_router.h).
  kt.linear.forward(x, w.router, a.logits.data(), T, E_, H_, false);
  if (router_lora_.active()) parallel::lora_column_forward(*table_, router_lora_, x, a.logits.data(), T, H_, E_);
  k::moe_router_forward(a.logits.data(), a.probs.data(), a.topk_idx.data(), a.topk_w.data(), T, E_, k_,
                        norm_topk_prob_);
  // Permute the k copies of each token into expert order, run the experts, combine.
  k::moe_sort_by_expert(a.topk_idx.data(), T, k_, E_, a.counts.data(), a.row_of_slot.data(), a.slot_of_row.data());
  k::moe_permute_forward(x, a.slot_of_row.data(), a.xp.data(), R, k_, H_);
  kt.grouped_linear.forward(a.xp.data(), w.w[0], w.stride[0], a.counts.data(), E_, a.gate.data(), I_, H_, false);
  kt.grouped_linear.forward(a.xp.data(), w.w[1], w.stride[1], a.counts.data(), E_, a.up.data(), I_, H_, false);
  kt.swiglu.forward(a.gate.data(), a.up.data(), a.act.data(), R * I_);
  kt.grouped_linear.forward(a.act.data(), w.w[2], w.stride[2], a.counts.data(), E_, a.y.data(), H_, I_, false);
  float* out = scratch.get("moe.out", {T, H_}).f32();
  k::moe_unpermute_forward(a.y.data(), a.row_of_slot.data(), a.topk_w.data(), out, T, k_, H_);
  return out;
}

const float* Qwen3MoeBlock::backward(const float* dout, const StageBatch& b, const MoeActivations& a,
                                     Workspace& scratch) const {
  const int64_t T = b.T, R = T * k_;
  check(static_cast<int64_t>(a.topk_idx.size()) == R, "Qwen3MoeBlock::backward: no forward of this micro-batch");
  const Weights w = weights();
  const kernels::KernelTable& kt = table_->kernels();
  float* dy = scratch.get("moe.dy", {R, H_}).f32();
  float* dtopk_w = scratch.get("moe.dtopk_w", {T, k_}).f32();
  k::moe_unpermute_backward(a.y.data(), a.row_of_slot.data(), a.topk_w.data(), dout, dy, dtopk_w, T, k_, H_);
  float* dact = scratch.get("moe.dact", {R, I_}).f32();
  kt.grouped_linear.backward(a.act.data(), w.w[2], w.stride[2], a.counts.data(), E_, dy, dact, w.dw[2], H_, I_,
                             false);
  float* dgate = scratch.get("moe.dgate", {R, I_}).f32();
  float* dup = scratch.get("moe.dup", {R, I_}).f32();
  kt.swiglu.backward(a.gate.data(), a.up.data(), dact, dgate, dup, R * I_);
  float* dxp = scratch.get("moe.dxp", {R, H_}).f32();
  kt.grouped_linear.backward(a.xp.data(), w.w[0], w.stride[0], a.counts.data(), E_, dgate, dxp, w.dw[0], I_, H_,
                             false);
  kt.grouped_linear.backward(a.xp.data(), w.w[1], w.stride[1], a.counts.data(), E_, dup, dxp, w.dw[1], I_, H_,
                             /*accumulate_dx=*/true);
  float* dx = scratch.get("moe.dx", {T, H_}).f32();
  k::moe_permute_backward(dxp, a.row_of_slot.data(), dx, T, k_, H_);
  // Router: the combine weights' gradient through the top-k renormalisation and the full
  // softmax, plus the load-balancing loss on the probabilities and the z-loss on the logits.
  float* dprobs = nullptr;
  if (a.aux_counts != nullptr && a.aux_coeff_scale != 0.0) {
    dprobs = scratch.get("moe.dprobs", {T, E_}).f32();
    std::memset(dprobs, 0, static_cast<size_t>(T * E_) * sizeof(float));
    k::moe_aux_loss_backward(a.aux_counts, b.token_mask.data(), T, E_, a.aux_coeff_scale, dprobs);
  }
  float* dz = nullptr;
  if (a.z_scale != 0.0) {
    dz = scratch.get("moe.dz", {T, E_}).f32();
    std::memset(dz, 0, static_cast<size_t>(T * E_) * sizeof(float));
    k::moe_z_loss_backward(a.probs.data(), a.lse.data(), b.token_mask.data(), T, E_, a.z_scale, dz);
  }
  float* dlogits = scratch.get("moe.dlogits", {T, E_}).f32();
  k::moe_router_backward(a.probs.data(), a.topk_idx.data(), a.topk_w.data(), dtopk_w, dprobs, dz, dlogits, T, E_, k_,
                         norm_topk_prob_);
  kt.linear.backward(a.x, w.router, dlogits, dx, w.drouter, T, E_, H_, /*accumulate_dx=*/true);
  if (router_lora_.active()) parallel::lora_column_backward(*table_, router_lora_, a.x, dlogits, dx, T, H_, E_);
  return dx;
}

}  // namespace twinkle
