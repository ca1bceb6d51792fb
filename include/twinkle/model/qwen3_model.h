// twinkle/model/qwen3_model.h — Qwen3 causal LM, one pipeline stage of it, tensor-parallel.
//
// Semantics: Hugging Face transformers models/qwen3/modeling_qwen3.py (Qwen3ForCausalLM):
// pre-norm decoder layers; attention with per-head RMSNorm on q and k (q_norm/k_norm)
// before rotate_half RoPE; grouped-query attention; SwiGLU MLP; final RMSNorm; lm_head
// (tied to embed_tokens when tie_word_embeddings). Parallel layout: Megatron-core, built
// from the layer types of twinkle/parallel (column-parallel q/k/v/gate/up, row-parallel
// o/down with the bias added once after the reduction, vocab-parallel embedding / lm head /
// cross entropy, optional sequence parallelism) and layers split over pipeline stages
// (parallel/pipeline_split.h).
//
// The model is the composition, top-down:
//   embed_tokens (VocabParallelEmbedding, first stage)
//   layers[i]    (Qwen3DecoderLayer: RMSNorm, Qwen3Attention, RMSNorm, Qwen3MLP)
//   norm, lm_head (RMSNorm, VocabParallelLMHead fused with the loss, last stage)
// Every tensor of every stage is one entry of table() (parallel/tensor_table.h), which
// load, save, init and the optimizer's flags read. Its jobs live in separate files:
// qwen3_model.cpp (building the table and this stage's layers), qwen3_weights.cpp
// (init and checkpoint loading), qwen3_gather.cpp (full tensors for saving), qwen3_stage.cpp
// (the stage forward/backward).
//
// No autograd graph: forward() saves, per micro-batch slot, exactly the activations each
// block's backward needs in typed structs (qwen3_activations.h), and backward() accumulates
// into the parameter gradients of the flat ParamStore.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "twinkle/core/workspace.h"
#include "twinkle/data/batch.h"
#include "twinkle/dist/parallel_state.h"
#include "twinkle/io/model_config.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/io/sharded_checkpoint.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/model/causal_lm.h"
#include "twinkle/model/lora_config.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/qwen3_chunk.h"
#include "twinkle/model/qwen3_decoder_layer.h"
#include "twinkle/model/rms_norm.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/lora_dropout.h"
#include "twinkle/parallel/param_store.h"
#include "twinkle/parallel/pipeline_split.h"
#include "twinkle/parallel/tensor_table.h"
#include "twinkle/parallel/vocab_parallel.h"
#include "twinkle/parallel/vocab_parallel_embedding.h"
#include "twinkle/parallel/vocab_parallel_lm_head.h"

