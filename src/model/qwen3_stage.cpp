// Qwen3Model: micro-batch preparation (shift, SP / cp split, LoRA dropout keys, device upload), the
// communication hooks and the gradient finalisation over this rank's chunks (qwen3_chunk.cpp runs them).
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

std::vector<float> Qwen3Model::last_token_logits(int slot, const StageBatch& b) {
  return only_chunk("last_token_logits").last_token_logits(slot, b);
}

void Qwen3Model::set_comm_hooks(CommHooks hooks) {
  hooks_ = std::move(hooks);
  hooks_on_ = static_cast<bool>(hooks_.grad_ready) || static_cast<bool>(hooks_.param_use) || static_cast<bool>(hooks_.progress);
  for (auto& c : chunks_) {
    c->unit_final_.assign(c->unit_entries_.size(), 0);
    c->final_backward_ = false;
  }
}

// The tied pair (embedding on the first stage, its copy on the last, pp > 1): its gradient is
// final only after finalize_grads' embedding-group sum.
bool Qwen3Model::embedding_group_param(size_t entry) const {
  if (!cfg_.tie_word_embeddings || ps_->pp_size() == 1) return false;
  return (first_rank_ && entry == chunks_.front()->embed_tokens_.weight_entry()) ||
         (last_rank_ && entry == chunks_.back()->lm_head_.weight_entry());
}

void Qwen3Model::finalize_grads() {
  if (hooks_on_) {
    // The units the final backwards did not report (all of them on a stage that ran no
    // micro-batch), in backward order (chunks last to first), so every dp rank starts its buckets
    // in the same order.
    for (size_t c = chunks_.size(); c-- > 0;) {
      Qwen3Chunk& ch = *chunks_[c];
      for (size_t u = ch.unit_entries_.size(); u-- > 0;) ch.unit_grads_final(u);
      std::fill(ch.unit_final_.begin(), ch.unit_final_.end(), 0);
      ch.final_backward_ = false;
    }
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
  if (cfg_.tie_word_embeddings && ps_->pp_size() > 1 && (first_rank_ || last_rank_) && store_.has_grads()) {
    Param& e = table_.param(first_rank_ ? chunks_.front()->embed_tokens_.weight_entry() : chunks_.back()->lm_head_.weight_entry());
    parallel::all_reduce_sum(*ps_->embedding, e.grad.f32(), e.grad.numel());
    if (hooks_on_ && hooks_.grad_ready) hooks_.grad_ready(e);
  }
}

}  // namespace twinkle
