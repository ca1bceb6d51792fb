// Qwen3Chunk: one model chunk's forward/backward (embedding, layers, final norm, fused lm head + loss),
// its MoE router statistics and its communication-hook units.
#include "twinkle/model/qwen3_chunk.h"

#include <algorithm>
#include <vector>

#include "twinkle/core/device_copy.h"
#include "twinkle/kernels/cpu/moe_aux_loss.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/parallel/lora_dropout.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle {

Qwen3DecoderLayer* Qwen3Chunk::layer(int64_t l) {
  if (l < layer0_ || l >= layer0_ + nlayers_) return nullptr;
  return &layers_[static_cast<size_t>(l - layer0_)];
}

StageActivations& Qwen3Chunk::slot_acts(int slot) {
  if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
  return slots_[static_cast<size_t>(slot)];
}

ActivationDims Qwen3Chunk::activation_dims() const {
  const Qwen3Model& M = *model_;
  ActivationDims d;
  d.hidden = M.cfg_.hidden_size;
  d.q_heads = M.cfg_.num_attention_heads / M.tp_;
  d.kv_heads = M.cfg_.num_key_value_heads / M.tp_;
  d.q_width = d.q_heads * M.cfg_.head_dim;
  d.kv_width = d.kv_heads * M.cfg_.head_dim;
  d.intermediate = M.cfg_.intermediate_size / M.tp_;
  d.layers = nlayers_;
  for (const auto& l : layers_) d.moe_layer.push_back(l.is_moe);
  d.tp = M.tp_;
  d.sequence_parallel = M.sp_;
  d.last_stage = last_;
  d.recompute = M.recompute_;
  d.device = M.dev_;
  return d;
}

size_t Qwen3Chunk::saved_activation_bytes() const {
  size_t b = 0;
  for (auto& a : slots_) b += a.bytes();
  return b;
}

double Qwen3Chunk::forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training) {
  Qwen3Model& M = *model_;
  StageActivations& a = slot_acts(slot);
  const ActivationDims dims = activation_dims();
  a.reserve(dims, b.T);
  M.work_.reserve(dims, b.T);
  const int64_t T = b.T, Tl = M.hidden_rows(b), H = M.cfg_.hidden_size;
  if (first_) {
    unit_use(0);
    embed_tokens_.forward(b.ids_ptr(), T, a.x0, M.scratch_);
  } else {
    check(in_hidden != nullptr, "Qwen3Model::forward: a non-first stage needs the previous stage's hidden state");
    copy_bytes(M.dev_, a.x0, in_hidden, static_cast<size_t>(Tl * H) * 4);
  }
  const float* x = a.x0;
  const parallel::LoraDropout drop = M.lora_dropout_for(b, training, slot);
  const parallel::LoraDropoutScope drop_scope(drop.p > 0 ? &drop : nullptr);
  for (size_t i = 0; i < layers_.size(); ++i) {
    unit_use(unit_layer0_ + i);
    if (dims.recomputed(i)) {
      // Full recompute: the layer runs in the stage's work buffers, writing only its output
      // into the slot; backward runs it again.
      DecoderLayerActivations& w = M.work_.layer;
      float* own_out = w.out;
      w.out = a.layers[i].out;
      layers_[i].forward(x, b, w, M.scratch_);
      w.out = own_out;
    } else {
      if (M.recompute_ == Recompute::Selective) {  // core attention output in the shared buffers
        a.layers[i].attn.ctx = M.work_.layer.attn.ctx;
        a.layers[i].attn.lse = M.work_.layer.attn.lse;
      }
      layers_[i].forward(x, b, a.layers[i], M.scratch_);
    }
    x = a.layers[i].out;
    M.comm_progress();
  }
  if (M.cfg_.is_moe()) moe_router_losses(b, a, training);
  if (!last_) return 0.0;
  unit_use(unit_entries_.size() - 1);
  norm_.forward(x, a.final_norm, a.rstd_final, Tl);
  const bool grad = training && grad_scale != 0.0f;
  if (!grad && b.num_targets == 0) return 0.0;  // nothing to score (generation)
  return lm_head_.forward(a.final_norm, b.targets_ptr(), T, grad_scale, grad ? a.d_final_norm : nullptr, M.scratch_);
}


