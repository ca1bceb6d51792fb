// twinkle/train/megatron_model.h — Twinkle's MegatronModel: the user-facing trainer.
//
// The C++ counterpart of twinkle.model.MegatronModel (src/twinkle/model/megatron/megatron.py;
// strategy/megatron.py) for dense Qwen3, on the global
// DeviceMesh set by twinkle::initialize. Differences from upstream Twinkle, on purpose:
//  * clip_grad_and_step(max_grad_norm) honours its argument (Twinkle ignores it);
//  * gradients are zeroed after every step (Twinkle's DDP buffers are never reset);
//  * the reported loss is the global per-token mean (Twinkle averages per-dp-rank means);
//  * metrics add tokens/s and MFU.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "twinkle/data/batch.h"
#include "twinkle/data/dataloader.h"
#include "twinkle/io/tensorboard.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/optim/lr_scheduler.h"
#include "twinkle/train/engine.h"

namespace twinkle {

struct MegatronModelOptions {
  int64_t micro_batch_size = 0;      ///< rows per micro-batch (>= 0); 0 = Twinkle's min(2, local rows)
  bool load_weights = true;          ///< load safetensors when the model dir has them
  uint64_t seed = 0;                 ///< init seed when there are no weights; 0 = twinkle::global_seed()
  std::vector<int64_t> layers_per_stage;  ///< custom pipeline split (empty = pipeline_split)
  /// Pipeline split without layers_per_stage: "balanced" (default: stages of equal matmul FLOPs
  /// with the lm head on the last one, Megatron's account_for_loss_in_pipeline_split by cost)
  /// or "even" (Megatron-core's default). `--pipeline-split`.
  std::string pipeline_split = "balanced";
  /// Activation recompute, Megatron's recompute_granularity (model/qwen3_activations.h
  /// Recompute): "full" (default, as Twinkle's MegatronModel constructor: every dense layer
  /// recomputed from its input in backward, uniform, one layer per chunk), "selective" (core
  /// attention only) or "none". Results are bit-identical; only memory and time change.
  /// `--recompute-granularity`.
  std::string recompute_granularity = "full";
  bool packing = false;              ///< padding-free micro-batches (one packed sequence each)
  int64_t lm_head_chunk_tokens = 1024;  ///< tokens per lm-head / cross-entropy chunk (>= 1)
  /// What a step whose loss or global grad norm is NaN / inf does:
  /// "error" (default; Megatron's check_for_nan_in_loss_and_grad) throws twinkle::Error
  /// naming the step and the value before anything is applied, so the weights stay those
  /// of the last good step; "skip" applies nothing (like Megatron's skipped iterations
  /// under the fp16 grad scaler: no optimizer or scheduler step), counts it
  /// (StepMetrics::skipped_steps) and logs a warning. Every rank takes the same decision.
  std::string on_nonfinite = "error";
  /// Qwen3-MoE router losses (Qwen3ModelOptions): "global" (transformers, pp = 1) or
  /// "per_layer" (Megatron); the coefficient, when unset, is config.json's router_aux_loss_coef
  /// if output_router_logits is true, else 0 (Twinkle's Megatron default). The value is always
  /// computed and logged (StepMetrics::aux_loss).
  std::string moe_aux_loss_type = "global";
  std::optional<double> moe_aux_loss_coeff;
  double moe_z_loss_coeff = 0.0;
  /// Context-parallel attention when the mesh has cp > 1: "p2p" (ring) | "a2a" (Ulysses).
  std::string cp_comm_type = "p2p";
  /// Kernel set: "fused" (default, as MindSpeed's fused kernels on Twinkle's NPU path) or "reference"
  /// (plain double-accumulating loops, for debugging); see twinkle/kernels/registry.h. Single ops can be
  /// swapped afterwards with kernelize_model(model.model(), mapping) (twinkle/model/kernelize.h).
  std::string kernels = "fused";
  /// "fp32" (default, as twinkle has always trained) or "bf16" (`--bf16` / `--fp32`): Megatron's bf16
  /// mixed precision as Twinkle's Megatron path runs it (mixed_precision='bf16', strategy/megatron.py):
  /// bf16 GEMM inputs with fp32 accumulation, fp32 master weights, gradients (grad_reduce_in_fp32) and
  /// Adam state, fp32 norms / softmax / cross entropy (Qwen3ModelOptions::mixed_precision); cpu and cuda.
  std::string mixed_precision = "fp32";
  /// Overlap of the data-parallel communication (Megatron-core DistributedDataParallelConfig;
  /// DistributedOptimizer, optim/distributed_optimizer.h): start each gradient bucket's
  /// reduce-scatter / all-reduce during the last micro-batch's backward as soon as its gradients
  /// are final (`--overlap-grad-reduce`), and leave the parameter all-gathers after the
  /// optimizer step in flight until the next forward reads each bucket
  /// (`--overlap-param-gather`, distributed optimizer only). Off by default, as in Megatron and
  /// Twinkle; results are bit-identical either way. set_optimizer copies them into the
  /// OptimizerConfig. overlap_grad_reduce needs one forward_backward per clip_grad_and_step.
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  /// Gradient bucket size in elements (Megatron's bucket_size, `--bucket-size`); 0 = keep the
  /// OptimizerConfig's bucket_bytes (4 MiB = 1,048,576 elements). Otherwise >= 1.
  int64_t bucket_size = 0;
  /// TensorBoard event files of every step (Megatron's --tensorboard-dir; `twinkle train
  /// --tensorboard-dir` writes the same): non-empty = global rank 0 writes each clip_grad_and_step's
  /// last_metrics() into a new event file in this directory (created if needed) under the tags of
  /// write_step_scalars (twinkle/train/tensorboard_log.h) at step cur_step(), flushed every step. The
  /// file is opened at the first clip_grad_and_step, so a run resumed by resume_from_checkpoint at step
  /// N starts it with SessionLog START at N + 1 and TensorBoard drops the steps > N an earlier run had
  /// logged there (one curve; twinkle/io/tensorboard.h). "" (default) = none.
  std::string tensorboard_dir;
};

/// The one place the model/training options are checked (the MegatronModel constructor,
/// `twinkle train` and the recipes). Throws twinkle::Error naming the field:
/// micro_batch_size < 0, lm_head_chunk_tokens < 1, a layers_per_stage entry < 1,
/// on_nonfinite not "error" or "skip", pipeline_split not "balanced" or "even",
/// recompute_granularity not "full", "selective" or "none", kernels not "fused" or "reference", cp_comm_type not
/// "p2p" or "a2a", bucket_size < 0, mixed_precision not "fp32" or "bf16".
void validate(const MegatronModelOptions& opts);

/// Optimizer steps of a training loop: `max_steps` when > 0, one epoch
/// (`batches_per_epoch`) when 0 (the meaning of "--max-steps 0" or an absent flag in
/// `twinkle train` and every recipe). Throws twinkle::Error naming --max-steps when it is
/// negative.
int64_t resolve_max_steps(int64_t max_steps, int64_t batches_per_epoch);

struct SaveOptions {
  std::string output_dir = "output";
  int64_t max_shard_bytes = 5'000'000'000;  ///< safetensors shard size limit
  /// With an adapter: write the merged full HF checkpoint (W + scaling B A) instead of the
  /// PEFT adapter directory (Twinkle's save(merge_lora=True)). Ignored without an adapter.
  bool merge_lora = false;
  /// Twinkle's interval: save() does nothing (returns "") unless cur_step % interval == 0. >= 1.
  int64_t interval = 1;
  /// Also write the training state resume_from_checkpoint needs (Twinkle's
  /// save_optimizer=True): see MegatronModel::save.
  bool save_optimizer = false;
  /// With save_optimizer: afterwards keep only the newest `keep_last` checkpoint-step-N
  /// directories of output_dir that hold a trainer_state.json (0 = keep all; `--keep-last`;
  /// ignored without save_optimizer).
  int64_t keep_last = 0;
  /// Twinkle's consumed_train_samples kwarg for trainer_state.json; -1 = the dataloader's
  /// consumed samples (0 without one).
  int64_t consumed_train_samples = -1;
  /// With save_optimizer: the DataLoader whose position (epoch, next batch, consumed samples)
  /// and shuffle seed are saved, so a resumed run sees the batches the uninterrupted one would.
  const DataLoader* dataloader = nullptr;
  /// dtype of the saved HF weights and of config.json's torch_dtype: "" (default) = the dtype the
  /// model was loaded in (config.json's torch_dtype), else "float32", "bfloat16" or "float16"
  /// (`--save-dtype`; transformers' save_pretrained writes the model's dtype the same way). Values are
  /// rounded to nearest even from the fp32 master weights; a training run in bf16 or fp32 saves alike.
  /// The training state of save_optimizer stays fp32. Ignored for a PEFT adapter (fp32). Another value
  /// throws twinkle::Error naming the option.
  std::string dtype;
  /// With save_optimizer: how the training state is written (`--save-format`).
  ///  "sharded" (default): every rank writes only the slices it owns — its tp / pp / ep / etp
  ///    parameter shards and its ZeRO-1 shard of the fp32 master weights and AdamW moments, each
  ///    element by exactly one rank (a tensor replicated over tp by tp rank 0, a state replicated
  ///    over dp by the group's rank 0) — into iter_<step>/shard-RRRRR-of-WWWWW.safetensors, and
  ///    global rank 0 writes the index iter_<step>/sharded_index.json last
  ///    (io/sharded_checkpoint.h; PyTorch DCP's layout). Nothing is gathered: a rank holds its own
  ///    shards plus one 16 MiB write buffer. No Hugging Face weights are written beside it (the
  ///    directory holds config.json, the tokenizer files and, with an adapter, adapter_config.json):
  ///    `twinkle export --from-checkpoint DIR -o OUT` writes them from the shards.
  ///  "gathered": the earlier form — the HF (or PEFT) weights and full HF-named state tensors
  ///    gathered to rank 0 and written by it (master_weights / exp_avg / exp_avg_sq.safetensors).
  /// Both resume on any layout. Another value throws twinkle::Error naming the option.
  std::string save_format = "sharded";
  /// With save_optimizer and save_format "sharded" (`--async-save`): save() copies this rank's slices
  /// into a host staging buffer (one copy of its own shards: master weight and both moments of its
  /// ZeRO-1 ranges), starts a background thread that writes and fsyncs its shard file from it, and
  /// returns; training goes on. The checkpoint is committed (rank 0 writes the index and the state
  /// files, renames the staging directory into place, then `latest`) once every rank's thread is
  /// done: checked after each clip_grad_and_step (one 8-byte all-reduce while a save is pending), and
  /// waited for by the next save of any kind and by wait_for_save(). Until then, and if a rank dies
  /// meanwhile, only the previous checkpoint exists (the new one is a hidden staging directory,
  /// removed by the next save). Megatron's async_save (its async_utils.py finalize) works this way.
  /// The staging buffer is kept for the next asynchronous save (grow-only; `twinkle plan --async-save`
  /// counts it). TWINKLE_ASYNC_WRITER_PRIORITY=nice|idle runs the writer thread at nice 19 or SCHED_IDLE
  /// (bench/ckpt_save_bench.py --writer-priority; default: the training thread's priority).
  bool async_save = false;
};

/// What resume_from_checkpoint restored (Twinkle returns {cur_step, consumed_train_samples,
/// gradient_accumulation_steps}).
struct ResumeState {
  std::string dir;                        ///< the checkpoint directory actually read
  int64_t cur_step = 0;                   ///< steps taken when it was saved
  int64_t consumed_train_samples = 0;
  int64_t gradient_accumulation_steps = 1;
  bool has_dataloader = false;            ///< the checkpoint recorded a DataLoader position
  DataLoaderState dataloader;
};

class MegatronModel {
 public:
  /// Loads config.json (and weights unless options.load_weights is false or there are none:
  /// then a seeded random init) from a directory or hub id (twinkle/data/hub.h), on the
  /// mesh of twinkle::initialize (a single-process mesh when initialize was not called).
  /// A tied config whose checkpoint holds a different lm_head.weight is untied (transformers 5;
  /// rank 0 warns once naming both tensors; save() then writes both and tie false).
  /// Throws twinkle::Error when the model does not fit the mesh, and (load_weights on) when the
  /// directory has no model.safetensors / index but other weights the random init would hide: a
  /// PEFT adapter directory (adapter_config.json; the message names its base model and --adapter)
  /// or unread weight files (*.bin, *.pt, *.pth, *.gguf, other *.safetensors names), or what an
  /// interrupted save leaves (model*.safetensors[.index.json].tmp.<pid> temporaries, or
  /// model-NNNNN-of-NNNNN.safetensors shards without their index): "holds no complete weights".
  /// Collective over the world: an error on some ranks only (a checkpoint missing the tensors of
  /// one pipeline stage, a file one node cannot read) is raised on every rank, prefixed
  /// "world rank R: " (dist::run_agreed), so a caller that catches it leaves no rank waiting.
  explicit MegatronModel(const std::string& model_id, const MegatronModelOptions& options = {});

