// Qwen3Model: one pipeline stage's forward/backward (embedding, layers, final norm, fused lm head + loss).
#include <cstring>
#include <vector>

#include "twinkle/kernels/cpu/embedding.h"
#include "twinkle/model/qwen3_model.h"
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
    // load-balanced chunks (Megatron get_batch_on_this_cp_rank; spec §4 pad_cp / split_cp).
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
    b.cp = std::make_shared<const parallel::CpLayout>(parallel::CpLayout::from_shard(sh));
    b.cp_attention = cp_attention_;
    return b;
  }
  if (sp_ && b.T % tp_) {
    const int64_t pad = tp_ - b.T % tp_;
    for (int64_t i = 0; i < pad; ++i) {
      b.ids.push_back(0);
      b.targets.push_back(kIgnoreIndex);
      b.positions.push_back(static_cast<int32_t>(i));
    }
    b.T += pad;
    b.cu_seqlens.push_back(static_cast<int32_t>(b.T));
  }
  return b;
}

int64_t Qwen3Model::hidden_rows(const StageBatch& b) const { return sp_ ? b.T / tp_ : b.T; }

double Qwen3Model::forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training) {
  StageActivations& a = slot_acts(slot);
  a.reserve(activation_dims(), b.T);
  const int64_t T = b.T, Tl = hidden_rows(b), H = cfg_.hidden_size;
  if (first_) {
    embed_tokens_.forward(b.ids.data(), T, a.x0, scratch_);
  } else {
    check(in_hidden != nullptr, "Qwen3Model::forward: a non-first stage needs the previous stage's hidden state");
    std::memcpy(a.x0, in_hidden, static_cast<size_t>(Tl * H) * 4);
  }
  const float* x = a.x0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i].forward(x, b, a.layers[i], scratch_);
    x = a.layers[i].out;
  }
  if (!last_) return 0.0;
  norm_.forward(x, a.final_norm, a.rstd_final, Tl);
  const bool grad = training && grad_scale != 0.0f;
  if (!grad && b.num_targets == 0) return 0.0;  // nothing to score (generation)
  return lm_head_.forward(a.final_norm, b.targets.data(), T, grad_scale, grad ? a.d_final_norm : nullptr, scratch_);
}

const float* Qwen3Model::output_hidden(int slot) {
  check(static_cast<size_t>(slot) < slots_.size() && slots_[static_cast<size_t>(slot)].T > 0,
        "Qwen3Model::output_hidden: slot " + std::to_string(slot) + " has no forward");
  const StageActivations& a = slots_[static_cast<size_t>(slot)];
  return a.layers.empty() ? a.x0 : a.layers.back().out;
}

const float* Qwen3Model::backward(int slot, const StageBatch& b, const float* d_out) {
  check(static_cast<size_t>(slot) < slots_.size(), "Qwen3Model::backward: slot " + std::to_string(slot) + " has no forward");
  const StageActivations& a = slots_[static_cast<size_t>(slot)];
  a.check_holds(b.T, slot);
  const int64_t T = b.T, Tl = hidden_rows(b), H = cfg_.hidden_size;
  float* bufs[2] = {scratch_.get("stage.dA", {Tl, H}).f32(), scratch_.get("stage.dB", {Tl, H}).f32()};
  int cur = 0;
  const float* dcur = d_out;
  if (last_) {
    const float* xl = a.layers.empty() ? a.x0 : a.layers.back().out;
    norm_.backward(xl, a.rstd_final, a.d_final_norm, bufs[cur], Tl);
    dcur = bufs[cur];
    cur ^= 1;
  }
  check(dcur != nullptr, "Qwen3Model::backward: a non-last stage needs the next stage's gradient");
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* x = i == 0 ? a.x0 : a.layers[i - 1].out;
    layers_[i].backward(x, dcur, bufs[cur], b, a.layers[i], scratch_);
    dcur = bufs[cur];
    cur ^= 1;
  }
  if (!first_) return dcur;
  embed_tokens_.backward(dcur, b.ids.data(), T, cfg_.pad_token_id, scratch_);
  return nullptr;
}

std::vector<float> Qwen3Model::last_token_logits(int slot, const StageBatch& b) {
  check(tp_ == 1 && first_ && last_ && !cp_attention_,
        "last_token_logits needs a single-stage model with tp = 1 and cp = 1");
  const StageActivations& a = slot_acts(slot);
  a.check_holds(b.T, slot);
  return lm_head_.logits(a.final_norm + (b.T - 1) * cfg_.hidden_size);
}

void Qwen3Model::finalize_grads() {
  if (tp_ > 1) {
    for (auto& p : store_.params())
      if (p.tp_grad_allreduce) parallel::all_reduce_sum(*ps_->tp, p.grad.f32(), p.grad.numel());
  }
  if (cfg_.tie_word_embeddings && ps_->pp_size() > 1 && (first_ || last_)) {
    Param& e = table_.param(first_ ? embed_tokens_.weight_entry() : lm_head_.weight_entry());
    parallel::all_reduce_sum(*ps_->embedding, e.grad.f32(), e.grad.numel());
  }
}

}  // namespace twinkle