// The router statistics of the micro-batch over this stage's MoE layers (real tokens only) and
// the router-loss gradients each MoE block's backward adds (objective: coeff * aux / micro-batches,
// z_coeff * z / micro-batches; tests/reference/qwen3_moe_ref.py step_losses). Under sequence
// parallelism each tp rank routed its own token shard: the per-layer counts, probability sums,
// token counts and z sums are summed over tp first (one all-reduce per micro-batch; Megatron's
// aggregation over the tp-cp group, parallel/moe_router_loss.h), so every value and gradient
// scale equals one process's and every tp rank holds the same statistics.
void Qwen3Chunk::moe_router_losses(const StageBatch& b, StageActivations& a, bool training) {
  Qwen3Model& M = *model_;
  namespace k = kernels::cpu;
  const kernels::MoeRouterLossOp& op = M.kernels_.moe_router_loss;
  const int64_t E = M.cfg_.num_experts, K = M.cfg_.num_experts_per_tok, Tl = M.hidden_rows(b);
  const double per_mb = 1.0 / static_cast<double>(M.global_mbs_);
  const double coeff = training ? M.opts_.moe_aux_loss_coeff : 0.0, zc = training ? M.opts_.moe_z_loss_coeff : 0.0;
  const bool global = M.opts_.moe_aux_loss_type == "global";
  const uint8_t* mask = b.token_mask_ptr() + (M.sp_ ? M.ps_->tp_rank() * Tl : 0);  // on the model's device
  // Per MoE layer: counts [E], prob_sum [E], real tokens, sum of lse^2 (doubles: exact for counts).
  const size_t W = static_cast<size_t>(2 * E + 2);
  std::vector<size_t> moe_layers;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].is_moe) moe_layers.push_back(i);
  std::vector<double>& red = a.moe.reduce_buf;
  red.assign(W * moe_layers.size(), 0.0);
  std::vector<int64_t> cnt(static_cast<size_t>(E));
  for (size_t j = 0; j < moe_layers.size(); ++j) {
    MoeActivations& m = a.layers[moe_layers[j]].moe;
    double* o = red.data() + W * j;
    std::fill(cnt.begin(), cnt.end(), 0);
    const int64_t n = op.routing_stats(m.probs, m.topk_idx, mask, Tl, E, K, o + E, cnt.data());
    for (int64_t e = 0; e < E; ++e) o[e] = static_cast<double>(cnt[static_cast<size_t>(e)]);
    o[2 * E] = static_cast<double>(n);
    o[2 * E + 1] = op.z_loss_forward(m.logits, mask, Tl, E, m.lse);
  }
  // Megatron aggregates the router statistics over the tp x cp shards of the sequence.
  if (M.sp_ && !red.empty()) M.ps_->tp->all_reduce_f64(red.data(), static_cast<int64_t>(red.size()), dist::ReduceOp::Sum);
  if (M.ps_->cp_size() > 1 && !red.empty())
    M.ps_->cp->all_reduce_f64(red.data(), static_cast<int64_t>(red.size()), dist::ReduceOp::Sum);
  MoeStageStats& s = a.moe;
  s.prob_sum.assign(static_cast<size_t>(E), 0.0);
  s.counts.assign(static_cast<size_t>(E), 0);
  s.n = 0;
  s.layers = static_cast<int64_t>(moe_layers.size());
  s.aux_per_layer = s.z = 0.0;
  for (size_t j = 0; j < moe_layers.size(); ++j) {
    MoeActivations& m = a.layers[moe_layers[j]].moe;
    const double* o = red.data() + W * j;
    m.real_counts.resize(static_cast<size_t>(E));
    m.real_prob_sum.assign(o + E, o + 2 * E);
    for (int64_t e = 0; e < E; ++e) {
      m.real_counts[static_cast<size_t>(e)] = static_cast<int64_t>(o[e]);
      s.counts[static_cast<size_t>(e)] += m.real_counts[static_cast<size_t>(e)];
      s.prob_sum[static_cast<size_t>(e)] += o[E + e];
    }
    const int64_t n = static_cast<int64_t>(o[2 * E]);
    s.n += n;
    const double lscale = k::moe_aux_scale_per_layer(E, K, n);
    s.aux_per_layer += k::moe_aux_loss_value(m.real_prob_sum.data(), m.real_counts.data(), E, lscale);
    if (n > 0) s.z += o[2 * E + 1] / static_cast<double>(n);
    if (coeff > 0 && !global) {
      m.aux_counts = m.real_counts.data();
      m.aux_coeff_scale = coeff * per_mb * lscale;
    }
    if (zc > 0 && n > 0) m.z_scale = zc * per_mb / static_cast<double>(n);
  }
  if (coeff > 0 && global) {  // transformers: every MoE layer's statistics of the micro-batch together (pp = 1)
    const double scale = coeff * per_mb * k::moe_aux_scale_global(E, s.n);
    for (size_t i : moe_layers) {
      a.layers[i].moe.aux_counts = s.counts.data();
      a.layers[i].moe.aux_coeff_scale = scale;
    }
  }
}

const MoeStageStats& Qwen3Chunk::moe_stats(int slot) const {
  check(static_cast<size_t>(slot) < slots_.size(), "Qwen3Model::moe_stats: slot " + std::to_string(slot) + " has no forward");
  return slots_[static_cast<size_t>(slot)].moe;
}

const StageActivations& Qwen3Chunk::slot_activations(int slot) const {
  check(slot >= 0 && static_cast<size_t>(slot) < slots_.size(),
        "Qwen3Model::slot_activations: slot " + std::to_string(slot) + " has no forward");
  return slots_[static_cast<size_t>(slot)];
}