  /// Adds LoRA adapter `name` (Twinkle's add_adapter_to_model; one adapter per model,
  /// conventionally "default") per `cfg` (model/lora_config.h; PEFT semantics; sharded as
  /// parallel/lora.h). Afterwards only the adapter is trainable: the base weights keep no
  /// gradient buffer and no optimizer state; the adapter takes the optimizer and scheduler
  /// settings (an optimizer set before is rebuilt over the adapter) and is decayed (2-D).
  /// Init seeded by options().seed (else twinkle::global_seed()), identical on every layout.
  /// Throws twinkle::Error on a bad config (validate(LoraConfig)), an unknown target, or a
  /// second adapter.
  void add_adapter_to_model(const std::string& name, const LoraConfig& cfg);
  /// Adds the adapter stored in a PEFT adapter directory (adapter_config.json +
  /// adapter_model.safetensors, as save() writes it) and loads its weights. Throws
  /// twinkle::Error naming the file or field that is missing or unsupported, on every rank alike
  /// (dist::run_agreed). A file that cannot be read is refused before the adapter is added; a
  /// tensor missing for some layers leaves the adapter added with its seeded init.
  void load_adapter(const std::string& dir, const std::string& name = "default");
  bool has_adapter() const { return model_->has_adapter(); }
  const std::string& adapter_name() const { return adapter_name_; }