namespace twinkle {

struct Qwen3ModelOptions {
  /// Decoder layers per pipeline stage (size pp, summing to num_hidden_layers); empty = the
  /// split `pipeline_split` names.
  std::vector<int64_t> layers_per_stage;
  /// Split without layers_per_stage (parallel/pipeline_split.h): "balanced" (default; stages of
  /// equal matmul FLOPs, the lm head counted on the last stage: model/qwen3_flops.h) or "even"
  /// (Megatron-core's default).
  std::string pipeline_split = "balanced";
  /// Activation recompute (qwen3_activations.h Recompute; Megatron's recompute_granularity):
  /// "none" (default here; MegatronModel defaults to Twinkle's "full"), "selective" (core
  /// attention), "full" (every dense layer from its input). Results are bit-identical.
  std::string recompute_granularity = "none";
  /// Tokens per chunk of the fused lm-head + cross-entropy (bounds the [chunk, vocab/tp] logits buffer).
  int64_t lm_head_chunk_tokens = 1024;
  /// Qwen3-MoE router losses (parallel/expert_layout.h check_moe_loss_options):
  /// "global" = transformers' load_balancing_loss_func over the micro-batch's MoE layers
  /// (pp = 1), "per_layer" = Megatron's switch_load_balancing_loss_func per layer; the
  /// coefficient 0 (default, as Twinkle's Megatron path) logs the value without a gradient.
  std::string moe_aux_loss_type = "global";
  double moe_aux_loss_coeff = 0.0;
  double moe_z_loss_coeff = 0.0;  ///< Megatron's router z-loss coefficient
  /// Context-parallel attention when the mesh has cp > 1: "p2p" (ring) or "a2a" (Ulysses;
  /// heads must divide by cp*tp). Megatron's cp_comm_type.
  std::string cp_comm_type = "p2p";
  /// Kernel set the model starts with (twinkle/kernels/registry.h): "fused" (default) or "reference"
  /// (plain double-accumulating loops, for debugging). Resolved for the mesh's device_type; throws
  /// twinkle::Error for a device without kernels (npu: needs CANN; cuda: not built or no GPU) or
  /// another name. On cuda the dense Qwen3 model (attention biases included) and Qwen3-MoE run on every
  /// layout (tp/pp/dp/cp/ep/etp), in fp32 or bf16, with or without LoRA, as on the CPU.
  std::string kernels = "fused";
  /// "fp32" (default) or "bf16": Megatron's bf16 mixed precision (Float16Module + the distributed
  /// optimizer's fp32 main params) on the CPU and on cuda (the same rounding points). Every GEMM (kernels::mixed_precision_ops()) takes bf16
  /// inputs (activations, output gradients and a bf16 copy of the fp32 weight, rounded to nearest even)
  /// and accumulates and writes fp32; parameters, gradients (grad_reduce_in_fp32), AdamW state,
  /// RMSNorm statistics, RoPE, SwiGLU, attention (fp32 flash kernel: its QK^T / PV tiles are our own
  /// vectorized loops, not oneDNN GEMMs), softmax, log-sum-exp and cross entropy stay fp32. Applied
  /// by kernels::apply_mixed_precision. Throws twinkle::Error for another value and for "bf16" on a
  /// device without a bf16 kernel set (kernels::check_mixed_precision_on).
  std::string mixed_precision = "fp32";
};

class Qwen3Model : public CausalLM {
 public:
  /// Builds this rank's stage: its layers, its tensor-parallel shards. Throws
  /// twinkle::Error when the config does not fit the mesh (heads, kv heads or
  /// intermediate size not divisible by tp; pp larger than the number of layers;
  /// a custom layer split that does not sum to num_hidden_layers) or is neither qwen3 nor
  /// qwen3_moe; for qwen3_moe also check_expert_layout / check_moe_loss_options
  /// (parallel/expert_layout.h). A MoE model with
  /// tp > 1 runs with sequence parallelism (switched on, logged); with ep > 1 each ep rank
  /// holds num_experts / ep experts of every MoE layer (qwen3_moe_block.h).
  Qwen3Model(const ModelConfig& cfg, std::shared_ptr<dist::ParallelState> ps, Qwen3ModelOptions opts = {});
  // The layers point into the table and the table into the store: not copyable or movable.
  Qwen3Model(const Qwen3Model&) = delete;
  Qwen3Model& operator=(const Qwen3Model&) = delete;

  const ModelConfig& config() const override { return cfg_; }
  ParamStore& store() override { return store_; }
  /// The parameters the optimizer trains: the adapter store after add_adapter, else store().
  ParamStore& trainable_store() { return has_adapter() ? adapter_store_ : store_; }
  dist::ParallelState& ps() override { return *ps_; }
  /// Every tensor of the model (all stages) with its shard on this rank.
  const parallel::TensorTable& table() const { return table_; }
  /// Decoder layers of each virtual pipeline stage (p*v entries; virtual stage c*p + r is chunk c of
  /// pipeline rank r; p entries without interleaving).
  const parallel::LayerSplit& layer_split() const { return split_; }
  /// This rank's model chunks (virtual pipeline stages; one without interleaving), model order.
  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  Qwen3Chunk& chunk(int c) { return *chunks_.at(static_cast<size_t>(c)); }
  PipelineChunk& pipeline_chunk(int c) override { return chunk(c); }
  const Qwen3Chunk& chunk(int c) const { return *chunks_.at(static_cast<size_t>(c)); }
  /// First global layer / layer count of this rank's only chunk (throws twinkle::Error with
  /// several chunks: ask chunk(c)).
  int64_t first_layer() const { return only_chunk("first_layer").first_layer(); }
  int64_t num_local_layers() const { return only_chunk("num_local_layers").num_layers(); }
  /// Decoder layers this rank holds over all its chunks.
  int64_t num_rank_layers() const;
  const parallel::VocabShard& vocab_shard() const { return vocab_; }
  /// Parameters of the full model (HF count, no padding); the same on every rank.
  int64_t num_parameters() const;

