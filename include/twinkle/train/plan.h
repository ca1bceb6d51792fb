// twinkle/train/plan.h — what a layout costs each rank before launching it (`twinkle plan`).
//
// Per pipeline stage (every tp / cp / dp / ep rank of a stage holds the same amount), in bytes:
//  * parameters — this rank's fp32 shards in the flat ParamStore, exactly as Qwen3Model lays them
//    out (Megatron's sharding: q/k/v/gate/up by output rows, o/down by input columns, embedding
//    and lm head by vocab padded to 128·tp, experts over ep and, inside an expert, gate/up rows
//    and down columns over etp; each tensor 16-element aligned, the dense buffer padded to
//    64·dp·cp, the expert region to 64·edp);
//  * gradients — the same size (the fp32 flat gradient buffer; Megatron's grad_reduce_in_fp32);
//  * optimizer state — AdamW's exp_avg and exp_avg_sq (fp32) for this rank's ZeRO-1 shard
//    (1/(dp·cp) of the dense buffer and 1/edp of the expert region with the distributed
//    optimizer; edp = world / (etp·ep·pp), the expert-data-parallel group), plus one bucket
//    shard of scratch;
//  * activations — the saved activations of the micro-batches in flight on the stage (1F1B:
//    min(pp - stage, micro-batches) slots, model/qwen3_activations.h layout incl. its 25 %
//    headroom, MoE blocks' routed buffers and, with ep or etp > 1, what the alltoall
//    dispatcher of every (MoE layer, slot) saves for its backward — routing maps, expert input
//    rows, expert outputs in slot order — for balanced routing), the recompute buffers and the
//    pipeline receive buffers;
//  * workspace — the largest scratch buffers of one layer's backward and of the fused lm head +
//    cross entropy ([chunk, vocab/tp] logits), and the dispatchers' transient send / receive
//    (and etp) rows shared by all MoE layers and slots, with core/workspace.h's 25 % headroom;
//  * runtime — the process itself (code, MPI, OpenMP, oneDNN), a measured constant;
//  * async save staging (PlanOptions::async_save, `--async-save`) — the host copy an asynchronous
//    sharded save makes of this rank's own slices (src/train/megatron_resume.cpp save_sharded: the
//    fp32 master weight, exp_avg and exp_avg_sq of its ZeRO-1 ranges, dense and expert, or of the
//    adapter's), held from the first asynchronous save on (the buffer is kept for the next one) and so
//    during every step after it: 12 bytes per AdamW state element (state_numel). That bounds the copy from above: the copy skips
//    the ranges' alignment padding, and a tensor replicated over tp (an expert's over etp) is copied
//    by tp (etp) rank 0 only. A device store's copy is host memory too.
// mixed_precision "bf16" (`--bf16`) keeps every item above in fp32 as the CPU bf16 kernel set does
// (fp32 master weights, grads and Adam state, fp32 saved activations) and changes only the
// workspace: the bf16 GEMMs' grow-only bf16 operand scratch and the bf16 lm head's half-size logits
// chunk (plan.cpp bf16_workspace(), the one place that models what the bf16 kernels keep).
// The peak is their sum (all of them are live during the last backward). FLOPs per step count
// forward + backward matmuls and attention (model/qwen3_flops.h; x3 the forward) plus the
// recomputed forward. Expert FLOPs are spread evenly over the stage's ranks for balanced
// routing: an ep rank runs 1/ep of the ep group's routed rows, and etp multiplies its rows by
// etp (the all-gather over the etp group) while dividing each expert's width by etp, so the
// per-rank FLOPs do not depend on ep or etp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/io/model_config.h"