  /// AdamW (Megatron "adam" with decoupled weight decay); name must be "default",
  /// "MegatronOptimizer", "Adam" or "AdamW". Distributed optimizer on by default. The model
  /// options' overlap_grad_reduce, overlap_param_gather and bucket_size (when > 0) replace the
  /// config's fields of the same meaning.
  void set_optimizer(const std::string& name, const OptimizerConfig& cfg);
  /// Megatron OptimizerParamScheduler (see lr_scheduler.h); max_lr is taken from the optimizer's lr.
  void set_lr_scheduler(const std::string& name, LRSchedulerConfig cfg);

  /// Forward + backward over this rank's rows (split into micro-batches, pipelined with
  /// 1F1B); returns the global per-token mean loss. Gradients accumulate until the next step.
  /// Collective over the world. A rank may get no row (a short last batch split over
  /// dp): it runs no micro-batch, contributes 0 tokens and still takes part in every
  /// reduction. When the whole global batch has no labelled token the loss is
  /// undefined: the call returns 0, last_metrics().has_loss is false, the gradients are
  /// zero, and a warning says so. Refusals are raised on every rank alike, so catching one
  /// leaves no rank waiting (Engine::forward_backward): rows one rank cannot collate or a token /
  /// label / position out of range ("world rank R: forward_backward: ..." on every rank), a second
  /// call before clip_grad_and_step with overlap_grad_reduce on (the error names the option);
  /// nothing is computed then and the step counter does not advance.
  double forward_backward(const std::vector<EncodedRow>& rows);
  /// The same, for a caller whose own conversion of this rank's rows already failed (the Python
  /// binding's list-of-dicts conversion): a non-empty `input_error` is refused on every rank alike
  /// like a row this rank cannot collate ("world rank R: forward_backward: <input_error>"); `rows`
  /// is then not read.
  double forward_backward(const std::vector<EncodedRow>& rows, const std::string& input_error);
  double forward_backward(const LocalBatch& batch) { return forward_backward(batch.rows); }
  /// Loss only (evaluation); 0 with a warning when the batch has no labelled token
  /// (last_eval_label_tokens() tells). Refusals as forward_backward's.
  double forward_only(const std::vector<EncodedRow>& rows);
  /// forward_only with a conversion error of this rank's rows (see forward_backward's overload).
  double forward_only(const std::vector<EncodedRow>& rows, const std::string& input_error);
  double forward_only(const LocalBatch& batch) { return forward_only(batch.rows); }
  /// Reduces gradients, clips to max_grad_norm (default: set_optimizer's clip_grad; <= 0: no clipping), AdamW
  /// step at the scheduler's lr, zeroes gradients, advances the scheduler. Before anything is
  /// applied, a non-finite loss or global grad norm (on any rank) throws twinkle::Error
  /// "step N: non-finite ..." (on_nonfinite "error") or skips the update (on_nonfinite
  /// "skip": result skipped = true, no scheduler step, counted in last_metrics()). Collective.
  /// With options().tensorboard_dir, rank 0 then writes the step's scalars (a skipped step's too;
  /// an error thrown above writes none); a failed write throws twinkle::Error on rank 0 after the
  /// update was applied.
  StepStats clip_grad_and_step(std::optional<double> max_grad_norm = std::nullopt);

