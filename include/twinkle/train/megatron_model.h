// twinkle/train/megatron_model.h — Twinkle's MegatronModel: the user-facing trainer.
//
// The C++ counterpart of twinkle.model.MegatronModel (src/twinkle/model/megatron/megatron.py;
// see ../shared/spec/twinkle-behaviour.md section 5) for dense Qwen3, on the global
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
#include "twinkle/model/qwen3_model.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/optim/lr_scheduler.h"
#include "twinkle/train/engine.h"

namespace twinkle {

struct MegatronModelOptions {
  int64_t micro_batch_size = 0;      ///< rows per micro-batch; 0 = Twinkle's min(2, local rows)
  bool load_weights = true;          ///< load safetensors when the model dir has them
  uint64_t seed = 0;                 ///< init seed when there are no weights; 0 = twinkle::global_seed()
  std::vector<int64_t> layers_per_stage;  ///< custom pipeline split (empty = even)
  bool packing = false;              ///< padding-free micro-batches (one packed sequence each)
  int64_t lm_head_chunk_tokens = 1024;
};

struct SaveOptions {
  std::string output_dir = "output";
  int64_t max_shard_bytes = 5'000'000'000;  ///< safetensors shard size limit
};

class MegatronModel {
 public:
  /// Loads config.json (and weights unless options.load_weights is false or there are none:
  /// then a seeded random init) from a directory or hub id (twinkle/data/hub.h), on the
  /// mesh of twinkle::initialize (a single-process mesh when initialize was not called).
  /// A tied config whose checkpoint holds a different lm_head.weight is untied (transformers 5;
  /// rank 0 warns once naming both tensors; save() then writes both and tie false).
  /// Throws twinkle::Error when the model does not fit the mesh.
  explicit MegatronModel(const std::string& model_id, const MegatronModelOptions& options = {});

  /// AdamW (Megatron "adam" with decoupled weight decay); name must be "default",
  /// "MegatronOptimizer", "Adam" or "AdamW". Distributed optimizer on by default.
  void set_optimizer(const std::string& name, const OptimizerConfig& cfg);
  /// Megatron OptimizerParamScheduler (see lr_scheduler.h); max_lr is taken from the optimizer's lr.
  void set_lr_scheduler(const std::string& name, LRSchedulerConfig cfg);

  /// Forward + backward over this rank's rows (split into micro-batches, pipelined with
  /// 1F1B); returns the global per-token mean loss. Gradients accumulate until the next step.
  double forward_backward(const std::vector<EncodedRow>& rows);
  double forward_backward(const LocalBatch& batch) { return forward_backward(batch.rows); }
  /// Loss only (evaluation).
  double forward_only(const std::vector<EncodedRow>& rows);
  double forward_only(const LocalBatch& batch) { return forward_only(batch.rows); }
  /// Reduces gradients, clips to max_grad_norm (default: set_optimizer's clip_grad), AdamW
  /// step at the scheduler's lr, zeroes gradients, advances the scheduler.
  StepStats clip_grad_and_step(std::optional<double> max_grad_norm = std::nullopt);

  /// Metrics of the last step(s): loss, grad_norm, learning rate, iters, total time elapse,
  /// speed (iters/s), tokens_per_s, mfu. Values as Twinkle formats them (strings).
  std::map<std::string, std::string> calculate_metric(bool is_training = true);
  /// Numeric metrics of the last step (for JSONL logs).
  struct StepMetrics {
    int64_t step = 0;
    double loss = 0, grad_norm = 0, lr = 0, tokens_per_s = 0, mfu = 0, step_time_s = 0;
    int64_t tokens = 0, label_tokens = 0;
  };
  const StepMetrics& last_metrics() const { return last_; }
  /// Layout, optimizer, scheduler and model settings as text (Twinkle's get_train_configs).
  std::string get_train_configs() const;

  /// Saves a Hugging Face checkpoint to output_dir/name (output_dir itself when name is empty) (config.json, safetensors in the
  /// config's torch_dtype, tokenizer files copied from the model dir), gathered from all
  /// shards, written atomically by global rank 0. Collective. Returns the directory.
  std::string save(const std::string& name, const SaveOptions& opts = {});
  /// Loads weights from a HF checkpoint directory into every shard. Throws twinkle::Error when
  /// this model is tied but the checkpoint holds an lm_head.weight different from the
  /// embedding (the constructor unties for such a checkpoint; see twinkle/io/tied_head.h).
  void load(const std::string& dir);

  Qwen3Model& model() { return *model_; }
  DistributedOptimizer& optimizer();
  const std::string& model_dir() const { return model_dir_; }
  int32_t pad_token_id() const { return pad_id_; }
  /// Achievable peak of this job in FLOP/s used for MFU (TWINKLE_PEAK_GFLOPS, else measured).
  double peak_flops() const { return peak_flops_; }
  /// Model FLOPs of one token's forward+backward at sequence length S (6N + attention).
  double flops_per_token(double seq_len) const;

 private:
  std::vector<MicroBatch> split(const std::vector<EncodedRow>& rows) const;
  std::shared_ptr<dist::ParallelState> ps_;
  std::string model_dir_;
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
  std::chrono::steady_clock::time_point t_start_, t_last_metric_, t_fb_start_;
  double fb_time_s_ = 0;
  double mean_seq_ = 0;
  int64_t steps_since_metric_ = 0;
};

}  // namespace twinkle