  /// Seeded random init, identical for every layout: each full HF tensor is drawn from
  /// N(0, initializer_range) with a generator seeded by (seed, tensor name), then sliced;
  /// norm weights 1, biases 0, and the embedding row of config.pad_token_id (when set) 0
  /// (transformers Qwen3PreTrainedModel._init_weights, nn.Embedding padding_idx).
  void init_random(uint64_t seed);
  /// Loads this rank's shards from a HF checkpoint (any float dtype, converted to f32).
  /// Throws twinkle::Error naming a missing tensor or a wrong shape; every tensor of this rank
  /// is checked before any is read, so a refused checkpoint changes no parameter.
  void load_checkpoint(const CheckpointReader& ck);
  /// The checks of load_checkpoint alone (this rank's tensors present with their shapes; the
  /// expert layout of a MoE checkpoint), reading no tensor data: a caller agrees on them over the
  /// world before any rank loads (MegatronModel::load), so a refusal changes no rank's parameters.
  void check_checkpoint(const CheckpointReader& ck) const;
  /// Tensors of `ck` that load_checkpoint reads for no entry of the model (any stage or rank):
  /// what transformers' from_pretrained reports as "Some weights of the model checkpoint ... were
  /// not used" — e.g. model.layers.3.* when config.json says num_hidden_layers = 3, or a renamed
  /// tensor. Not listed: zero-element tensors (legal filler) and, for a tied
  /// model, a lm_head.weight copy of the embedding (transformers 5's tie rule, io/tied_head.h).
  /// Sorted by name.
  std::vector<std::string> unused_checkpoint_tensors(const CheckpointReader& ck) const;
  /// Full HF tensors (f32) assembled on global rank 0 from every tp/pp shard (collective
  /// over the world; other ranks return an empty list). Vocab padding is dropped; a
  /// tied lm head is not listed (HF convention).
  /// With grads = true the gradients are gathered instead (same names); a frozen tensor (no
  /// gradient) is refused on every rank before any exchange.
  std::vector<std::pair<std::string, Tensor>> gather_state_dict(bool grads = false);

