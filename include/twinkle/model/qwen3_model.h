// twinkle/model/qwen3_model.h — Qwen3 causal LM, one pipeline stage of it, tensor-parallel.
//
// Semantics: Hugging Face transformers models/qwen3/modeling_qwen3.py (Qwen3ForCausalLM):
// pre-norm decoder layers; attention with per-head RMSNorm on q and k (q_norm/k_norm)
// before rotate_half RoPE; grouped-query attention; SwiGLU MLP; final RMSNorm; lm_head
// (tied to embed_tokens when tie_word_embeddings). Parallel layout: Megatron-core
// (column-parallel q/k/v/gate/up, row-parallel o/down with the bias added once after the
// reduction, vocab-parallel embedding / lm head / cross entropy, optional sequence
// parallelism, layers split over pipeline stages).
//
// No autograd graph: forward() saves, per micro-batch slot, exactly the activations each
// layer's backward needs (named in qwen3_layer.cpp), and backward() accumulates into the
// parameter gradients of the flat ParamStore.
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
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/model/parameter.h"
#include "twinkle/parallel/vocab_parallel.h"

namespace twinkle {

struct Qwen3ModelOptions {
  /// Decoder layers per pipeline stage (size pp, summing to num_hidden_layers); empty = even split.
  std::vector<int64_t> layers_per_stage;
  /// Tokens per chunk of the fused lm-head + cross-entropy (bounds the [chunk, vocab/tp] logits buffer).
  int64_t lm_head_chunk_tokens = 1024;
  /// Kernel set the model starts with (twinkle/kernels/registry.h): "fused" (default) or "reference"
  /// (plain double-accumulating loops, for debugging). Resolved for the mesh's device_type; throws
  /// twinkle::Error for a device without kernels (npu: needs CANN; cuda: not built) or another name.
  std::string kernels = "fused";
};

/// A micro-batch as one stage sees it: the MicroBatch plus shifted targets and, under
/// sequence parallelism, padding so the token count divides by tp.
struct StageBatch {
  int64_t T = 0;                      ///< tokens (padded to a multiple of tp under SP)
  std::vector<int32_t> ids;           ///< [T]
  std::vector<int32_t> targets;       ///< [T]: labels shifted by one inside each segment, -100 elsewhere
  std::vector<int32_t> positions;     ///< [T]
  std::vector<int32_t> cu_seqlens;    ///< segments of the token axis
  int64_t num_targets = 0;            ///< targets != -100
};

class Qwen3Model {
 public:
  /// Builds this rank's stage: its layers, its tensor-parallel shards. Throws
  /// twinkle::Error when the config does not fit the mesh (heads, kv heads or
  /// intermediate size not divisible by tp; pp larger than the number of layers;
  /// a custom layer split that does not sum to num_hidden_layers) or is not a dense qwen3.
  Qwen3Model(const ModelConfig& cfg, std::shared_ptr<dist::ParallelState> ps, Qwen3ModelOptions opts = {});

  const ModelConfig& config() const { return cfg_; }
  ParamStore& store() { return store_; }
  dist::ParallelState& ps() { return *ps_; }
  int64_t first_layer() const { return layer0_; }
  int64_t num_local_layers() const { return nlayers_; }
  const parallel::VocabShard& vocab_shard() const { return vocab_; }
  /// Parameters of the full model (HF count, no padding); the same on every rank.
  int64_t num_parameters() const;

  /// Seeded random init, identical for every layout: each full HF tensor is drawn from
  /// N(0, initializer_range) with a generator seeded by (seed, tensor name), then sliced;
  /// norm weights 1, biases 0 (transformers Qwen3PreTrainedModel._init_weights).
  void init_random(uint64_t seed);
  /// Loads this rank's shards from a HF checkpoint (any float dtype, converted to f32).
  /// Throws twinkle::Error naming a missing tensor or a wrong shape.
  void load_checkpoint(const CheckpointReader& ck);
  /// Full HF tensors (f32) assembled on global rank 0 from every tp/pp shard (collective
  /// over the world; other ranks return an empty list). Vocab padding is dropped; a
  /// tied lm head is not listed (HF convention).
  /// With grads = true the gradients are gathered instead (same names).
  std::vector<std::pair<std::string, Tensor>> gather_state_dict(bool grads = false);

