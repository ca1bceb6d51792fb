// Qwen3Model: LoRA adapters — targets, table entries on every stage, attachment to this
// stage's layers, seeded init, frozen base.
#include <cmath>
#include <random>
#include <set>

#include "twinkle/core/hash.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/parallel/expert_layout.h"
#include "twinkle/parallel/lora.h"

namespace twinkle {

namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

std::vector<std::string> Qwen3Model::linear_modules() const {
  std::vector<std::string> out;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
      out.push_back(p + m);
    if (cfg_.is_moe_layer(l)) {  // transformers 4's Qwen3MoeSparseMoeBlock: gate, experts.{e}.{gate,up,down}_proj
      out.push_back(p + "mlp.gate");
      for (int64_t e = 0; e < cfg_.num_experts; ++e)
        for (const char* m : {"gate_proj", "up_proj", "down_proj"})
          out.push_back(p + "mlp.experts." + std::to_string(e) + "." + m);
    } else {
      for (const char* m : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) out.push_back(p + m);
    }
  }
  return out;
}

std::vector<NonLoraModule> Qwen3Model::other_modules() const {
  // What PEFT does with each (peft/tuners/lora/model.py _create_new_module and its dispatchers):
  // nn.Embedding -> lora.Embedding, nn.Linear -> lora.Linear, any other type -> ValueError.
  const std::string refused = " (PEFT refuses it too: \"Target module ... is not supported\")";
  const std::string norm = "a Qwen3RMSNorm" + refused;
  std::vector<NonLoraModule> out;
  out.push_back({"model", "the Qwen3Model container" + refused});
  out.push_back({"model.embed_tokens", "an nn.Embedding (PEFT would add a LoRA Embedding layer to it)"});
  out.push_back({"model.layers", "an nn.ModuleList" + refused});
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    out.push_back({p, "a decoder layer container" + refused});
    out.push_back({p + ".self_attn", "the attention container" + refused});
    out.push_back({p + ".self_attn.q_norm", norm});
    out.push_back({p + ".self_attn.k_norm", norm});
    if (cfg_.is_moe_layer(l)) {
      out.push_back({p + ".mlp", "the sparse MoE block container" + refused});
      out.push_back({p + ".mlp.experts", "an nn.ModuleList of experts" + refused});
      for (int64_t e = 0; e < cfg_.num_experts; ++e) {
        const std::string x = p + ".mlp.experts." + std::to_string(e);
        out.push_back({x, "an expert MLP container" + refused});
        out.push_back({x + ".act_fn", "the SiLU activation" + refused});
      }
    } else {
      out.push_back({p + ".mlp", "the MLP container" + refused});
      out.push_back({p + ".mlp.act_fn", "the SiLU activation" + refused});
    }
    out.push_back({p + ".input_layernorm", norm});
    out.push_back({p + ".post_attention_layernorm", norm});
  }
  out.push_back({"model.norm", norm});
  out.push_back({"model.rotary_emb", "the rotary embedding" + refused});
  out.push_back({"lm_head", "the output layer, an nn.Linear (PEFT would wrap it in a LoRA Linear when a pattern or "
                            "list selects it; only all-linear leaves it out)"});
  return out;
}