  /// HF module names of every linear layer but the lm head (all stages, model order):
  /// model.layers.{i}.self_attn.{q,k,v,o}_proj, then model.layers.{i}.mlp.{gate,up,down}_proj
  /// (dense layer) or, in a Qwen3-MoE layer, model.layers.{i}.mlp.gate (the router) and
  /// model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj (transformers 4's module names, PEFT's keys).
  std::vector<std::string> linear_modules() const;
  /// Every other module of transformers' Qwen3ForCausalLM / Qwen3MoeForCausalLM (transformers 4
  /// module tree, named_modules() without the root, model order): model, model.embed_tokens
  /// (nn.Embedding), model.layers and each decoder layer, its self_attn / mlp containers, q_norm,
  /// k_norm, input_layernorm, post_attention_layernorm (Qwen3RMSNorm), act_fn, the MoE block's
  /// experts list and each expert module, model.norm, model.rotary_emb and lm_head (the output
  /// nn.Linear), each with what it is and what PEFT does when a target selects it (resolve_lora_targets
  /// refuses them: twinkle has LoRA on linear layers only, the lm head excluded).
  std::vector<NonLoraModule> other_modules() const;
  /// Adds one LoRA adapter (PEFT semantics, parallel/lora.h sharding) to the modules `cfg`
  /// targets (resolve_lora_targets), on every stage's table and this stage's layers. The
  /// adapter tensors (`<module>.lora_A.weight` [r, in], `<module>.lora_B.weight` [out, r])
  /// live in a separate ParamStore (trainable_store()); the base store drops its gradient
  /// buffer (frozen: no weight gradient is computed, the optimizer never sees it). Init per
  /// cfg.init_lora_weights, each full tensor drawn from a generator seeded by (seed, name)
  /// then sliced, so every layout starts from the same adapter. lora_dropout > 0: training
  /// forwards apply PEFT's dropout to the LoRA input with masks keyed by (seed, step, module,
  /// token identity, feature) (parallel/lora_dropout.h), so every layout draws the same masks.
  /// Qwen3-MoE: attention, the dense mlp_only_layers, the router ("gate", replicated pair) and
  /// the experts take adapters: one pair per targeted expert and projection (PEFT on
  /// transformers 4's per-expert nn.Linear: mlp.experts.{e}.{gate,up,down}_proj, which
  /// all-linear and the suffixes gate_proj / up_proj / down_proj reach, and names such as
  /// "experts.0.gate_proj" reach one expert's), held by the expert's ep rank in the adapter
  /// store's expert region and reduced over expert-dp (Qwen3MoeBlock::set_expert_lora); their
  /// dropout masks are keyed by the routed rows' tokens, which travel with the rows under ep.
  /// Under context parallelism the masks' token identities follow the tokens through the cp
  /// split, so cp layouts draw the single process's masks too.
  /// Throws twinkle::Error on an invalid config (validate), an unknown target, a second
  /// adapter or etp > 1 (as Megatron-Bridge).
  void add_adapter(const LoraConfig& cfg, uint64_t seed);
  /// The step the LoRA dropout masks of the next forwards / backwards belong to (MegatronModel
  /// sets it before each forward_backward; 0-based count of earlier forward_backward calls).
  void set_lora_dropout_step(int64_t step) { lora_step_ = step; }
  bool has_adapter() const { return table_.has_adapters(); }
  const LoraConfig& adapter_config() const { return lora_; }
  /// The targeted module names of the adapter (empty without one).
  const std::vector<std::string>& adapter_targets() const { return lora_targets_; }
  /// Loads this rank's adapter shards from a PEFT adapter checkpoint (keys
  /// "base_model.model.<module>.lora_A.weight", or the bare HF names). Throws twinkle::Error
  /// naming a missing tensor or a wrong shape (checked for all before any is read).
  void load_adapter(const SafetensorsFile& ck);
  /// The checks of load_adapter alone (as check_checkpoint).
  void check_adapter(const SafetensorsFile& ck) const;
  /// Like gather_state_dict, for the adapter tensors (HF names, not PEFT's prefix).
  std::vector<std::pair<std::string, Tensor>> gather_adapter_state_dict(bool grads = false);
  /// Like gather_state_dict (adapters = false) / gather_adapter_state_dict (true), but each
  /// rank's local values are read from `flat` (a buffer in the flat layout of the base store /
  /// the adapter store, e.g. the optimizer's AdamW moments from DistributedOptimizer::
  /// gather_state) instead of the parameters: full HF-named f32 tensors on rank 0 (the
  /// layout-independent form a resharding checkpoint needs). Collective over the world.
  std::vector<std::pair<std::string, Tensor>> gather_flat(const float* flat, bool adapters);
  /// The inverse of gather_flat: fills this rank's slice of every base (adapters = false) or
  /// adapter (true) tensor of its stage from the full HF-named tensors of `ck` into `flat` (the
  /// store's flat layout; vocab padding rows zeroed), whatever layout wrote them. Throws
  /// twinkle::Error naming the file and the tensor that is missing or has the wrong shape.
  void load_flat(const SafetensorsFile& ck, bool adapters, float* flat);
  /// load_flat from a sharded checkpoint (io/sharded_checkpoint.h; the reader's prefix picks the
  /// kind of state, e.g. "exp_avg/"): each entry's slice is read straight from the chunks that
  /// hold it (a tp / etp shard reads only its rows or columns), whatever layout wrote them.
  /// Throws twinkle::Error naming the index or file and the tensor that is missing, misshapen
  /// or not fully stored.
  void load_flat(const ShardedCheckpointReader& ck, bool adapters, float* flat);

