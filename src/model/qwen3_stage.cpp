// Qwen3Model: one pipeline stage's forward/backward (embedding, layers, final norm, fused lm head + loss).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "twinkle/core/device_copy.h"
#include "twinkle/kernels/cpu/embedding.h"
#include "twinkle/kernels/cpu/moe_aux_loss.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/parallel/lora_dropout.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle {

StageBatch Qwen3Model::prepare(const MicroBatch& mb) const {
  StageBatch b;
  const int64_t T0 = static_cast<int64_t>(mb.input_ids.size());
  check(T0 > 0, "empty micro-batch");
  check(mb.labels.size() == mb.input_ids.size() && mb.position_ids.size() == mb.input_ids.size(),
        "micro-batch: input_ids, labels and position_ids differ in length");
  check(mb.cu_seqlens.size() >= 2 && mb.cu_seqlens.front() == 0 && mb.cu_seqlens.back() == T0,
        "micro-batch: cu_seqlens must start at 0 and end at the token count");
  kernels::cpu::check_token_ids(mb.input_ids.data(), T0, cfg_.vocab_size);
  b.ids = mb.input_ids;
  b.positions = mb.position_ids;
  b.cu_seqlens = mb.cu_seqlens;
  b.targets.assign(static_cast<size_t>(T0), kIgnoreIndex);
  for (size_t s = 0; s + 1 < mb.cu_seqlens.size(); ++s)
    for (int32_t t = mb.cu_seqlens[s]; t + 1 < mb.cu_seqlens[s + 1]; ++t) {
      int32_t lab = mb.labels[static_cast<size_t>(t) + 1];
      if (lab != kIgnoreIndex) {
        check(lab >= 0 && lab < cfg_.vocab_size, "label " + std::to_string(lab) + " at token " + std::to_string(t + 1) +
                                                   " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
        b.targets[static_cast<size_t>(t)] = lab;
        ++b.num_targets;
      }
    }
  for (int32_t p : b.positions)
    check(p >= 0 && p < cfg_.max_position_embeddings,
          "position id " + std::to_string(p) + " exceeds max_position_embeddings " +
              std::to_string(cfg_.max_position_embeddings));
  b.T = T0;
  if (cp_attention_) {
    // Context parallelism: pad every segment to 2*cp (2*cp*tp under SP) and keep this rank's
    // load-balanced chunks (Megatron get_batch_on_this_cp_rank; Twinkle's pad_cp / split_cp,
    // src/twinkle/processor/base.py).
    const parallel::CpShard sh = parallel::cp_split_micro_batch(mb, ps_->cp_size(), ps_->cp_rank(), tp_, sp_);
    for (int32_t p : sh.positions)
      check(p < cfg_.max_position_embeddings, "position id " + std::to_string(p) + " (after padding for cp " +
                                                  std::to_string(ps_->cp_size()) + ") exceeds max_position_embeddings " +
                                                  std::to_string(cfg_.max_position_embeddings));
    b.ids = sh.ids;
    b.targets = sh.targets;
    b.positions = sh.positions;
    b.num_targets = sh.num_targets;
    b.T = sh.tokens();
    b.cu_seqlens = {0, static_cast<int32_t>(b.T)};
    auto lay = std::make_shared<parallel::CpLayout>(parallel::CpLayout::from_shard(sh));
    lay->upload(dev_);  // the ring's and Ulysses' kernels read the coordinates on the model's device
    b.cp = std::move(lay);
    b.cp_attention = cp_attention_;
    if (cfg_.is_moe()) {
      // The real-token mask of this rank's tokens (router statistics): the same split applied to
      // the attention mask carried in place of the ids, so a right-padding token and a cp pad
      // token (id 0) both read 0.
      check(mb.attention_mask.empty() || mb.attention_mask.size() == mb.input_ids.size(),
            "micro-batch: attention_mask differs in length from input_ids");
      MicroBatch m = mb;
      for (size_t i = 0; i < m.input_ids.size(); ++i) m.input_ids[i] = mb.attention_mask.empty() || mb.attention_mask[i] ? 1 : 0;
      const parallel::CpShard sm = parallel::cp_split_micro_batch(m, ps_->cp_size(), ps_->cp_rank(), tp_, sp_);
      b.token_mask.assign(sm.ids.begin(), sm.ids.end());
      for (uint8_t v : b.token_mask) b.num_real += v;
    }
    if (lora_.lora_dropout > 0 && has_adapter()) {
      // The dropout masks' token identities of this rank's share: the micro-batch's keys sent
      // through the same split as the tokens (token index + 1 carried in place of the ids; a cp
      // pad token reads 0 and gets a key of a row no batch reaches — nothing reads its output).
      const std::vector<uint64_t> full = lora_token_keys(mb);
      MicroBatch m = mb;
      for (size_t i = 0; i < m.input_ids.size(); ++i) m.input_ids[i] = static_cast<int32_t>(i + 1);
      const parallel::CpShard sk = parallel::cp_split_micro_batch(m, ps_->cp_size(), ps_->cp_rank(), tp_, sp_);
      check(static_cast<int64_t>(sk.ids.size()) == b.T, "LoRA dropout: the cp split of the token keys disagrees");
      b.lora_token_key.resize(static_cast<size_t>(b.T));
      for (int64_t j = 0; j < b.T; ++j) {
        const int32_t id = sk.ids[static_cast<size_t>(j)];
        b.lora_token_key[static_cast<size_t>(j)] =
            id > 0 ? full[static_cast<size_t>(id - 1)] : parallel::lora_token_key(0xffffffffll, j);
      }
    }
    if (dev_ != Device::CPU) upload(b);
    return b;
  }
  check(mb.attention_mask.empty() || mb.attention_mask.size() == mb.input_ids.size(),
        "micro-batch: attention_mask differs in length from input_ids");
  if (mb.attention_mask.empty())
    b.token_mask.assign(static_cast<size_t>(T0), 1);
  else
    for (uint8_t m : mb.attention_mask) b.token_mask.push_back(m ? 1 : 0);
  for (uint8_t m : b.token_mask) b.num_real += m;
  if (sp_ && b.T % tp_) {
    const int64_t pad = tp_ - b.T % tp_;
    for (int64_t i = 0; i < pad; ++i) {
      b.ids.push_back(0);
      b.targets.push_back(kIgnoreIndex);
      b.positions.push_back(static_cast<int32_t>(i));
      b.token_mask.push_back(0);
    }
    b.T += pad;
    b.cu_seqlens.push_back(static_cast<int32_t>(b.T));
  }
  if (lora_.lora_dropout > 0 && has_adapter()) {
    b.lora_token_key = lora_token_keys(mb);
    b.lora_token_key.resize(static_cast<size_t>(b.T));
    for (int64_t t = T0; t < b.T; ++t)  // SP padding: a row id no batch reaches
      b.lora_token_key[static_cast<size_t>(t)] = parallel::lora_token_key(0xffffffffll, t - T0);
  }
  if (dev_ != Device::CPU) upload(b);
  return b;
}

std::vector<uint64_t> Qwen3Model::lora_token_keys(const MicroBatch& mb) const {
  // Token identities for the dropout masks (parallel/lora_dropout.h): global row, position.
  check(mb.segment_row.empty() || mb.segment_row.size() + 1 == mb.cu_seqlens.size(),
        "micro-batch: segment_row has " + std::to_string(mb.segment_row.size()) + " entries for " +
            std::to_string(mb.cu_seqlens.size() - 1) + " segments");
  std::vector<uint64_t> k(mb.input_ids.size(), 0);
  for (size_t s = 0; s + 1 < mb.cu_seqlens.size(); ++s) {
    const int64_t row = mb.segment_row.empty() ? static_cast<int64_t>(s) : mb.segment_row[s];
    for (int32_t t = mb.cu_seqlens[s]; t < mb.cu_seqlens[s + 1]; ++t)
      k[static_cast<size_t>(t)] = parallel::lora_token_key(row, t - mb.cu_seqlens[s]);
  }
  return k;
}

// One host -> device copy per micro-batch: ids, targets, positions, cu_seqlens, the token mask and the ids of the
// embedding backward (the padding id masked to -1: its row gets no gradient from the lookup, as
// VocabParallelEmbedding::backward does on the host).
void Qwen3Model::upload(StageBatch& b) const {
  const size_t T = static_cast<size_t>(b.T), S = b.cu_seqlens.size();
  std::vector<int32_t> h;
  h.reserve(4 * T + S);
  h.insert(h.end(), b.ids.begin(), b.ids.end());
  h.insert(h.end(), b.targets.begin(), b.targets.end());
  h.insert(h.end(), b.positions.begin(), b.positions.end());
  for (int32_t id : b.ids) h.push_back(cfg_.pad_token_id && id == *cfg_.pad_token_id ? -1 : id);
  h.insert(h.end(), b.cu_seqlens.begin(), b.cu_seqlens.end());
  const size_t mask_at = h.size();  // the token mask's bytes, packed four to an int
  h.resize(mask_at + (b.token_mask.size() + 3) / 4, 0);
  if (!b.token_mask.empty()) std::memcpy(h.data() + mask_at, b.token_mask.data(), b.token_mask.size());
  b.device_ints = Tensor::zeros({static_cast<int64_t>(h.size())}, DType::I32, dev_);
  upload_bytes(dev_, b.device_ints.raw(), h.data(), h.size() * 4);
  const int32_t* d = b.device_ints.data<int32_t>();
  b.dev_ids = d;
  b.dev_targets = d + T;
  b.dev_positions = d + 2 * T;
  b.dev_ids_nopad = d + 3 * T;
  b.dev_cu_seqlens = d + 4 * T;
  b.dev_token_mask = b.token_mask.empty() ? nullptr : reinterpret_cast<const uint8_t*>(d + mask_at);
}

int64_t Qwen3Model::hidden_rows(const StageBatch& b) const { return sp_ ? b.T / tp_ : b.T; }

parallel::LoraDropout Qwen3Model::lora_dropout_for(const StageBatch& b, bool training, int slot) const {
  parallel::LoraDropout d;
  if (!training || !(lora_.lora_dropout > 0) || !has_adapter()) return d;
  check(static_cast<int64_t>(b.lora_token_key.size()) == b.T,
        "LoRA dropout: the micro-batch was prepared before the adapter was added");
  d.p = static_cast<float>(lora_.lora_dropout);
  d.seed = parallel::lora_dropout_seed(lora_seed_, lora_step_);
  d.token_key = b.lora_token_key.data();
  d.T = b.T;
  static const char* dump = std::getenv("TWINKLE_TEST_LORA_DROPOUT_DUMP");  // test hook (lora_dropout.h)
  if (dump != nullptr && *dump != '\0') {
    d.dump_dir = dump;
    d.dump_tag = std::to_string(lora_step_) + "." + std::to_string(slot);
  }
  return d;
}

double Qwen3Model::forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training) {
  StageActivations& a = slot_acts(slot);
  const ActivationDims dims = activation_dims();
  a.reserve(dims, b.T);
  work_.reserve(dims, b.T);
  const int64_t T = b.T, Tl = hidden_rows(b), H = cfg_.hidden_size;
  if (first_) {
    unit_use(0);
    embed_tokens_.forward(b.ids_ptr(), T, a.x0, scratch_);
  } else {
    check(in_hidden != nullptr, "Qwen3Model::forward: a non-first stage needs the previous stage's hidden state");
    copy_bytes(dev_, a.x0, in_hidden, static_cast<size_t>(Tl * H) * 4);
  }
  const float* x = a.x0;
  const parallel::LoraDropout drop = lora_dropout_for(b, training, slot);
  const parallel::LoraDropoutScope drop_scope(drop.p > 0 ? &drop : nullptr);
  for (size_t i = 0; i < layers_.size(); ++i) {
    unit_use(unit_layer0_ + i);
    if (dims.recomputed(i)) {
      // Full recompute: the layer runs in the stage's work buffers, writing only its output
      // into the slot; backward runs it again.
      DecoderLayerActivations& w = work_.layer;
      float* own_out = w.out;
      w.out = a.layers[i].out;
      layers_[i].forward(x, b, w, scratch_);
      w.out = own_out;
    } else {
      if (recompute_ == Recompute::Selective) {  // core attention output in the shared buffers
        a.layers[i].attn.ctx = work_.layer.attn.ctx;
        a.layers[i].attn.lse = work_.layer.attn.lse;
      }
      layers_[i].forward(x, b, a.layers[i], scratch_);
    }
    x = a.layers[i].out;
    comm_progress();
  }
  if (cfg_.is_moe()) moe_router_losses(b, a, training);
  if (!last_) return 0.0;
  unit_use(unit_entries_.size() - 1);
  norm_.forward(x, a.final_norm, a.rstd_final, Tl);
  const bool grad = training && grad_scale != 0.0f;
  if (!grad && b.num_targets == 0) return 0.0;  // nothing to score (generation)
  return lm_head_.forward(a.final_norm, b.targets_ptr(), T, grad_scale, grad ? a.d_final_norm : nullptr, scratch_);
}

