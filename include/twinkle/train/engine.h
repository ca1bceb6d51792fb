// twinkle/train/engine.h — one training step over micro-batches on any parallel layout.
//
// Loss normalisation (Megatron-core with calculate_per_token_loss): the gradient is that of
//     sum over every labelled token of the global batch of -log p(token)
//     / (number of labelled tokens in the global batch),
// the count taken over all micro-batches and all dp-cp ranks before the forward pass, so
// any layout and any micro-batch split equals one process on the whole batch. The
// reported loss is the same global per-token mean (identical on every rank).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "twinkle/data/batch.h"
#include "twinkle/model/causal_lm.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/parallel/pipeline_interleaved.h"
#include "twinkle/parallel/pipeline_schedule.h"

namespace twinkle {

struct StepResult {
  double loss = 0;               ///< the objective: lm_loss (+ MoE router-loss terms, see below)
  /// The global sum over labelled tokens of -log p(label) (lm_loss = lm_loss_sum / label_tokens; 0 without
  /// a labelled token): the numerator Megatron's evaluate accumulates over its eval iterations.
  double lm_loss_sum = 0;
  int64_t label_tokens = 0;      ///< global labelled tokens
  int64_t tokens = 0;            ///< global tokens processed (padding included)
  int64_t sequences = 0;         ///< global sequences (rows of padded micro-batches, segments of packed ones)
  int64_t sequence_tokens = 0;   ///< their real tokens (padding excluded); / sequences = the mean length MFU uses
  parallel::PipelineTimes times; ///< this rank's compute / communication split
  // Qwen3-MoE (moe true): loss = lm_loss + aux_coeff * aux_loss + z_coeff * z_loss, where
  // aux_loss / z_loss are means over the global batch's micro-batches of the per-micro-batch
  // value (global: transformers' load_balancing_loss_func over the micro-batch's MoE layers;
  // per_layer: the sum over MoE layers of Megatron's per-layer loss; z: sum over layers of
  // Megatron's z-loss), computed and reported even with coefficient 0;
  // expert_load_max/min: the largest / smallest share of routed slots (real tokens, all MoE
  // layers and micro-batches). tests/reference/qwen3_moe_ref.py step_losses.
  bool moe = false;
  double lm_loss = 0, aux_loss = 0, z_loss = 0, expert_load_max = 0, expert_load_min = 0;
};

class Engine {
 public:
  /// Runs steps of `model` (any CausalLM: Qwen3 / Qwen3-MoE today), which must outlive the engine.
  explicit Engine(CausalLM& model);
  /// Forward and backward of this rank's micro-batches (gradients accumulate into the
  /// model's ParamStore, then tp / embedding-group reductions run). All micro-batches of
  /// one call must be given to every rank of the same dp-cp coordinate. The list may be empty
  /// (this replica has no row this step); with no labelled token in the global batch the
  /// loss is 0 with label_tokens 0 and the gradients stay zero. Under expert parallelism
  /// (ep > 1) a replica with fewer micro-batches than another runs filler micro-batches (one
  /// masked pad token, no label: no loss, statistic or gradient) so every ep dispatch meets.
  /// With several model chunks per rank (vpp > 1) the micro-batches run through the interleaved
  /// schedule (parallel/pipeline_interleaved.h), padded with the same fillers to a multiple of pp.
  /// Refusals (twinkle::Error) are raised on every rank alike, so a caller that catches one
  /// leaves no rank waiting in a collective: a second call before the optimizer step under
  /// overlap_grad_reduce, or after reduce_gradients (DistributedOptimizer::check_backward_allowed,
  /// before any communication); a micro-batch that CausalLM::prepare (Qwen3Model::prepare) refuses on some ranks
  /// (a token id, label or position id out of range, inconsistent lengths) is agreed in the
  /// token-count reduction over dp-cp plus one int64 sum over the world when it is larger, and
  /// every rank throws the lowest refusing rank's message prefixed "world rank R: forward_backward: "
  /// (no prefix in a one-rank job) (dist/agreed_error.h). A non-empty `input_error` is the caller's
  /// own refusal of this rank's input (e.g. MegatronModel's collation of its rows failed; pass the
  /// micro-batches that remain, or none): it is agreed and raised the same way. Nothing is
  /// computed and no gradient changes when a call is refused.
  StepResult forward_backward(const std::vector<MicroBatch>& micro_batches, const std::string& input_error = {});
  /// Loss only (no gradients); input refusals as forward_backward (prefix "forward_only: ").
  StepResult forward_only(const std::vector<MicroBatch>& micro_batches, const std::string& input_error = {});
  /// Connects the optimizer that will step on this model's gradients (nullptr: none), so its
  /// bucketed dp communication overlaps the passes (DistributedOptimizer's overlap_grad_reduce /
  /// overlap_param_gather; Megatron DDP's hooks): the model's last backward of each
  /// forward_backward reports final gradients to it, every forward waits for the parameter
  /// all-gathers of a layer just before reading it, and any all-gather still in flight is waited
  /// for before the call returns. The optimizer must outlive the engine's calls. With both
  /// switches off the hooks only count (no collective moves).
  void set_optimizer(DistributedOptimizer* opt);

 private:
  StepResult run(const std::vector<MicroBatch>& mbs, bool training, const std::string& input_error);
  CausalLM& model_;
  DistributedOptimizer* opt_ = nullptr;
};

}  // namespace twinkle