  /// Metrics of the last step(s): loss, grad_norm, learning rate, iters, total time elapse,
  /// speed (iters/s), tokens_per_s, mfu. Values as Twinkle formats them (strings).
  std::map<std::string, std::string> calculate_metric(bool is_training = true);
  /// Numeric metrics of the last step (for JSONL logs). Every rank holds the same values
  /// except step_time_s / tokens_per_s / mfu (this rank's clock) and peak_memory_bytes (this
  /// rank's memory): mfu = flops_per_token(S) *
  /// tokens / step_time_s / peak_flops(), S the global batch's mean sequence length (real
  /// tokens / sequences over all dp ranks, the same on a rank without a row this step).
  struct StepMetrics {
    int64_t step = 0;
    double loss = 0, grad_norm = 0, lr = 0, tokens_per_s = 0, mfu = 0, step_time_s = 0;
    int64_t tokens = 0, label_tokens = 0;
    bool has_loss = true;       ///< false: the global batch had no labelled token (loss undefined)
    bool skipped = false;       ///< the update was skipped (non-finite loss / grad norm, on_nonfinite "skip")
    int64_t skipped_steps = 0;  ///< skipped updates so far
    bool moe = false;           ///< a Qwen3-MoE model: the fields below are set (engine.h StepResult)
    double lm_loss = 0, aux_loss = 0, z_loss = 0, expert_load_max = 0, expert_load_min = 0;
    double expert_grad_norm = 0;  ///< the expert part of grad_norm (DistributedOptimizer)
    /// This rank's peak memory so far, in bytes (Megatron's "mem-max-allocated-bytes", which is
    /// torch.cuda.memory_stats()["allocated_bytes.all.peak"]): on a device with an allocator that
    /// tracks it (cuda: the caching allocator's peak of bytes handed out,
    /// DeviceAllocator::peak_bytes_in_use) that peak; on the CPU the process's peak resident set
    /// (VmHWM, twinkle/core/peak_rss.h: since the process start or the last reset_peak_rss()); 0 where
    /// neither is available.
    int64_t peak_memory_bytes = 0;
  };
  const StepMetrics& last_metrics() const { return last_; }
  /// Layout, adapter (Twinkle's "Adapter config:" line, when one was added), model, kernels, mixed
  /// precision, optimizer and scheduler settings as text (Twinkle's get_train_configs).
  std::string get_train_configs() const;