// The router statistics of the micro-batch over this stage's MoE layers (real tokens only) and
// the router-loss gradients each MoE block's backward adds (objective: coeff * aux / micro-batches,
// z_coeff * z / micro-batches; tests/reference/qwen3_moe_ref.py step_losses). Under sequence
// parallelism each tp rank routed its own token shard: the per-layer counts, probability sums,
// token counts and z sums are summed over tp first (one all-reduce per micro-batch; Megatron's
// aggregation over the tp-cp group, parallel/moe_router_loss.h), so every value and gradient
// scale equals one process's and every tp rank holds the same statistics.
void Qwen3Model::moe_router_losses(const StageBatch& b, StageActivations& a, bool training) {
  namespace k = kernels::cpu;
  const kernels::MoeRouterLossOp& op = kernels_.moe_router_loss;
  const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok, Tl = hidden_rows(b);
  const double per_mb = 1.0 / static_cast<double>(global_mbs_);
  const double coeff = training ? opts_.moe_aux_loss_coeff : 0.0, zc = training ? opts_.moe_z_loss_coeff : 0.0;
  const bool global = opts_.moe_aux_loss_type == "global";
  const uint8_t* mask = b.token_mask_ptr() + (sp_ ? ps_->tp_rank() * Tl : 0);  // on the model's device
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
  if (sp_ && !red.empty()) ps_->tp->all_reduce_f64(red.data(), static_cast<int64_t>(red.size()), dist::ReduceOp::Sum);
  if (ps_->cp_size() > 1 && !red.empty())
    ps_->cp->all_reduce_f64(red.data(), static_cast<int64_t>(red.size()), dist::ReduceOp::Sum);
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

const MoeStageStats& Qwen3Model::moe_stats(int slot) const {
  check(static_cast<size_t>(slot) < slots_.size(), "Qwen3Model::moe_stats: slot " + std::to_string(slot) + " has no forward");
  return slots_[static_cast<size_t>(slot)].moe;
}

const StageActivations& Qwen3Model::slot_activations(int slot) const {
  check(slot >= 0 && static_cast<size_t>(slot) < slots_.size(),
        "Qwen3Model::slot_activations: slot " + std::to_string(slot) + " has no forward");
  return slots_[static_cast<size_t>(slot)];
}

const float* Qwen3Model::output_hidden(int slot) {
  check(static_cast<size_t>(slot) < slots_.size() && slots_[static_cast<size_t>(slot)].T > 0,
        "Qwen3Model::output_hidden: slot " + std::to_string(slot) + " has no forward");
  const StageActivations& a = slots_[static_cast<size_t>(slot)];
  return a.layers.empty() ? a.x0 : a.layers.back().out;
}

const float* Qwen3Model::backward(int slot, const StageBatch& b, const float* d_out) {
  check(static_cast<size_t>(slot) < slots_.size(), "Qwen3Model::backward: slot " + std::to_string(slot) + " has no forward");
  StageActivations& a = slots_[static_cast<size_t>(slot)];
  a.check_holds(b.T, slot);
  const ActivationDims dims = activation_dims();
  const int64_t T = b.T, Tl = hidden_rows(b), H = cfg_.hidden_size;
  float* bufs[2] = {scratch_.get("stage.dA", {Tl, H}).f32(), scratch_.get("stage.dB", {Tl, H}).f32()};
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
  const parallel::LoraDropout drop = lora_dropout_for(b, /*training=*/true, slot);  // the forward's masks
  const parallel::LoraDropoutScope drop_scope(drop.p > 0 ? &drop : nullptr);
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* x = i == 0 ? a.x0 : a.layers[i - 1].out;
    if (dims.recomputed(i)) {  // Full: the layer forward again from its saved input
      layers_[i].forward(x, b, work_.layer, scratch_);
      layers_[i].backward(x, dcur, bufs[cur], b, work_.layer, scratch_);
    } else {
      if (recompute_ == Recompute::Selective) {  // the core attention again from the saved q, k, v
        a.layers[i].attn.ctx = work_.layer.attn.ctx;
        a.layers[i].attn.lse = work_.layer.attn.lse;
        layers_[i].self_attn.recompute_core(b, a.layers[i].attn);
      }
      layers_[i].backward(x, dcur, bufs[cur], b, a.layers[i], scratch_);
    }
    dcur = bufs[cur];
    cur ^= 1;
    if (final_backward_) unit_grads_final(unit_layer0_ + i);
    comm_progress();
  }
  if (!first_) return dcur;
  if (b.dev_ids_nopad)  // the device copy already has the padding id masked
    embed_tokens_.backward(dcur, b.dev_ids_nopad, T, std::nullopt, scratch_);
  else
    embed_tokens_.backward(dcur, b.ids.data(), T, cfg_.pad_token_id, scratch_);
  if (final_backward_) unit_grads_final(0);
  return nullptr;
}

