// twinkle/model/qwen3_chunk.h — one pipeline model chunk of a Qwen3 model: a contiguous run of
// decoder layers with its first / last roles, and its per-micro-batch-slot forward and backward.
//
// A rank of a pipeline of p stages holds v chunks (Megatron-core's virtual pipeline stages,
// `--virtual-pipeline-model-parallel-size`; v = 1 without interleaving): chunk c of pipeline rank r
// is virtual stage c*p + r (megatron/core/transformer/transformer_block.py, get_num_layers_to_build
// with vp_stage), and the chunks of a rank run in the order the schedule asks
// (parallel/pipeline_schedule.h: 1F1B for v = 1, the interleaved schedule otherwise). The chunk
// holding the first virtual stage also holds the embedding, the chunk holding the last one the
// final norm and the fused lm head + cross entropy (Megatron's pre_process / post_process).
//
// Everything a chunk shares with the other chunks of its rank — the tensor table and stores, the
// kernel table, the tensor-parallel group, RoPE, LoRA state, scratch and recompute buffers, the
// communication hooks — lives in its Qwen3Model (qwen3_model.h), which owns the chunks; a chunk
// keeps its layers, its saved activations per micro-batch slot and its hook units.
#pragma once
#include <cstdint>
#include <vector>

#include "twinkle/model/causal_lm.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/qwen3_decoder_layer.h"
#include "twinkle/model/rms_norm.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/vocab_parallel_embedding.h"
#include "twinkle/parallel/vocab_parallel_lm_head.h"

namespace twinkle {

class Qwen3Model;

class Qwen3Chunk : public PipelineChunk {
 public:
  /// Chunk `index` of its rank (0-based, model order), holding global decoder layers
  /// [layer0, layer0 + num_layers); `first` / `last`: it holds the embedding / the final norm and
  /// lm head. Built by Qwen3Model, which fills its layers while building the tensor table.
  Qwen3Chunk(Qwen3Model& model, int index, int64_t layer0, int64_t num_layers, bool first, bool last)
      : model_(&model), index_(index), layer0_(layer0), nlayers_(num_layers), first_(first), last_(last) {}
  Qwen3Chunk(const Qwen3Chunk&) = delete;
  Qwen3Chunk& operator=(const Qwen3Chunk&) = delete;

  int index() const { return index_; }
  int64_t first_layer() const { return layer0_; }
  int64_t num_layers() const { return nlayers_; }
  /// Holds the first virtual stage (embedding) / the last one (final norm, lm head, loss).
  bool is_first() const { return first_; }
  bool is_last() const { return last_; }
  /// The decoder layer of global index `layer` when this chunk holds it, else nullptr.
  Qwen3DecoderLayer* layer(int64_t layer);

  /// Forward of micro-batch slot `slot`. `in_hidden` [hidden_rows, H] is the previous virtual
  /// stage's output (ignored on the first chunk of the model). On the last chunk computes the
  /// token cross entropy and returns its SUM over targets; when grad_scale != 0 it also runs the
  /// fused lm-head/CE backward with d(loss_sum)*grad_scale. Returns 0 on other chunks.
  double forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training) override;
  /// This chunk's output hidden [hidden_rows, H] of slot `slot` (non-last chunks).
  const float* output_hidden(int slot) override;
  /// Backward of slot `slot`. `d_out` [hidden_rows, H] is the gradient of this chunk's output
  /// (ignored on the last chunk). Returns d(input hidden) (nullptr on the first chunk); valid until
  /// the next backward call of any chunk of the model.
  const float* backward(int slot, const StageBatch& b, const float* d_out) override;
  /// Marks the next backward() as this step's last of this chunk: its gradients become final
  /// layer by layer and are reported to CommHooks::grad_ready. Reset by Qwen3Model::finalize_grads.
  void set_final_backward(bool final_backward) override { final_backward_ = final_backward; }
  /// Router statistics of slot `slot`'s last forward over this chunk's MoE layers.
  const MoeStageStats& moe_stats(int slot) const override;
  /// The activations slot `slot` holds (its last forward). Throws twinkle::Error for a slot
  /// without a forward.
  const StageActivations& slot_activations(int slot) const;
  /// Logits [vocab] of the last token of `b` after forward(slot, b, ..., training=false)
  /// (single-chunk, single-stage, tp = 1 models: Qwen3Model::last_token_logits checks).
  std::vector<float> last_token_logits(int slot, const StageBatch& b);
  /// Bytes of the saved activations of every slot of this chunk.
  size_t saved_activation_bytes() const;
  /// The activation sizes of this chunk's layers (qwen3_activations.h).
  ActivationDims activation_dims() const;

 private:
  friend class Qwen3Model;
  StageActivations& slot_acts(int slot);
  void moe_router_losses(const StageBatch& b, StageActivations& a, bool training);
  void unit_grads_final(size_t unit);  // tp sums + grad_ready of the unit's parameters
  void unit_use(size_t unit);          // param_use of the unit's parameters

  Qwen3Model* model_;
  int index_ = 0;
  int64_t layer0_ = 0, nlayers_ = 0;
  bool first_ = false, last_ = false;
  parallel::VocabParallelEmbedding embed_tokens_;  // first chunk of the model
  std::vector<Qwen3DecoderLayer> layers_;
  RMSNorm norm_;                                   // last chunk of the model
  parallel::VocabParallelLMHead lm_head_;          // last chunk of the model
  std::vector<StageActivations> slots_;            // saved activations per micro-batch slot
  // Communication hooks (CommHooks): this chunk's table entries per unit in forward order
  // (embedding on the first chunk, each decoder layer, final norm + lm head on the last chunk).
  std::vector<std::vector<size_t>> unit_entries_;
  size_t unit_layer0_ = 0;  // unit of layers_[0]
  std::vector<char> unit_final_;  // reported this step
  bool final_backward_ = false;
};

}  // namespace twinkle
