// Qwen3Model: construction — the tensor table of every stage and this stage's layers.
#include "twinkle/model/qwen3_model.h"
#include "twinkle/model/qwen3_flops.h"
#include "twinkle/model/rope_variant.h"
#include "twinkle/core/device_copy.h"
#include "twinkle/kernels/cpu/gemm_bf16.h"

#include "twinkle/dist/runtime.h"
#include "twinkle/parallel/expert_layout.h"

namespace twinkle {

Qwen3Model::Qwen3Model(const ModelConfig& cfg, std::shared_ptr<dist::ParallelState> ps, Qwen3ModelOptions opts)
    : cfg_(cfg), ps_(std::move(ps)), opts_(std::move(opts)) {
  kernels::check_mixed_precision_on(ps_->mesh.device_type(), opts_.mixed_precision);
  kernels_ = kernels::resolve_kernels(ps_->mesh.device_type(), opts_.kernels);
  kernels::apply_mixed_precision(kernels_, opts_.mixed_precision);
  if (opts_.mixed_precision == "bf16" && ps_->mesh.device_type() == "cpu" && !kernels::cpu::bf16_gemm_native()) {
    static bool said = false;  // once per process
    if (!said && ps_->world->rank() == 0)
      get_logger().warning("mixed_precision bf16: this CPU has no bf16 instructions (oneDNN ISA " +
                           kernels::cpu::dnnl_isa_name() +
                           "): the bf16 GEMMs run as fp32 GEMMs on bf16-rounded inputs (same numbers, no speed-up)");
    said = true;
  }
  recompute_ = parse_recompute(opts_.recompute_granularity);
  dev_ = parse_device(ps_->mesh.device_type());
  if (dev_ != Device::CPU) {
    scratch_.set_device(dev_);
  }
  check(cfg_.model_type == "qwen3" || cfg_.model_type == "qwen3_moe",
        "Qwen3Model: model_type '" + cfg_.model_type + "' is neither qwen3 nor qwen3_moe" +
            (cfg_.source.empty() ? "" : " (" + cfg_.source + ")"));
  const std::string model_name = cfg_.source.empty() ? std::string("the model") : cfg_.source;
  parallel::check_expert_layout(ps_->mesh, cfg_.is_moe(), cfg_.num_experts, model_name);
  parallel::check_moe_loss_options(opts_.moe_aux_loss_type, opts_.moe_aux_loss_coeff, opts_.moe_z_loss_coeff,
                                   ps_->mesh, cfg_.is_moe());
  tp_ = ps_->tp_size();
  // Megatron requires sequence parallelism for MoE with tp > 1 and Twinkle switches it on
  // (src/twinkle/model/megatron/strategy/megatron.py): each tp rank routes its own token shard.
  sp_ = tp_ > 1 && (ps_->sequence_parallel() || cfg_.is_moe());
  if (tp_ > 1 && cfg_.is_moe() && !ps_->sequence_parallel() && ps_->world->rank() == 0)
    get_logger().info("Qwen3-MoE with tp = " + std::to_string(tp_) + ": sequence parallelism switched on");
  // Megatron's arguments.py: "Disabling sequence parallelism because tensor model parallel size is 1"
  if (tp_ == 1 && ps_->sequence_parallel() && ps_->world->rank() == 0)
    get_logger().warning("sequence parallelism needs tp > 1: off (tp = 1), as Megatron disables it");
  auto fail = [&](const std::string& m) { throw Error("model does not fit the mesh: " + m); };
  if (cfg_.num_attention_heads % tp_) fail("num_attention_heads " + std::to_string(cfg_.num_attention_heads) + " is not divisible by tp " + std::to_string(tp_));
  if (cfg_.num_key_value_heads % tp_) fail("num_key_value_heads " + std::to_string(cfg_.num_key_value_heads) + " is not divisible by tp " + std::to_string(tp_));
  if (cfg_.intermediate_size % tp_) fail("intermediate_size " + std::to_string(cfg_.intermediate_size) + " is not divisible by tp " + std::to_string(tp_));
  if (ps_->cp_size() > 1)  // validates cp_comm_type and, for a2a, the heads against cp*tp
    cp_attention_ = std::make_shared<parallel::ContextParallelAttention>(
        ps_->cp, parallel::parse_cp_comm_type(opts_.cp_comm_type), cfg_.num_attention_heads,
        cfg_.num_key_value_heads, tp_, &kernels_, dev_);  // kernels_ keeps its address under set_kernels
  // Virtual pipeline stages: chunk c of pipeline rank r is virtual stage c*p + r (Megatron-core's
  // interleaved layout); the split runs over the p*v virtual stages.
  const int pp = ps_->pp_size(), vpp = ps_->mesh.vpp_size(), stages = pp * vpp;
  if (vpp > 1 && stages > cfg_.num_hidden_layers)
    fail("pp " + std::to_string(pp) + " x vpp " + std::to_string(vpp) + " = " + std::to_string(stages) +
         " virtual pipeline stages is more than num_hidden_layers " + std::to_string(cfg_.num_hidden_layers) +
         " (each virtual stage holds at least one layer)");
  if (vpp > 1 && !opts_.layers_per_stage.empty() && static_cast<int>(opts_.layers_per_stage.size()) != stages)
    fail("layers_per_stage lists " + std::to_string(opts_.layers_per_stage.size()) + " counts; with vpp " +
         std::to_string(vpp) + " it needs one per virtual pipeline stage (pp x vpp = " + std::to_string(stages) +
         "), in virtual-stage order: chunk c of pipeline rank r is entry c*pp + r");
  if (opts_.layers_per_stage.empty() && parallel::is_balanced_split_mode(opts_.pipeline_split))
    split_ = parallel::balanced_split(qwen3_stage_costs(cfg_), stages);
  else
    split_ = parallel::split_layers(cfg_.num_hidden_layers, stages, opts_.layers_per_stage);
  const int stage = ps_->pp_rank();
  first_rank_ = ps_->is_first_stage();
  last_rank_ = ps_->is_last_stage();
  for (int c = 0; c < vpp; ++c) {
    const size_t vs = static_cast<size_t>(c * pp + stage);
    chunks_.push_back(std::make_unique<Qwen3Chunk>(*this, c, split_.first[vs], split_.count[vs],
                                                   first_rank_ && c == 0, last_rank_ && c == vpp - 1));
  }
  vocab_ = parallel::make_vocab_shard(cfg_.vocab_size, ps_->tp_rank(), tp_);
  rope_ = kernels::cpu::make_rope_table(cfg_.max_position_embeddings, cfg_.head_dim, cfg_.rope_theta,
                                        rope_variant(cfg_));
  table_.set_kernels(&kernels_);  // every layer computes through the model's kernel table
  build_table();
  table_.materialize(stage, store_, ps_->ep_rank());  // this ep rank's experts only
  // Each region's size divisible by its ZeRO shard count: dense over dp-cp, experts over edp.
  store_.finalize(64 * ps_->dp_cp->size(), 64 * ps_->edp->size(), dev_);
}

void Qwen3Model::set_kernels(const kernels::KernelTable& t) {
  check(t.device == kernels_.device, "Qwen3Model::set_kernels: table for device '" + t.device +
                                         "' but the model runs on '" + kernels_.device + "'");
  check(t.complete(), "Qwen3Model::set_kernels: the kernel table lacks an op");
  kernels_ = t;
}

parallel::TensorParallel Qwen3Model::tp_group() const {
  return parallel::TensorParallel{ps_->tp.get(), tp_, ps_->tp_rank(), sp_};
}

// Declares every virtual stage's tensors in HF order (embed, layers, norm, lm_head), each entry on the
// pipeline rank holding it; keeps the layer objects of this rank's chunks. Layers of other ranks are
// built only for their entries.
void Qwen3Model::build_table() {
  const parallel::TensorParallel tp = tp_group();
  const int pp = ps_->pp_size(), mine = ps_->pp_rank(), stages = pp * ps_->mesh.vpp_size();
  const int64_t H = cfg_.hidden_size;
  const bool tied = cfg_.tie_word_embeddings;
  for (int vs = 0; vs < stages; ++vs) {
    const int s = vs % pp;
    table_.set_stage(s);
    Qwen3Chunk* ch = s == mine ? chunks_[static_cast<size_t>(vs / pp)].get() : nullptr;
    // The entries each unit of this chunk adds (the communication hooks' parameter lists).
    auto unit = [&](size_t before) {
      if (!ch) return;
      std::vector<size_t> ids;
      for (size_t id = before; id < table_.size(); ++id) ids.push_back(id);
      ch->unit_entries_.push_back(std::move(ids));
    };
    if (vs == 0) {
      const size_t before = table_.size();
      parallel::VocabParallelEmbedding e(table_, tp, "model.embed_tokens.weight", vocab_, H, tied);
      if (ch) ch->embed_tokens_ = e;
      unit(before);
    }
    if (ch) ch->unit_layer0_ = ch->unit_entries_.size();
    const int64_t l0 = split_.first[static_cast<size_t>(vs)];
    for (int64_t l = l0; l < l0 + split_.count[static_cast<size_t>(vs)]; ++l) {
      const size_t before = table_.size();
      Qwen3DecoderLayer layer(table_, tp, cfg_, l, &rope_, ps_->ep, ps_->etp);
      if (ch) ch->layers_.push_back(std::move(layer));
      unit(before);
    }
    if (vs == stages - 1) {
      const size_t before = table_.size();
      RMSNorm norm(table_, "model.norm.weight", H, cfg_.rms_norm_eps, sp_);
      using W = parallel::VocabParallelLMHead::Weight;
      const W w = !tied ? W::Own : (pp == 1 ? W::Shared : W::TiedCopy);
      parallel::VocabParallelLMHead head(table_, tp, vocab_, H, opts_.lm_head_chunk_tokens, w,
                                         w == W::Shared ? chunks_.front()->embed_tokens_.weight_entry() : parallel::kNoParam);
      if (ch) {
        ch->norm_ = norm;
        ch->lm_head_ = head;
      }
      unit(before);
    }
  }
}

Qwen3Chunk& Qwen3Model::only_chunk(const char* what) {
  check(chunks_.size() == 1, std::string("Qwen3Model::") + what + ": this rank holds " + std::to_string(chunks_.size()) +
                                 " model chunks (virtual pipeline stages): call it on chunk(c)");
  return *chunks_.front();
}

const Qwen3Chunk& Qwen3Model::only_chunk(const char* what) const {
  return const_cast<Qwen3Model*>(this)->only_chunk(what);
}

Qwen3DecoderLayer* Qwen3Model::local_layer(int64_t l) {
  for (auto& c : chunks_)
    if (Qwen3DecoderLayer* x = c->layer(l)) return x;
  return nullptr;
}

int64_t Qwen3Model::num_rank_layers() const {
  int64_t n = 0;
  for (const auto& c : chunks_) n += c->num_layers();
  return n;
}

int64_t Qwen3Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& e : table_.entries()) {
    if (!e.saved) continue;
    int64_t k = 1;
    for (auto d : e.full) k *= d;
    n += k;
  }
  return n;
}

float* Qwen3Model::pipeline_buffer(int which, int64_t elems, int index) {
  const std::string name = std::string(which == 0 ? "pp.recv_fwd" : "pp.recv_bwd") + (index ? "." + std::to_string(index) : "");
  return scratch_.get(name, {elems}).f32();
}

size_t Qwen3Model::saved_activation_bytes() const {
  size_t b = 0;
  for (const auto& c : chunks_) b += c->saved_activation_bytes();
  return b;
}

size_t Qwen3Model::workspace_bytes() const { return scratch_.bytes() + work_.bytes() + saved_activation_bytes(); }

}  // namespace twinkle