  /// Prepares a micro-batch for this stage (shift targets, SP padding). Validates ids.
  StageBatch prepare(const MicroBatch& mb) const;
  /// Rows of the hidden state exchanged between stages: T, or T/tp under SP.
  int64_t hidden_rows(const StageBatch& b) const;

  /// Forward of this stage for micro-batch slot `slot`. `in_hidden` [hidden_rows, H] is the
  /// previous stage's output (ignored on the first stage). On the last stage computes the
  /// token cross entropy and returns its SUM over targets; when grad_scale != 0 it also
  /// runs the fused lm-head/CE backward with d(loss_sum)*grad_scale (so the caller passes
  /// 1/global_token_count for the per-token mean). Returns 0 on other stages.
  double forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training);
  /// This stage's output hidden [hidden_rows, H] of slot `slot` (non-last stages).
  const float* output_hidden(int slot);
  /// Backward of slot `slot`. `d_out` [hidden_rows, H] is the gradient of this stage's
  /// output (ignored on the last stage). Returns d(input hidden) (nullptr on the first stage);
  /// valid until the next backward call.
  const float* backward(int slot, const StageBatch& b, const float* d_out);
  /// After all micro-batches: sums tp-partial gradients (q_norm/k_norm; norms and row-parallel
  /// biases under SP) over tp, and tied-embedding gradients over the embedding group
  /// (Megatron finalize_model_grads: _allreduce_layernorm_grads, _allreduce_word_embedding_grads).
  void finalize_grads();
  /// Logits [vocab] of the last token of `b` after forward(slot, b, ..., training=false).
  /// Single-stage, tp = 1 models only (generation); throws twinkle::Error otherwise.
  std::vector<float> last_token_logits(int slot, const StageBatch& b);
  /// Bytes held by activation / scratch workspaces.
  size_t workspace_bytes() const;

  /// The kernels every compute op of this stage calls (see twinkle/model/kernelize.h to swap them).
  const kernels::KernelTable& kernels() const { return kernels_; }
  /// Replaces the kernel table (kernelize_model does this; the device must match the model's).
  void set_kernels(const kernels::KernelTable& t);

 private:
  struct LayerParams {
    size_t ln1, q, k, v, o, qn, kn, ln2, gate, up, down;
    size_t qb = SIZE_MAX, kb = SIZE_MAX, vb = SIZE_MAX, ob = SIZE_MAX;
  };
  float* P(size_t i) { return store_.params()[i].data.f32(); }
  float* G(size_t i) { return store_.params()[i].grad.f32(); }
  Workspace& slot_ws(int slot);
  void layer_forward(int slot, int64_t li, const StageBatch& b, const float* x, float* y);
  void layer_backward(int slot, int64_t li, const StageBatch& b, const float* x, const float* dy, float* dx);
  double head_forward(int slot, const StageBatch& b, const float* x, float grad_scale, bool training);
  void declare_params();
  /// Megatron gather_from_sequence_parallel_region: under SP all-gathers this rank's [Tl, H]
  /// rows into ws[full_key] ([T, H]) and returns it; without SP returns `local` (T == Tl).
  const float* sp_all_gather(Workspace& ws, const std::string& full_key, const float* local, int64_t T, int64_t Tl);
  /// Reduces a tp-partial [T, H] sum (row-parallel output, column-parallel input gradient):
  /// under SP reduce-scatters into scratch[local_key] ([Tl, H]); else all-reduces in place.
  /// Returns this rank's reduced rows.
  float* tp_reduce_rows(float* full, const char* local_key, int64_t T, int64_t Tl);
  void for_each_full_tensor(const std::function<void(Param&)>& fn);

  ModelConfig cfg_;
  std::shared_ptr<dist::ParallelState> ps_;
  Qwen3ModelOptions opts_;
  ParamStore store_;
  parallel::VocabShard vocab_;
  int64_t layer0_ = 0, nlayers_ = 0;
  int64_t H_ = 0, D_ = 0, hq_ = 0, hkv_ = 0, I_ = 0;  // local sizes
  int tp_ = 1;
  bool sp_ = false;
  bool first_ = true, last_ = true;
  size_t embed_ = SIZE_MAX, final_norm_ = SIZE_MAX, lm_head_ = SIZE_MAX;
  std::vector<LayerParams> layers_;
  kernels::cpu::RopeTable rope_;
  kernels::KernelTable kernels_;
  std::vector<Workspace> slots_;
  Workspace scratch_;
};

}  // namespace twinkle
