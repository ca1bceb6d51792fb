// twinkle/model/causal_lm.h — what the trainer needs of a causal language model on a parallel layout.
//
// A model family (Qwen3 and Qwen3-MoE today: model/qwen3_model.h) implements CausalLM: it builds its
// tensor table and this rank's stores, prepares micro-batches, owns this rank's pipeline model chunks
// and finalises gradients. The Engine (train/engine.h) runs a step through this interface only — the
// pipeline schedules (parallel/pipeline_schedule.h, pipeline_interleaved.h) call a chunk's forward and
// backward per micro-batch slot — so a second family or a rank holding several chunks (virtual
// pipeline stages) needs no change to the trainer. Megatron-core's counterpart is the list of model
// chunks handed to forward_backward_func plus finalize_model_grads (megatron/core/pipeline_parallel/
// schedules.py, megatron/core/distributed/finalize_model_grads.py).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "twinkle/core/tensor.h"
#include "twinkle/data/batch.h"
#include "twinkle/dist/parallel_state.h"
#include "twinkle/io/model_config.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/param_store.h"

namespace twinkle {

/// Observers of a chunk's passes through which the data-parallel communication overlaps them
/// (Megatron-core DDP's backward hooks and forward pre-hooks, distributed_data_parallel.py;
/// train/engine.h wires them to the DistributedOptimizer). Any may be empty.
struct CommHooks {
  /// `p`'s gradient is final for this step: called in the backward marked by
  /// set_final_backward, per parameter, right after its layer's backward (tp-partial gradients
  /// already summed over tp), and from finalize_grads for the rest (the tied embedding after its
  /// embedding-group sum, adapter parameters, a stage that ran no micro-batch). Every stage
  /// reports in the same order on every dp rank: backward order (lm head and final norm, layers
  /// last to first, embedding; chunks last to first), then the adapter store in declaration order,
  /// then the tied pair.
  std::function<void(const Param&)> grad_ready;
  /// A forward is about to read `p` (called per parameter before each layer's forward).
  std::function<void(const Param&)> param_use;
  /// Between two layers of every forward and backward (lets non-blocking collectives progress).
  std::function<void()> progress;
};

/// The router-loss settings a step's MoE statistics are evaluated with (Qwen3ModelOptions'
/// moe_aux_loss_type / _coeff, moe_z_loss_coeff; parallel/expert_layout.h check_moe_loss_options).
struct MoeLossSettings {
  std::string aux_type = "global";  ///< "global" (transformers) | "per_layer" (Megatron)
  double aux_coeff = 0.0;
  double z_coeff = 0.0;
};

/// One pipeline model chunk (a contiguous run of layers; Megatron's model chunk / virtual stage).
class PipelineChunk {
 public:
  virtual ~PipelineChunk() = default;
  /// Forward of micro-batch slot `slot`; `in_hidden` [hidden_rows, H] from the previous virtual
  /// stage (ignored on the model's first chunk). The model's last chunk returns the token cross
  /// entropy SUM over targets and, when grad_scale != 0, runs the loss backward with
  /// d(loss_sum)*grad_scale; 0 elsewhere.
  virtual double forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training) = 0;
  /// The chunk's output hidden [hidden_rows, H] of slot `slot` (not on the model's last chunk).
  virtual const float* output_hidden(int slot) = 0;
  /// Backward of slot `slot` given d(output) (ignored on the model's last chunk); returns d(input)
  /// (nullptr on the model's first chunk), valid until the next backward of any chunk.
  virtual const float* backward(int slot, const StageBatch& b, const float* d_out) = 0;
  /// The next backward is this step's last of this chunk (its gradients become final: CommHooks).
  virtual void set_final_backward(bool final_backward) = 0;
  /// Router statistics of slot `slot`'s last forward over this chunk's MoE layers.
  virtual const MoeStageStats& moe_stats(int slot) const = 0;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual dist::ParallelState& ps() = 0;
  /// The base parameters (the optimizer's store without an adapter).
  virtual ParamStore& store() = 0;
  /// Where parameters, activations and scratch live (the mesh's device_type).
  virtual Device device() const = 0;
  /// A mixture-of-experts model: the step reduces router statistics (MoeStageStats).
  virtual bool is_moe() const = 0;
  virtual MoeLossSettings moe_loss_settings() const = 0;
  /// Micro-batches of the step's global batch (all dp ranks): the router losses are averaged over them.
  virtual void set_global_micro_batches(int64_t n) = 0;
  /// Prepares a micro-batch for this rank (shifted targets, SP / cp split, device upload); throws
  /// twinkle::Error naming a bad token id, label, position or length.
  virtual StageBatch prepare(const MicroBatch& mb) const = 0;
  /// Rows of the hidden state exchanged between pipeline stages (T, or T/tp under SP).
  virtual int64_t hidden_rows(const StageBatch& b) const = 0;
  /// This rank's model chunks (one per virtual pipeline stage it holds), model order.
  virtual int num_chunks() const = 0;
  virtual PipelineChunk& pipeline_chunk(int c) = 0;
  /// A receive buffer in the model's memory (parallel/pipeline_interleaved.h recv_buffer).
  virtual float* pipeline_buffer(int which, int64_t elems, int index) = 0;
  /// After all micro-batches: the tp / embedding-group gradient sums (Megatron finalize_model_grads).
  virtual void finalize_grads() = 0;
  /// Installs (all members empty: removes) the communication hooks.
  virtual void set_comm_hooks(CommHooks hooks) = 0;
};

}  // namespace twinkle