namespace twinkle {

struct PlanOptions {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  int etp = 1;  ///< expert tensor parallel (Megatron's expert_tensor_parallel_size; Twinkle's default 1)
  /// Virtual pipeline stages per pipeline rank (MeshSizes::vpp): each rank's layers are its chunks',
  /// the activations those of the (chunk, micro-batch) pairs the interleaved schedule holds at once
  /// (parallel::interleaved_peak_slots), the micro-batches padded to a multiple of pp as the engine does.
  int vpp = 1;
  bool sequence_parallel = false;
  std::string recompute_granularity = "full";  ///< as MegatronModelOptions
  std::string pipeline_split = "balanced";
  std::vector<int64_t> layers_per_stage;
  int64_t micro_batch_size = 1;   ///< rows per micro-batch
  /// tokens per row; under cp > 1 each row is planned padded as training pads it (padded_seq_length),
  /// as one attention segment (a packed row of several segments is padded per segment in training: a
  /// little more than planned)
  int64_t seq_length = 2048;
  int64_t global_batch_size = 0;  ///< rows per step; 0 = micro_batch_size * dp (one micro-batch per replica)
  bool use_distributed_optimizer = true;
  /// "fp32" | "bf16" (MegatronModelOptions::mixed_precision, `--bf16`): the bf16 kernel set's
  /// workspace replaces the fp32 lm head's (see the file comment); other values throw twinkle::Error.
  std::string mixed_precision = "fp32";
  int64_t lm_head_chunk_tokens = 1024;
  /// LoRA rank on every linear layer but the lm head (Twinkle's recipes: r 8, all-linear); 0 =
  /// full training. With an adapter the base weights are frozen: no gradient buffer, and the
  /// gradients and optimizer state are the adapter's (parallel/lora.h sharding).
  int64_t lora_rank = 0;
  int64_t bucket_bytes = 4 << 20;
  /// Plan an asynchronous sharded save (SaveOptions::async_save, `twinkle train --async-save`): the
  /// staging copy of the rank's own slices is added to the peak (StagePlan::save_staging).
  bool async_save = false;
  /// Bytes of the process itself; the default was measured on the development machine
  /// (bench/README.md "twinkle plan").
  int64_t runtime_bytes = 48ll << 20;
};

struct StagePlan {
  int stage = 0;
  int64_t layers = 0;
  int64_t param_numel = 0;  ///< elements of this rank's flat parameter buffer, dense region
  int64_t expert_numel = 0; ///< elements of its expert region (padded to 64·edp; 0 for a dense stage)
  int64_t adapter_numel = 0;  ///< elements of this rank's LoRA adapter buffer (0 without one)
  int64_t state_numel = 0;  ///< AdamW state elements this rank holds (exp_avg and exp_avg_sq each)
  int64_t slots = 0;        ///< micro-batches whose activations are held at once (under vpp: (chunk, micro-batch) pairs)
  double params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, runtime = 0;  ///< bytes
  /// Bytes of the asynchronous save's staging copy: 3 x 4 x state_numel with PlanOptions::async_save,
  /// else 0 (see the file comment).
  double save_staging = 0;
  double peak = 0;                                                                            ///< bytes
  double model_flops = 0;     ///< per rank per step (forward + backward)
  double executed_flops = 0;  ///< model_flops + the recomputed forward
  /// The largest of the items above, by name ("parameters", "gradients", ..., "async save staging").
  std::string biggest() const;
};

struct Plan {
  std::vector<StagePlan> stages;  ///< one per pipeline stage
  int64_t micro_batches = 0;      ///< per data-parallel replica
  /// seq_length as training holds a row: under cp > 1 right-padded to a multiple of 2·cp, or of
  /// 2·cp·tp with sequence parallelism (parallel/cp_split.h, Megatron-core's THD split);
  /// seq_length itself when cp = 1. Memory is planned on it; model FLOPs count seq_length.
  int64_t padded_seq_length = 0;
  double job_model_flops = 0;     ///< the whole job, per step
  /// The stage with the largest peak.
  const StagePlan& worst() const;
};

/// Plans `cfg` on the layout. Throws twinkle::Error for a layout the model refuses (heads, kv
/// heads, intermediate not divisible; pp > layers; a bad split or recompute name; global batch
/// not divisible by micro_batch_size * dp; a mixed_precision other than fp32 / bf16), and for the expert grid with
/// the messages training gives (the same functions): etp·ep·pp not dividing the world
/// (DeviceMesh::from_sizes), ep or etp > 1 on a dense model or num_experts % ep
/// (parallel::check_expert_layout), moe_intermediate_size % etp
/// (parallel::check_expert_tensor_split), LoRA with etp > 1
/// (parallel::check_lora_expert_tensor_parallel).
Plan plan_layout(const ModelConfig& cfg, const PlanOptions& o);

}  // namespace twinkle