  /// Saves a Hugging Face checkpoint to output_dir/name (output_dir itself when name is empty;
  /// Twinkle's "checkpoint-step-<cur_step>" when name is nullopt) (config.json, safetensors in the
  /// config's torch_dtype, tokenizer files copied from the model dir), gathered from all
  /// shards, written atomically by global rank 0. Collective. Returns the directory, or ""
  /// when opts.interval skips this step (cur_step % interval != 0, Twinkle's rule).
  /// With an adapter (Twinkle 5.9): PEFT's layout instead — adapter_config.json (peft_type
  /// LORA, r, lora_alpha, target_modules, base_model_name_or_path, use_rslora, ...),
  /// adapter_model.safetensors (f32, keys "base_model.model.<module>.lora_{A,B}.weight"),
  /// config.json and the tokenizer files; opts.merge_lora writes the merged full checkpoint.
  ///
  /// opts.save_optimizer (Twinkle's save_optimizer=True; needs a non-empty name) adds what an
  /// exact resume needs, layout-independent (any tp/pp/dp/cp layout can load it):
  ///   trainer_state.json  {checkpoint_version 1, cur_step, consumed_train_samples,
  ///                        gradient_accumulation_steps 1} (as Twinkle writes it)
  ///   latest_checkpointed_iteration.txt   the step (Megatron's tracker file)
  ///   iter_<step:07d>/master_weights.safetensors  fp32 trainable parameters (full HF tensors;
  ///                        the adapter's with LoRA), exp_avg.safetensors / exp_avg_sq.safetensors
  ///                        AdamW's moments as full tensors under the same names (the ZeRO-1
  ///                        shards gathered), state.json (AdamW step count, scheduler steps and
  ///                        config, optimizer config, seeds, DataLoader position, model config,
  ///                        adapter config, the saving layout) written last.
  /// That is opts.save_format "gathered"; the default "sharded" writes the same state as each rank's
  /// own slices plus an index instead, and no HF weights (see SaveOptions::save_format).
  /// The directory is staged under a hidden name, fsync'ed and renamed into place; then
  /// output_dir/latest names it and older checkpoint-step-N directories beyond opts.keep_last
  /// are removed (train/checkpoint_dir.h). A failure (disk full, an I/O error) throws
  /// twinkle::Error naming the file on every rank and leaves earlier checkpoints untouched.
  std::string save(const std::optional<std::string>& name = std::nullopt, const SaveOptions& opts = {});
  /// Twinkle's resume_from_checkpoint(dir, resume_only_model): `dir` is a checkpoint written by
  /// save(..., save_optimizer) or an output dir whose `latest` names one. Restores the fp32
  /// trainable weights (whatever layout saved them); unless resume_only_model also the AdamW
  /// moments and step count, the scheduler position, cur_step and the skipped-step count; and,
  /// when `loader` is given, its position (after checking its batch size, row count and shuffle
  /// seed against the saved ones). Call after set_optimizer / set_lr_scheduler (and the adapter)
  /// are set up as in the saved run. Collective. Throws twinkle::Error (on every rank) naming the
  /// file and tensor or field that is missing, truncated, of the wrong shape or dtype, or that
  /// does not match this model (config fields, adapter config, scheduler config: Megatron's
  /// OptimizerParamScheduler refuses a changed schedule).
  ResumeState resume_from_checkpoint(const std::string& dir, bool resume_only_model = false,
                                     DataLoader* loader = nullptr);
  /// Finishes a pending asynchronous save (SaveOptions::async_save): waits for every rank's writer
  /// thread, agrees on the outcome and commits the checkpoint (rank 0). Does nothing without one.
  /// Collective. Throws twinkle::Error on every rank (naming the file) when a rank's write failed;
  /// the staging directory is then removed and earlier checkpoints are untouched. Call it before a
  /// program ends (twinkle train does; the destructor only joins the thread, committing nothing).
  void wait_for_save();
  /// Whether an asynchronous save has not been committed yet.
  bool save_pending() const { return pending_save_ != nullptr; }
  /// Steps taken (forward_backward calls): Twinkle's cur_step.
  int64_t cur_step() const { return cur_step_; }
  /// The event file options().tensorboard_dir is written to: "" before the first clip_grad_and_step,
  /// on ranks other than 0, and without tensorboard_dir.
  std::string tensorboard_path() const { return tb_ ? tb_->path() : std::string(); }
  /// Loads weights from a HF checkpoint directory into every shard. Throws twinkle::Error when
  /// this model is tied but the checkpoint holds an lm_head.weight different from the
  /// embedding (the constructor unties for such a checkpoint; see twinkle/io/tied_head.h).
  /// Checkpoint tensors the model does not use (Qwen3Model::unused_checkpoint_tensors) are
  /// named in a warning on rank 0, here and in the constructor (transformers' from_pretrained
  /// warning "Some weights of the model checkpoint ... were not used"). Collective over the
  /// world; a refusal on some ranks is raised on all (dist::run_agreed) and, for a missing or
  /// misshapen tensor, changes no parameter (Qwen3Model::load_checkpoint).
  void load(const std::string& dir);