const float* Qwen3Chunk::output_hidden(int slot) {
  check(static_cast<size_t>(slot) < slots_.size() && slots_[static_cast<size_t>(slot)].T > 0,
        "Qwen3Model::output_hidden: slot " + std::to_string(slot) + " has no forward");
  const StageActivations& a = slots_[static_cast<size_t>(slot)];
  return a.layers.empty() ? a.x0 : a.layers.back().out;
}

const float* Qwen3Chunk::backward(int slot, const StageBatch& b, const float* d_out) {
  Qwen3Model& M = *model_;
  check(static_cast<size_t>(slot) < slots_.size(), "Qwen3Model::backward: slot " + std::to_string(slot) + " has no forward");
  StageActivations& a = slots_[static_cast<size_t>(slot)];
  a.check_holds(b.T, slot);
  const ActivationDims dims = activation_dims();
  const int64_t T = b.T, Tl = M.hidden_rows(b), H = M.cfg_.hidden_size;
  float* bufs[2] = {M.scratch_.get("stage.dA", {Tl, H}).f32(), M.scratch_.get("stage.dB", {Tl, H}).f32()};
  int cur = 0;
  const float* dcur = d_out;
  if (last_) {
    const float* xl = a.layers.empty() ? a.x0 : a.layers.back().out;
    norm_.backward(xl, a.rstd_final, a.d_final_norm, bufs[cur], Tl);
    dcur = bufs[cur];
    cur ^= 1;
    if (final_backward_) unit_grads_final(unit_entries_.size() - 1);  // the lm head's came in forward
  }
  check(dcur != nullptr, "Qwen3Model::backward: a non-last stage needs the next stage's gradient");
  const parallel::LoraDropout drop = M.lora_dropout_for(b, /*training=*/true, slot);  // the forward's masks
  const parallel::LoraDropoutScope drop_scope(drop.p > 0 ? &drop : nullptr);
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* x = i == 0 ? a.x0 : a.layers[i - 1].out;
    if (dims.recomputed(i)) {  // Full: the layer forward again from its saved input
      layers_[i].forward(x, b, M.work_.layer, M.scratch_);
      layers_[i].backward(x, dcur, bufs[cur], b, M.work_.layer, M.scratch_);
    } else {
      if (M.recompute_ == Recompute::Selective) {  // the core attention again from the saved q, k, v
        a.layers[i].attn.ctx = M.work_.layer.attn.ctx;
        a.layers[i].attn.lse = M.work_.layer.attn.lse;
        layers_[i].self_attn.recompute_core(b, a.layers[i].attn);
      }
      layers_[i].backward(x, dcur, bufs[cur], b, a.layers[i], M.scratch_);
    }
    dcur = bufs[cur];
    cur ^= 1;
    if (final_backward_) unit_grads_final(unit_layer0_ + i);
    M.comm_progress();
  }
  if (!first_) return dcur;
  if (b.dev_ids_nopad)  // the device copy already has the padding id masked
    embed_tokens_.backward(dcur, b.dev_ids_nopad, T, std::nullopt, M.scratch_);
  else
    embed_tokens_.backward(dcur, b.ids.data(), T, M.cfg_.pad_token_id, M.scratch_);
  if (final_backward_) unit_grads_final(0);
  return nullptr;
}

std::vector<float> Qwen3Chunk::last_token_logits(int slot, const StageBatch& b) {
  Qwen3Model& M = *model_;
  check(M.tp_ == 1 && first_ && last_ && !M.cp_attention_,
        "last_token_logits needs a single-stage model with tp = 1 and cp = 1");
  const StageActivations& a = slot_acts(slot);
  a.check_holds(b.T, slot);
  return lm_head_.logits(a.final_norm + (b.T - 1) * M.cfg_.hidden_size);
}

void Qwen3Chunk::unit_grads_final(size_t unit) {
  Qwen3Model& M = *model_;
  if (!M.hooks_on_ || unit >= unit_entries_.size() || unit_final_[unit]) return;
  unit_final_[unit] = 1;
  for (size_t id : unit_entries_[unit]) {
    const auto& e = M.table_[id];
    if (e.param == parallel::kNoParam || e.adapter || M.embedding_group_param(id)) continue;
    Param& p = M.store_[e.param];
    if (!p.grad.defined()) continue;  // frozen (LoRA)
    if (M.tp_ > 1 && p.tp_grad_allreduce) parallel::all_reduce_sum(*M.ps_->tp, p.grad.f32(), p.grad.numel());
    if (M.hooks_.grad_ready) M.hooks_.grad_ready(p);
  }
}

void Qwen3Chunk::unit_use(size_t unit) {
  Qwen3Model& M = *model_;
  if (!M.hooks_.param_use || unit >= unit_entries_.size()) return;
  for (size_t id : unit_entries_[unit]) {
    const auto& e = M.table_[id];
    if (e.param != parallel::kNoParam && !e.adapter) M.hooks_.param_use(M.store_[e.param]);
  }
}
}  // namespace twinkle