std::vector<float> Qwen3Model::last_token_logits(int slot, const StageBatch& b) {
  check(tp_ == 1 && first_ && last_ && !cp_attention_,
        "last_token_logits needs a single-stage model with tp = 1 and cp = 1");
  const StageActivations& a = slot_acts(slot);
  a.check_holds(b.T, slot);
  return lm_head_.logits(a.final_norm + (b.T - 1) * cfg_.hidden_size);
}

void Qwen3Model::set_comm_hooks(CommHooks hooks) {
  hooks_ = std::move(hooks);
  hooks_on_ = static_cast<bool>(hooks_.grad_ready) || static_cast<bool>(hooks_.param_use) || static_cast<bool>(hooks_.progress);
  unit_final_.assign(unit_entries_.size(), 0);
  final_backward_ = false;
}

// The tied pair (embedding on the first stage, its copy on the last, pp > 1): its gradient is
// final only after finalize_grads' embedding-group sum.
bool Qwen3Model::embedding_group_param(size_t entry) const {
  if (!cfg_.tie_word_embeddings || ps_->pp_size() == 1) return false;
  return (first_ && entry == embed_tokens_.weight_entry()) || (last_ && entry == lm_head_.weight_entry());
}

void Qwen3Model::unit_grads_final(size_t unit) {
  if (!hooks_on_ || unit >= unit_entries_.size() || unit_final_[unit]) return;
  unit_final_[unit] = 1;
  for (size_t id : unit_entries_[unit]) {
    const auto& e = table_[id];
    if (e.param == parallel::kNoParam || e.adapter || embedding_group_param(id)) continue;
    Param& p = store_[e.param];
    if (!p.grad.defined()) continue;  // frozen (LoRA)
    if (tp_ > 1 && p.tp_grad_allreduce) parallel::all_reduce_sum(*ps_->tp, p.grad.f32(), p.grad.numel());
    if (hooks_.grad_ready) hooks_.grad_ready(p);
  }
}