  /// Prepares a micro-batch for this stage (shift targets, SP padding). Validates ids. On device
  /// "cuda" also uploads its token metadata once (StageBatch's device pointers).
  StageBatch prepare(const MicroBatch& mb) const override;
  /// Where parameters, gradients, activations and scratch live: the mesh's device_type (cpu, or
  /// cuda: every buffer on the GPU, hidden states in and out of forward/backward included).
  Device device() const override { return dev_; }
  /// A buffer of `elems` floats in the model's memory for a received hidden state (which = 0) or
  /// gradient (which = 1) of the pipeline (PipelineStage::recv_buffer); `index` tells apart the
  /// receives the interleaved schedule holds at once. Valid until the next call with the same
  /// `which` and `index`.
  float* pipeline_buffer(int which, int64_t elems, int index = 0) override;
  /// Rows of the hidden state exchanged between stages: T, or T/tp under SP.
  int64_t hidden_rows(const StageBatch& b) const override;

  /// The forward / output / backward of this rank's only chunk (Qwen3Chunk; throws twinkle::Error
  /// when the rank holds several chunks: call chunk(c) instead). On the last stage forward returns
  /// the token cross entropy SUM over targets and, when grad_scale != 0, also runs the fused
  /// lm-head/CE backward with d(loss_sum)*grad_scale (the caller passes 1/global_token_count for
  /// the per-token mean); 0 on other stages. backward returns d(input hidden) (nullptr on the first
  /// stage), valid until the next backward call.
  double forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training) {
    return only_chunk("forward").forward(slot, b, in_hidden, grad_scale, training);
  }
  const float* output_hidden(int slot) { return only_chunk("output_hidden").output_hidden(slot); }
  const float* backward(int slot, const StageBatch& b, const float* d_out) {
    return only_chunk("backward").backward(slot, b, d_out);
  }
  /// After all micro-batches: sums tp-partial gradients (q_norm/k_norm; norms and row-parallel
  /// biases under SP) over tp, and tied-embedding gradients over the embedding group
  /// (Megatron finalize_model_grads: _allreduce_layernorm_grads, _allreduce_word_embedding_grads).
  /// With comm hooks set, the tp sums of a layer already ran when its final backward reported it,
  /// and finalize_grads reports every parameter not reported yet (CommHooks::grad_ready).
  void finalize_grads() override;
  /// Installs (or, with all members empty, removes) the communication hooks.
  void set_comm_hooks(CommHooks hooks) override;
  /// Marks the next backward() of the only chunk as this step's last (Qwen3Chunk::set_final_backward).
  void set_final_backward(bool final_backward) { only_chunk("set_final_backward").set_final_backward(final_backward); }
  /// Logits [vocab] of the last token of `b` after forward(slot, b, ..., training=false).
  /// Single-stage, tp = 1 models only (generation); throws twinkle::Error otherwise.
  std::vector<float> last_token_logits(int slot, const StageBatch& b);
  /// A Qwen3-MoE model (model_type qwen3_moe).
  bool is_moe() const override { return cfg_.is_moe(); }
  MoeLossSettings moe_loss_settings() const override {
    return {opts_.moe_aux_loss_type, opts_.moe_aux_loss_coeff, opts_.moe_z_loss_coeff};
  }
  const Qwen3ModelOptions& options() const { return opts_; }
  /// Micro-batches of the global batch of this step (all dp ranks): the router losses are
  /// averaged over them (Megatron's loss scale 1 / num_microbatches). Set before forward.
  void set_global_micro_batches(int64_t n) override { global_mbs_ = n > 0 ? n : 1; }
  /// Router statistics of slot `slot`'s last forward over the only chunk's MoE layers.
  const MoeStageStats& moe_stats(int slot) const { return only_chunk("moe_stats").moe_stats(slot); }
  /// The activation recompute mode (options().recompute_granularity parsed).
  Recompute recompute() const { return recompute_; }
  /// Bytes of the saved activations of every micro-batch slot of every chunk (what recompute shrinks).
  size_t saved_activation_bytes() const;
  /// The activations slot `slot` of the only chunk holds (its last forward; read-only, e.g. the
  /// routing a benchmark checks its all-to-all volume against). Throws twinkle::Error for a slot
  /// without a forward.
  const StageActivations& slot_activations(int slot) const { return only_chunk("slot_activations").slot_activations(slot); }
  /// Bytes held by activation / scratch workspaces (saved activations, recompute buffers, scratch).
  size_t workspace_bytes() const;