void Qwen3Model::add_adapter(const LoraConfig& cfg, uint64_t seed) {
  check(!has_adapter(), "add_adapter: the model already has an adapter (one adapter per model)");
  validate(cfg);
  lora_seed_ = seed;
  if (cfg_.is_moe()) {
    try {
      parallel::check_lora_expert_tensor_parallel(ps_->mesh.etp_size());
    } catch (const Error& e) {
      throw Error(std::string("add_adapter: ") + e.what());
    }
  }
  std::vector<std::string> targets_list = resolve_lora_targets(cfg, linear_modules(), other_modules());
  lora_targets_ = std::move(targets_list);
  lora_ = cfg;
  const std::set<std::string> targets(lora_targets_.begin(), lora_targets_.end());
  const parallel::TensorParallel tp = tp_group();
  const int pp = ps_->pp_size(), mine = ps_->pp_rank(), stages = pp * ps_->mesh.vpp_size();
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim, I = cfg_.intermediate_size;
  const int64_t q_out = cfg_.num_attention_heads * D, kv_out = cfg_.num_key_value_heads * D;
  const float scaling = static_cast<float>(cfg.scaling());
  using parallel::LoraBase;
  for (int vs = 0; vs < stages; ++vs) {  // virtual stages in model order, each on pipeline rank vs % pp
    const int s = vs % pp;
    table_.set_stage(s);
    const int64_t l0 = split_.first[static_cast<size_t>(vs)], n = split_.count[static_cast<size_t>(vs)];
    for (int64_t l = l0; l < l0 + n; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Qwen3DecoderLayer* layer = s == mine ? local_layer(l) : nullptr;
      auto add = [&](const std::string& m, int64_t in, int64_t out, LoraBase base) -> parallel::LoraPair {
        if (!targets.count(p + m)) return {};
        return parallel::add_lora_entries(table_, tp, p + m, in, out, base, cfg.r, scaling);
      };
      const parallel::LoraPair q = add("self_attn.q_proj", H, q_out, LoraBase::Column);
      const parallel::LoraPair k = add("self_attn.k_proj", H, kv_out, LoraBase::Column);
      const parallel::LoraPair v = add("self_attn.v_proj", H, kv_out, LoraBase::Column);
      const parallel::LoraPair o = add("self_attn.o_proj", q_out, H, LoraBase::Row);
      if (layer) {
        layer->self_attn.qkv_proj.set_lora(0, q);
        layer->self_attn.qkv_proj.set_lora(1, k);
        layer->self_attn.qkv_proj.set_lora(2, v);
        layer->self_attn.o_proj.set_lora(o);
      }
      if (cfg_.is_moe_layer(l)) {
        // The router: replicated, like its weight (each tp rank routes its own SP shard).
        const parallel::LoraPair gate = add("mlp.gate", H, cfg_.num_experts, LoraBase::Replicated);
        if (layer) layer->moe.set_router_lora(gate);
        // The experts (transformers 4 / PEFT: one nn.Linear per expert and projection): a pair
        // on each targeted expert's projection (any subset), with its expert on its ep rank.
        const int64_t E = cfg_.num_experts, Im = cfg_.moe_intermediate_size;
        const char* proj[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int j = 0; j < 3; ++j) {
          std::vector<std::string> mods;  // "" = this expert's projection is not a target
          int64_t hit = 0;
          for (int64_t e = 0; e < E; ++e) {
            const std::string m = p + "mlp.experts." + std::to_string(e) + "." + proj[j];
            mods.push_back(targets.count(m) ? m : std::string());
            hit += mods.back().empty() ? 0 : 1;
          }
          if (hit == 0) continue;
          const int64_t in = j < 2 ? H : Im, out = j < 2 ? Im : H;
          auto pairs = parallel::add_expert_lora_entries(table_, mods, in, out, E / ps_->ep_size(), cfg.r, scaling);
          if (layer) layer->moe.set_expert_lora(j, std::move(pairs));
        }
        continue;
      }
      const parallel::LoraPair g = add("mlp.gate_proj", H, I, LoraBase::Column);
      const parallel::LoraPair u = add("mlp.up_proj", H, I, LoraBase::Column);
      const parallel::LoraPair d = add("mlp.down_proj", I, H, LoraBase::Row);
      if (layer) {
        layer->mlp.gate_up_proj.set_lora(0, g);
        layer->mlp.gate_up_proj.set_lora(1, u);
        layer->mlp.down_proj.set_lora(d);
      }
    }
  }
  table_.materialize_adapters(mine, adapter_store_, ps_->ep_rank());  // this ep rank's experts' pairs only
  // flat regions divisible by the ZeRO shard counts (dp-cp dense, expert-dp experts)
  adapter_store_.finalize(64 * ps_->dp_cp->size(), 64 * ps_->edp->size(), dev_);
  // Init (PEFT LoraLayer.reset_lora_parameters): the full tensor on every rank, then sliced.
  for (size_t id = 0; id < table_.size(); ++id) {
    const parallel::TensorEntry& e = table_[id];
    if (!e.adapter || e.param == parallel::kNoParam) continue;
    const bool is_a = ends_with(e.name, ".lora_A.weight");
    Tensor full = Tensor::zeros(e.full);
    float* f = full.f32();
    const int64_t numel = full.numel();
    std::mt19937_64 gen(splitmix64(seed ^ fnv1a64(e.name)));
    const std::string& how = cfg.init_lora_weights;
    if (is_a && how == "gaussian") {
      std::normal_distribution<double> nd(0.0, 1.0 / static_cast<double>(cfg.r));
      for (int64_t i = 0; i < numel; ++i) f[i] = static_cast<float>(nd(gen));
    } else if (is_a || how == "false") {
      // kaiming_uniform_(a = sqrt(5)) on [rows, fan_in]: bound = sqrt(6 / ((1 + a^2) fan_in)) = 1 / sqrt(fan_in)
      const double bound = 1.0 / std::sqrt(static_cast<double>(e.full[1]));
      std::uniform_real_distribution<double> ud(-bound, bound);
      for (int64_t i = 0; i < numel; ++i) f[i] = static_cast<float>(ud(gen));
    }  // else B = 0
    Tensor& dst = table_.param(id).data;  // on the model's device: drawn on the host, sliced, uploaded
    if (dst.device() == Device::CPU) {
      shard_from_full(e.shard, e.local, f, dst.f32());
    } else {
      Tensor h = Tensor::zeros(dst.shape());
      shard_from_full(e.shard, e.local, f, h.f32());
      dst.copy_(h);
    }
  }
  store_.drop_grads();  // the base is frozen: no gradient buffer, no optimizer state
}

}  // namespace twinkle
