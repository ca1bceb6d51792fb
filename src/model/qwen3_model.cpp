// Qwen3Model: construction, parameter layout and weights (init, load, gather).
#include <cmath>
#include <cstring>
#include <random>

#include "twinkle/kernels/cpu/embedding.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/model/rope_variant.h"

namespace twinkle {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Qwen3Model::Qwen3Model(const ModelConfig& cfg, std::shared_ptr<dist::ParallelState> ps, Qwen3ModelOptions opts)
    : cfg_(cfg), ps_(std::move(ps)), opts_(std::move(opts)) {
  check(cfg_.model_type == "qwen3",
        "Qwen3Model: model_type '" + cfg_.model_type + "' is not a dense qwen3 model" +
            (cfg_.source.empty() ? "" : " (" + cfg_.source + ")"));
  tp_ = ps_->tp_size();
  sp_ = ps_->sequence_parallel() && tp_ > 1;
  const int pp = ps_->pp_size(), stage = ps_->pp_rank();
  auto fail = [&](const std::string& m) { throw Error("model does not fit the mesh: " + m); };
  if (cfg_.num_attention_heads % tp_) fail("num_attention_heads " + std::to_string(cfg_.num_attention_heads) + " is not divisible by tp " + std::to_string(tp_));
  if (cfg_.num_key_value_heads % tp_) fail("num_key_value_heads " + std::to_string(cfg_.num_key_value_heads) + " is not divisible by tp " + std::to_string(tp_));
  if (cfg_.intermediate_size % tp_) fail("intermediate_size " + std::to_string(cfg_.intermediate_size) + " is not divisible by tp " + std::to_string(tp_));
  if (pp > cfg_.num_hidden_layers) fail("pp " + std::to_string(pp) + " is larger than num_hidden_layers " + std::to_string(cfg_.num_hidden_layers));
  std::vector<int64_t> split = opts_.layers_per_stage;
  if (split.empty()) {
    for (int s = 0; s < pp; ++s)
      split.push_back(cfg_.num_hidden_layers / pp + (s < cfg_.num_hidden_layers % pp ? 1 : 0));
  }
  check(static_cast<int>(split.size()) == pp, "layers_per_stage has " + std::to_string(split.size()) +
                                                  " entries but pp is " + std::to_string(pp));
  int64_t sum = 0;
  for (auto n : split) {
    check(n >= 1, "layers_per_stage: every stage needs at least one layer");
    sum += n;
  }
  check(sum == cfg_.num_hidden_layers, "layers_per_stage sums to " + std::to_string(sum) +
                                           " but num_hidden_layers is " + std::to_string(cfg_.num_hidden_layers));
  for (int s = 0; s < stage; ++s) layer0_ += split[static_cast<size_t>(s)];
  nlayers_ = split[static_cast<size_t>(stage)];
  first_ = ps_->is_first_stage();
  last_ = ps_->is_last_stage();
  H_ = cfg_.hidden_size;
  D_ = cfg_.head_dim;
  hq_ = cfg_.num_attention_heads / tp_;
  hkv_ = cfg_.num_key_value_heads / tp_;
  I_ = cfg_.intermediate_size / tp_;
  vocab_ = parallel::make_vocab_shard(cfg_.vocab_size, ps_->tp_rank(), tp_);
  rope_ = kernels::cpu::make_rope_table(cfg_.max_position_embeddings, D_, cfg_.rope_theta, rope_variant(cfg_));
  declare_params();
  store_.finalize(64 * ps_->dp_cp->size());  // flat size divisible by the ZeRO shard count
}

void Qwen3Model::declare_params() {
  const int r = ps_->tp_rank();
  const int64_t H = cfg_.hidden_size, D = D_;
  auto add = [&](const std::string& name, Shape local, ShardSpec spec, bool decay, bool dup, bool tp_reduce) {
    Param p;
    p.name = name;
    p.shape = std::move(local);
    p.shard = spec;
    p.weight_decay = decay;
    p.tp_duplicate = dup;
    p.tp_grad_allreduce = tp_reduce;
    return store_.add(std::move(p));
  };
  auto col = [&](int64_t full_rows, int64_t cols, int64_t local_rows) {  // split along dim 0
    return ShardSpec{0, full_rows, cols, local_rows * r, local_rows};
  };
  auto rowp = [&](int64_t rows, int64_t full_cols, int64_t local_cols) {  // split along dim 1
    return ShardSpec{1, rows, full_cols, local_cols * r, local_cols};
  };
  auto repl = [&](int64_t n) { return ShardSpec{-1, n, 1, 0, n}; };
  const bool norm_reduce = sp_;  // SP: norms see a slice of the tokens

  if (first_) {
    embed_ = add("model.embed_tokens.weight", {vocab_.local, H},
                 ShardSpec{0, cfg_.vocab_size, H, vocab_.start, vocab_.valid}, true, false, false);
  }
  for (int64_t l = layer0_; l < layer0_ + nlayers_; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParams lp{};
    lp.ln1 = add(p + "input_layernorm.weight", {H}, repl(H), false, true, norm_reduce);
    lp.q = add(p + "self_attn.q_proj.weight", {hq_ * D, H}, col(cfg_.num_attention_heads * D, H, hq_ * D), true, false, false);
    if (cfg_.attention_bias)
      lp.qb = add(p + "self_attn.q_proj.bias", {hq_ * D}, col(cfg_.num_attention_heads * D, 1, hq_ * D), false, false, false);
    lp.k = add(p + "self_attn.k_proj.weight", {hkv_ * D, H}, col(cfg_.num_key_value_heads * D, H, hkv_ * D), true, false, false);
    if (cfg_.attention_bias)
      lp.kb = add(p + "self_attn.k_proj.bias", {hkv_ * D}, col(cfg_.num_key_value_heads * D, 1, hkv_ * D), false, false, false);
    lp.v = add(p + "self_attn.v_proj.weight", {hkv_ * D, H}, col(cfg_.num_key_value_heads * D, H, hkv_ * D), true, false, false);
    if (cfg_.attention_bias)
      lp.vb = add(p + "self_attn.v_proj.bias", {hkv_ * D}, col(cfg_.num_key_value_heads * D, 1, hkv_ * D), false, false, false);
    lp.o = add(p + "self_attn.o_proj.weight", {H, hq_ * D}, rowp(H, cfg_.num_attention_heads * D, hq_ * D), true, false, false);
    if (cfg_.attention_bias) lp.ob = add(p + "self_attn.o_proj.bias", {H}, repl(H), false, true, norm_reduce);
    lp.qn = add(p + "self_attn.q_norm.weight", {D}, repl(D), false, true, tp_ > 1);
    lp.kn = add(p + "self_attn.k_norm.weight", {D}, repl(D), false, true, tp_ > 1);
    lp.ln2 = add(p + "post_attention_layernorm.weight", {H}, repl(H), false, true, norm_reduce);
    lp.gate = add(p + "mlp.gate_proj.weight", {I_, H}, col(cfg_.intermediate_size, H, I_), true, false, false);
    lp.up = add(p + "mlp.up_proj.weight", {I_, H}, col(cfg_.intermediate_size, H, I_), true, false, false);
    lp.down = add(p + "mlp.down_proj.weight", {H, I_}, rowp(H, cfg_.intermediate_size, I_), true, false, false);
    layers_.push_back(lp);
  }
  if (last_) {
    final_norm_ = add("model.norm.weight", {H}, repl(H), false, true, norm_reduce);
    if (cfg_.tie_word_embeddings) {
      if (first_) {
        lm_head_ = embed_;
      } else {
        lm_head_ = add("model.embed_tokens.weight", {vocab_.local, H},
                       ShardSpec{0, cfg_.vocab_size, H, vocab_.start, vocab_.valid}, true, false, false);
      }
    } else {
      lm_head_ = add("lm_head.weight", {vocab_.local, H}, ShardSpec{0, cfg_.vocab_size, H, vocab_.start, vocab_.valid},
                     true, false, false);
    }
  }
  // Mark the tied copy after all adds (indices are stable, pointers are not).
  if (last_ && cfg_.tie_word_embeddings && !first_) store_[lm_head_].tied_copy = true;
}

int64_t Qwen3Model::num_parameters() const {
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim, L = cfg_.num_hidden_layers;
  const int64_t q = cfg_.num_attention_heads * D, kv = cfg_.num_key_value_heads * D, I = cfg_.intermediate_size;
  int64_t per = 2 * H + H * q + 2 * H * kv + q * H + 2 * D + 3 * H * I;
  if (cfg_.attention_bias) per += q + 2 * kv + H;
  int64_t n = L * per + H + cfg_.vocab_size * H;
  if (!cfg_.tie_word_embeddings) n += cfg_.vocab_size * H;
  return n;
}

void Qwen3Model::for_each_full_tensor(const std::function<void(Param&)>& fn) {
  for (auto& p : store_.params()) fn(p);
}

namespace {
// Copies the local shard of a full [rows, cols] tensor into p.data (zero vocab padding).
void copy_shard(Param& p, const float* full) {
  const ShardSpec& s = p.shard;
  float* dst = p.data.f32();
  p.data.zero_();
  if (s.split_dim == -1) {
    std::memcpy(dst, full, static_cast<size_t>(p.data.numel()) * 4);
  } else if (s.split_dim == 0) {
    std::memcpy(dst, full + s.offset * s.full_cols, static_cast<size_t>(s.valid * s.full_cols) * 4);
  } else {
    const int64_t local_cols = p.shape.back();
    for (int64_t r = 0; r < s.full_rows; ++r)
      std::memcpy(dst + r * local_cols, full + r * s.full_cols + s.offset, static_cast<size_t>(s.valid) * 4);
  }
}
Shape full_shape(const Param& p) {
  if (p.shape.size() == 1) return {p.shard.full_rows};
  return {p.shard.full_rows, p.shard.full_cols};
}
}  // namespace

void Qwen3Model::init_random(uint64_t seed) {
  const float stdv = static_cast<float>(cfg_.initializer_range);
  for (auto& p : store_.params()) {
    const bool is_norm = p.name.find("norm.weight") != std::string::npos;
    const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (is_norm) {
      p.data.fill_(1.0f);
      continue;
    }
    if (is_bias) {
      p.data.zero_();
      continue;
    }
    Shape fs = full_shape(p);
    Tensor full = Tensor::zeros(fs);
    std::mt19937_64 gen(splitmix64(seed ^ fnv1a(p.name)));
    std::normal_distribution<float> nd(0.0f, stdv);
    float* f = full.f32();
    for (int64_t i = 0, n = full.numel(); i < n; ++i) f[i] = nd(gen);
    copy_shard(p, f);
  }
}

void Qwen3Model::load_checkpoint(const CheckpointReader& ck) {
  for (auto& p : store_.params()) {
    std::string name = p.name;
    if (p.tied_copy || (cfg_.tie_word_embeddings && name == "model.embed_tokens.weight" && !ck.contains(name) &&
                        ck.contains("lm_head.weight")))
      name = ck.contains("model.embed_tokens.weight") ? "model.embed_tokens.weight" : "lm_head.weight";
    check(ck.contains(name), "checkpoint " + ck.dir() + " has no tensor '" + name + "'");
    const TensorInfo& info = ck.info(name);
    Shape fs = full_shape(p);
    check(info.shape == fs, "checkpoint " + ck.dir() + ": tensor '" + name + "' has shape " + shape_str(info.shape) +
                                ", expected " + shape_str(fs) + " from config.json");
    // Read only this rank's slice (a tp shard of a large checkpoint never exists in full here).
    const ShardSpec& sp = p.shard;
    if (sp.split_dim == -1) {
      Tensor full = ck.load_f32(name);
      copy_shard(p, full.f32());
      continue;
    }
    p.data.zero_();  // vocab padding rows stay zero
    if (sp.valid == 0) continue;
    Tensor part = ck.load_f32_narrow(name, sp.split_dim, sp.offset, sp.valid);
    const float* src = part.f32();
    float* dst = p.data.f32();
    if (sp.split_dim == 0 || p.shape.size() == 1) {
      std::memcpy(dst, src, static_cast<size_t>(part.numel()) * 4);
    } else {
      const int64_t local_cols = p.shape.back();
      for (int64_t r = 0; r < sp.full_rows; ++r)
        std::memcpy(dst + r * local_cols, src + r * sp.valid, static_cast<size_t>(sp.valid) * 4);
    }
  }
}

std::vector<std::pair<std::string, Tensor>> Qwen3Model::gather_state_dict(bool grads) {
  auto& world = *ps_->world;
  const bool root = world.rank() == 0;
  // Only dp=0, cp=0 ranks hold the canonical copy; they send shards to the root.
  const bool owner = ps_->coord.dp == 0 && ps_->coord.cp == 0;
  // Canonical HF order: embed, layers, norm, lm_head.
  std::vector<std::string> names;
  names.push_back("model.embed_tokens.weight");
  const int64_t L = cfg_.num_hidden_layers;
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
                          "self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight",
                          "self_attn.v_proj.bias", "self_attn.o_proj.weight", "self_attn.o_proj.bias",
                          "self_attn.q_norm.weight", "self_attn.k_norm.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      std::string full = p + n;
      if (!cfg_.attention_bias && full.find(".bias") != std::string::npos) continue;
      names.push_back(full);
    }
  }
  names.push_back("model.norm.weight");
  if (!cfg_.tie_word_embeddings) names.push_back("lm_head.weight");

  std::vector<std::pair<std::string, Tensor>> out;
  const int tag = 7001;
  for (const auto& name : names) {
    // Which tp ranks hold a piece: every rank of the owning pp stage with dp=cp=0.
    // Protocol: each owner that holds `name` (non-tied-copy) sends its local shard to the root.
    Param* mine = store_.find(name);
    if (mine && mine->tied_copy) mine = nullptr;
    // Determine the pp stage holding it (identical computation on all ranks).
    int stage = 0;
    if (name.rfind("model.layers.", 0) == 0) {
      int64_t l = std::stoll(name.substr(13));
      int64_t acc = 0;
      std::vector<int64_t> split = opts_.layers_per_stage;
      if (split.empty())
        for (int s = 0; s < ps_->pp_size(); ++s)
          split.push_back(cfg_.num_hidden_layers / ps_->pp_size() + (s < cfg_.num_hidden_layers % ps_->pp_size() ? 1 : 0));
      for (size_t s = 0; s < split.size(); ++s) {
        if (l < acc + split[s]) {
          stage = static_cast<int>(s);
          break;
        }
        acc += split[s];
      }
    } else if (name == "model.norm.weight" || name == "lm_head.weight") {
      stage = ps_->pp_size() - 1;
    }
    Tensor full;
    if (root) {
      // Build the full tensor from every tp rank of that stage.
      full = Tensor();
    }
    // Each tp rank r of stage `stage` (dp=cp=0) is global rank mesh.rank_of(r,0,0,stage).
    std::vector<Tensor> pieces;
    std::vector<ShardSpec> specs;
    for (int r = 0; r < tp_; ++r) {
      int src = ps_->mesh.rank_of(r, 0, 0, stage);
      if (world.rank() == src && owner && mine) {
        if (src == 0) {
          pieces.push_back((grads ? mine->grad : mine->data).clone());
          specs.push_back(mine->shard);
        } else {
          int64_t hdr[6] = {mine->shard.split_dim, mine->shard.full_rows, mine->shard.full_cols, mine->shard.offset,
                            mine->shard.valid, mine->data.numel()};
          world.send(hdr, 6, DType::I64, 0, tag);
          world.send((grads ? mine->grad : mine->data).f32(), mine->data.numel(), DType::F32, 0, tag + 1);
        }
      }
      if (root && src != 0) {
        int64_t hdr[6];
        world.recv(hdr, 6, DType::I64, src, tag);
        Tensor t = Tensor::zeros({hdr[5]});
        world.recv(t.f32(), hdr[5], DType::F32, src, tag + 1);
        pieces.push_back(t);
        specs.push_back(ShardSpec{static_cast<int>(hdr[0]), hdr[1], hdr[2], hdr[3], hdr[4]});
      }
    }
    if (!root) continue;
    check(!pieces.empty(), "gather_state_dict: no shard of " + name + " reached rank 0");
    const ShardSpec& s0 = specs[0];
    Shape fs = (name.find("norm.weight") != std::string::npos || name.find(".bias") != std::string::npos)
                   ? Shape{s0.full_rows}
                   : Shape{s0.full_rows, s0.full_cols};
    full = Tensor::zeros(fs);
    float* f = full.f32();
    for (size_t i = 0; i < pieces.size(); ++i) {
      const ShardSpec& s = specs[i];
      const float* src = pieces[i].f32();
      if (s.split_dim == -1) {
        std::memcpy(f, src, static_cast<size_t>(full.numel()) * 4);
      } else if (s.split_dim == 0) {
        std::memcpy(f + s.offset * s.full_cols, src, static_cast<size_t>(s.valid * s.full_cols) * 4);
      } else {
        const int64_t local_cols = pieces[i].numel() / s.full_rows;
        for (int64_t rr = 0; rr < s.full_rows; ++rr)
          std::memcpy(f + rr * s.full_cols + s.offset, src + rr * local_cols, static_cast<size_t>(s.valid) * 4);
      }
    }
    out.emplace_back(name, full);
  }
  return out;
}

Workspace& Qwen3Model::slot_ws(int slot) {
  if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
  return slots_[static_cast<size_t>(slot)];
}

size_t Qwen3Model::workspace_bytes() const {
  size_t b = scratch_.bytes();
  for (auto& w : slots_) b += w.bytes();
  return b;
}

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

}  // namespace twinkle
