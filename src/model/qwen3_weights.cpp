// Qwen3Model: weights in — seeded init and Hugging Face checkpoint loading, from the table.
#include <cstring>
#include <random>
#include <unordered_set>

#include "twinkle/core/hash.h"
#include "twinkle/io/moe_checkpoint.h"
#include "twinkle/io/sharded_checkpoint.h"
#include "twinkle/model/qwen3_model.h"

namespace twinkle {

namespace {

const std::string& where(const CheckpointReader& r) { return r.dir(); }
const std::string& where(const SafetensorsFile& f) { return f.path(); }
const std::string& where(const ShardedCheckpointReader& r) { return r.dir(); }

// Runs fill(host_view) on the parameter's bytes: in place on the host; on a device through a host
// tensor that is then uploaded (init and checkpoint loading are the only host writers of weights).
template <class F>
void write_param(Tensor& dst, F&& fill) {
  if (dst.device() == Device::CPU) {
    fill(dst);
    return;
  }
  Tensor h = Tensor::zeros(dst.shape());
  fill(h);
  dst.copy_(h);
}

}  // namespace

void Qwen3Model::init_random(uint64_t seed) {
  const float stdv = static_cast<float>(cfg_.initializer_range);
  for (size_t id = 0; id < table_.size(); ++id) {
    const parallel::TensorEntry& e = table_[id];
    if (e.param == parallel::kNoParam || e.adapter) continue;
    Param& p = table_.param(id);
    switch (e.init) {
      case parallel::ParamInit::Ones:
        write_param(p.data, [](Tensor& t) { t.fill_(1.0f); });
        break;
      case parallel::ParamInit::Zeros:
        p.data.zero_();
        break;
      case parallel::ParamInit::Normal: {
        // The full tensor is drawn on every rank, so every layout starts from the same weights.
        Tensor full = Tensor::zeros(e.full);
        std::mt19937_64 gen(splitmix64(seed ^ fnv1a64(e.name)));
        std::normal_distribution<float> nd(0.0f, stdv);
        float* f = full.f32();
        for (int64_t i = 0, n = full.numel(); i < n; ++i) f[i] = nd(gen);
        // transformers _init_weights: nn.Embedding(padding_idx=pad_token_id) zeroes the pad row
        // (a tied lm head is this same tensor).
        if (e.name == "model.embed_tokens.weight" && cfg_.pad_token_id && *cfg_.pad_token_id >= 0 &&
            *cfg_.pad_token_id < e.full[0])
          std::memset(f + *cfg_.pad_token_id * e.full[1], 0, sizeof(float) * static_cast<size_t>(e.full[1]));
        write_param(p.data, [&](Tensor& t) { shard_from_full(e.shard, e.local, f, t.f32()); });
        break;
      }
    }
  }
}

namespace {

// The checkpoint name that entry `e` loads from (its first load name present in `ck`), after
// checking its shape. Throws twinkle::Error naming the missing tensor or the wrong shape.
template <class Reader>
const std::string& checked_load_name(const Reader& ck, const parallel::TensorEntry& e) {
  const std::string* found = nullptr;
  for (const auto& n : e.load_names)
    if (ck.contains(n)) {
      found = &n;
      break;
    }
  check(found != nullptr, "checkpoint " + where(ck) + " has no tensor '" + e.load_names.front() + "'");
  const TensorInfo& info = ck.info(*found);
  check(info.shape == e.full, "checkpoint " + where(ck) + ": tensor '" + *found + "' has shape " +
                                  shape_str(info.shape) + ", expected " + shape_str(e.full) + " from config.json");
  return *found;
}

}  // namespace

template <class Reader>
void Qwen3Model::check_entries(const Reader& ck, bool adapters) const {
  for (size_t id = 0; id < table_.size(); ++id) {
    const parallel::TensorEntry& e = table_[id];
    if (e.param != parallel::kNoParam && e.adapter == adapters) checked_load_name(ck, e);
  }
}

void Qwen3Model::check_checkpoint(const CheckpointReader& ck) const {
  if (cfg_.is_moe()) check_moe_checkpoint(cfg_, ck.names(), ck.dir());
  check_entries(ck, false);
}

void Qwen3Model::check_adapter(const SafetensorsFile& ck) const {
  check(has_adapter(), "load_adapter: the model has no adapter (add_adapter first)");
  check_entries(ck, true);
}

template <class Reader>
void Qwen3Model::load_entries(const Reader& ck, bool adapters, float* flat) {
  check_entries(ck, adapters);  // every entry before any is read: a missing or misshapen tensor changes nothing
  for (size_t id = 0; id < table_.size(); ++id) {
    const parallel::TensorEntry& e = table_[id];
    if (e.param == parallel::kNoParam || e.adapter != adapters) continue;
    load_entry(ck, id, flat ? flat + table_.param(id).flat_offset : nullptr);
  }
}

template <class Reader>
void Qwen3Model::load_entry(const Reader& ck, size_t id, float* dst_override) {
  {
    const parallel::TensorEntry& e = table_[id];
    const std::string& name = checked_load_name(ck, e);
    Param& p = table_.param(id);
    // The host bytes to fill: the caller's flat buffer, the parameter itself on the host, or (device
    // parameters) a host staging tensor uploaded at the end.
    Tensor staging;
    if (!dst_override && p.data.device() != Device::CPU) staging = Tensor::zeros(p.data.shape());
    float* dst = dst_override ? dst_override : staging.defined() ? staging.f32() : p.data.f32();
    auto commit = [&] {
      if (staging.defined()) p.data.copy_(staging);
    };
    const ShardSpec& sp = e.shard;
    if (sp.split_dim == -1) {
      Tensor full = ck.load_f32(name);
      shard_from_full(sp, e.local, full.f32(), dst);
      commit();
      return;
    }
    // Read only this rank's slice (a tp shard of a large checkpoint never exists in full here).
    std::memset(dst, 0, static_cast<size_t>(p.data.numel()) * 4);  // vocab padding rows stay zero
    if (sp.valid == 0) {
      commit();
      return;
    }
    Tensor part = ck.load_f32_narrow(name, sp.split_dim, sp.offset, sp.valid);
    const float* src = part.f32();
    if (sp.split_dim == 0 || e.local.size() == 1) {
      std::memcpy(dst, src, static_cast<size_t>(part.numel()) * 4);
    } else {
      const int64_t local_cols = e.local.back();
      for (int64_t r = 0; r < sp.full_rows; ++r)
        std::memcpy(dst + r * local_cols, src + r * sp.valid, static_cast<size_t>(sp.valid) * 4);
    }
    commit();
  }
}

void Qwen3Model::load_checkpoint(const CheckpointReader& ck) {
  if (cfg_.is_moe()) check_moe_checkpoint(cfg_, ck.names(), ck.dir());
  load_entries(ck, false, nullptr);
}

std::vector<std::string> Qwen3Model::unused_checkpoint_tensors(const CheckpointReader& ck) const {
  std::unordered_set<std::string> used;
  for (const auto& e : table_.entries())
    if (!e.adapter)
      for (const auto& n : e.load_names) used.insert(n);
  std::vector<std::string> out;
  for (const auto& n : ck.names()) {  // sorted
    if (used.count(n) || ck.info(n).numel() == 0) continue;
    if (n == "lm_head.weight" && cfg_.tie_word_embeddings) continue;
    out.push_back(n);
  }
  return out;
}

void Qwen3Model::load_adapter(const SafetensorsFile& ck) {
  check(has_adapter(), "load_adapter: the model has no adapter (add_adapter first)");
  load_entries(ck, true, nullptr);
}

void Qwen3Model::load_flat(const SafetensorsFile& ck, bool adapters, float* flat) { load_entries(ck, adapters, flat); }

void Qwen3Model::load_flat(const ShardedCheckpointReader& ck, bool adapters, float* flat) {
  load_entries(ck, adapters, flat);
}

}  // namespace twinkle