  Qwen3Model& model() { return *model_; }
  DistributedOptimizer& optimizer();
  const std::string& model_dir() const { return model_dir_; }
  int32_t pad_token_id() const { return pad_id_; }
  /// Global labelled tokens of the last forward_only call.
  int64_t last_eval_label_tokens() const { return last_eval_label_tokens_; }
  /// Global sum of the token losses -log p(label) of the last forward_only call (the lm loss only: a
  /// Qwen3-MoE model's router losses are not in it), so last_eval_lm_loss_sum() / last_eval_label_tokens()
  /// is its lm loss; 0 without a labelled token. What twinkle/train/evaluate.h sums over batches.
  double last_eval_lm_loss_sum() const { return last_eval_lm_loss_sum_; }
  const MegatronModelOptions& options() const { return opts_; }
  /// Achievable peak of this job in FLOP/s used for MFU (TWINKLE_PEAK_GFLOPS, else measured).
  double peak_flops() const { return peak_flops_; }
  /// Model FLOPs of one token's forward+backward at sequence length S (6N + attention).
  double flops_per_token(double seq_len) const;

 private:
  // Waits for parameter all-gathers still in flight (overlap_param_gather) before anything but
  // forward_backward reads or writes the parameters.
  void finish_param_sync() {
    if (optim_) optim_->finish_param_sync();
  }
  // The constructor's file-reading part (config, model, weights, tokenizer; no collective), run
  // under dist::run_agreed so a failure on some ranks is raised on all.
  void build(const std::string& model_id);
  // Rank 0 warns naming the checkpoint tensors the model does not use (see load()).
  void warn_unused_tensors(const CheckpointReader& ck) const;
  // Micro-batches of `rows`; segment_row offset by row0 (the block's first global row).
  std::vector<MicroBatch> split(const std::vector<EncodedRow>& rows, int64_t row0 = 0) const;
  // megatron_resume.cpp: the optimizer part of save (collective gather, rank-0 write) and resume.
  struct TrainingStateTensors {
    std::vector<std::pair<std::string, Tensor>> master, exp_avg, exp_avg_sq;
  };
  TrainingStateTensors gather_training_state(std::vector<std::pair<std::string, Tensor>> master);
  void write_training_state(const std::string& dir, const TrainingStateTensors& t, const SaveOptions& opts) const;
  // The metadata files of a training state (state.json, latest_checkpointed_iteration.txt,
  // trainer_state.json) for either format; `files` is state.json's "files" object.
  void write_state_json(const std::string& dir, const SaveOptions& opts, const std::string& format,
                        const std::string& files_json) const;
  // The texts write_state_json writes: {state.json, latest_checkpointed_iteration.txt, trainer_state.json}.
  std::vector<std::string> state_json_texts(const SaveOptions& opts, const std::string& format,
                                            const std::string& files_json) const;
  // An asynchronous sharded save between save() and its commit (megatron_resume.cpp).
  struct PendingSave;
  struct PendingSaveDelete {
    void operator()(PendingSave* p) const;  // joins its writer thread (megatron_resume.cpp)
  };
  // The asynchronous save's staging buffer (floats), grow-only and kept between saves: a later save copies
  // into pages faulted in already (fresh pages dominate the copy's time otherwise; bench/README.md). Only
  // one save is in flight at a time (save() waits for the previous one first). Declared before pending_save_, so
  // destroyed after it: the pending save's writer thread is joined while the buffer still exists.
  std::unique_ptr<float[]> async_staging_;
  size_t async_staging_floats_ = 0;
  std::unique_ptr<PendingSave, PendingSaveDelete> pending_save_;
  // Commits the pending save when every rank's writer is done (blocking: waits for them).
  void finish_pending_save(bool blocking);
  // The sharded format (megatron_resume.cpp): collective over the world; `final_dir` appears
  // complete (renamed from its staging directory) or not at all.
  void save_sharded(const std::string& name, const std::string& final_dir, const SaveOptions& opts,
                    const ModelConfig& cfg);
  // Rank 0's files of every HF-style save (config.json with cfg's dtype, the tokenizer files
  // copied from the model directory) and, with an adapter, PEFT's adapter_config.json.
  void write_model_files(const std::string& dir, const ModelConfig& cfg) const;
  void write_peft_adapter_config(const std::string& dir) const;
  std::shared_ptr<dist::ParallelState> ps_;
  std::string model_dir_;
  std::string adapter_name_;
  MegatronModelOptions opts_;
  std::unique_ptr<Qwen3Model> model_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<DistributedOptimizer> optim_;
  OptimizerConfig optim_cfg_;
  LRScheduler sched_;
  bool has_sched_ = false;
  int32_t pad_id_ = 0;
  double peak_flops_ = 0;
  // metrics accumulation
  StepResult last_fb_;
  StepMetrics last_;
  int64_t cur_step_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t last_eval_label_tokens_ = 0;
  double last_eval_lm_loss_sum_ = 0;
  std::unique_ptr<TensorBoardWriter> tb_;  // options().tensorboard_dir's writer (rank 0, opened at the first step)
  int64_t resumed_step_ = -1;  // cur_step restored by resume_from_checkpoint (-1: none)
  std::chrono::steady_clock::time_point t_start_, t_last_metric_, t_fb_start_;
  double fb_time_s_ = 0;
  int64_t steps_since_metric_ = 0;
};

}  // namespace twinkle