  /// The kernels every compute op of this stage calls (see twinkle/model/kernelize.h to swap them).
  const kernels::KernelTable& kernels() const { return kernels_; }
  /// Replaces the kernel table (kernelize_model does this; the device must match the model's).
  void set_kernels(const kernels::KernelTable& t);

 private:
  friend class Qwen3Chunk;  // the chunks compute with the model's shared state
  void build_table();
  Qwen3Chunk& only_chunk(const char* what);
  const Qwen3Chunk& only_chunk(const char* what) const;
  void upload(StageBatch& b) const;  // qwen3_stage.cpp
  template <class Reader>
  void load_entry(const Reader& ck, size_t id, float* dst = nullptr);  // qwen3_weights.cpp; dst: the parameter
  // Loads every base (adapters = false) or adapter entry of this rank, each checked before any
  // is read; `flat`: the store's flat buffer to fill instead of the parameters (load_flat).
  template <class Reader>
  void load_entries(const Reader& ck, bool adapters, float* flat);
  template <class Reader>
  void check_entries(const Reader& ck, bool adapters) const;
  std::vector<std::pair<std::string, Tensor>> gather(bool grads, bool adapters, const float* flat = nullptr);
  parallel::TensorParallel tp_group() const;
  // The decoder layer of global index `layer` when one of this rank's chunks holds it, else nullptr.
  Qwen3DecoderLayer* local_layer(int64_t layer);
  // The LoRA dropout of a forward / backward of `b` (p = 0: none; qwen3_stage.cpp).
  parallel::LoraDropout lora_dropout_for(const StageBatch& b, bool training, int slot) const;
  // The dropout token identities (row, position) of every token of `mb` [T0] (before any split).
  std::vector<uint64_t> lora_token_keys(const MicroBatch& mb) const;

  ModelConfig cfg_;
  std::shared_ptr<dist::ParallelState> ps_;
  Qwen3ModelOptions opts_;
  Device dev_ = Device::CPU;
  parallel::LayerSplit split_;         // per virtual stage
  parallel::TensorTable table_;
  ParamStore store_;
  ParamStore adapter_store_;           // LoRA tensors (add_adapter)
  LoraConfig lora_;
  uint64_t lora_seed_ = 0;             // the adapter's seed (init and dropout masks)
  int64_t lora_step_ = 0;              // set_lora_dropout_step
  std::vector<std::string> lora_targets_;
  parallel::VocabShard vocab_;
  int tp_ = 1;
  bool sp_ = false;
  std::shared_ptr<parallel::ContextParallelAttention> cp_attention_;  // cp > 1 only
  bool first_rank_ = true, last_rank_ = true;          // pipeline rank 0 / p - 1 (embedding / lm head)
  kernels::cpu::RopeTable rope_;
  kernels::KernelTable kernels_;                       // every compute op goes through it
  std::vector<std::unique_ptr<Qwen3Chunk>> chunks_;    // this rank's model chunks, model order
  Recompute recompute_ = Recompute::None;
  RecomputeBuffers work_;                              // where recomputed layers run (one per rank: one layer runs at a time)
  Workspace scratch_;                                  // scratch only: nothing in it outlives a call
  int64_t global_mbs_ = 1;                             // micro-batches of the step (MoE losses)
  CommHooks hooks_;
  bool hooks_on_ = false;
  bool embedding_group_param(size_t entry) const;      // summed over the embedding group in finalize_grads
  void comm_progress() { if (hooks_.progress) hooks_.progress(); }
};

}  // namespace twinkle