void Qwen3Model::unit_use(size_t unit) {
  if (!hooks_.param_use || unit >= unit_entries_.size()) return;
  for (size_t id : unit_entries_[unit]) {
    const auto& e = table_[id];
    if (e.param != parallel::kNoParam && !e.adapter) hooks_.param_use(store_[e.param]);
  }
}

void Qwen3Model::finalize_grads() {
  if (hooks_on_) {
    // The units the final backward did not report (all of them on a stage that ran no
    // micro-batch), in backward order, so every dp rank starts its buckets in the same order.
    for (size_t u = unit_entries_.size(); u-- > 0;) unit_grads_final(u);
    std::fill(unit_final_.begin(), unit_final_.end(), 0);
    final_backward_ = false;
    for (auto& p : adapter_store_.params()) {
      if (!p.grad.defined()) continue;
      if (tp_ > 1 && p.tp_grad_allreduce) parallel::all_reduce_sum(*ps_->tp, p.grad.f32(), p.grad.numel());
      if (hooks_.grad_ready) hooks_.grad_ready(p);
    }
  } else if (tp_ > 1) {
    for (ParamStore* s : {&store_, &adapter_store_})
      for (auto& p : s->params())
        if (p.tp_grad_allreduce && p.grad.defined()) parallel::all_reduce_sum(*ps_->tp, p.grad.f32(), p.grad.numel());
  }
  if (cfg_.tie_word_embeddings && ps_->pp_size() > 1 && (first_ || last_) && store_.has_grads()) {
    Param& e = table_.param(first_ ? embed_tokens_.weight_entry() : lm_head_.weight_entry());
    parallel::all_reduce_sum(*ps_->embedding, e.grad.f32(), e.grad.numel());
    if (hooks_on_ && hooks_.grad_ready) hooks_.grad_ready(e);
  }
}

}  // namespace twinkle
