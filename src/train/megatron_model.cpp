#include "twinkle/train/megatron_model.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>

#include "twinkle/data/hub.h"
#include "twinkle/data/tokenizer.h"
#include "twinkle/dist/agreed_error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/model/kernelize.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/io/sharded_checkpoint.h"
#include "twinkle/io/tied_head.h"
#include "twinkle/model/lora_files.h"
#include "twinkle/core/device_allocator.h"
#include "twinkle/core/option_check.h"
#include "twinkle/core/peak_rss.h"
#include "twinkle/train/checkpoint_dir.h"
#include "twinkle/train/mfu.h"
#include "twinkle/train/tensorboard_log.h"

namespace twinkle {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<dist::ParallelState> global_state() {
  if (!is_initialized()) initialize(InitOptions{});
  // non-owning: the runtime owns the global state until finalize()
  return std::shared_ptr<dist::ParallelState>(&parallel_state(), [](dist::ParallelState*) {});
}

// A model directory without model.safetensors / model.safetensors.index.json gets the seeded
// random init (the embedded tiny models are config + tokenizer only). Throws twinkle::Error
// instead when the directory holds weights of another kind, which the random init would silently
// replace: a PEFT adapter directory (adapter_config.json; transformers with peft loads
// base_model_name_or_path plus the adapter from it, twinkle takes them as --model / --adapter), or
// weight files twinkle does not read (PyTorch pickles, other safetensors names), or the remains of a
// save interrupted while writing the weights (their temporaries, or shards without the index).
void refuse_unread_weights(const std::string& dir) {
  std::error_code ec;
  if (fs::is_regular_file(fs::path(dir) / "adapter_config.json", ec)) {
    const std::string base = peft_base_model((fs::path(dir) / "adapter_config.json").string());
    throw Error("model " + dir + " is a PEFT adapter directory (adapter_config.json, no model.safetensors), not a "
                "model: load its base model with the adapter, `--model " + (base.empty() ? std::string("BASE") : base) +
                " --adapter " + dir + "` (Python: MegatronModel(base), then add_adapter_to_model('default', '" + dir +
                "')); `twinkle export --model BASE --adapter DIR --merge -o OUT` writes a merged model");
  }
  // A training checkpoint of the sharded format holds its weights only as the ranks' slices.
  if (fs::is_regular_file(fs::path(dir) / "trainer_state.json", ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind("iter_", 0) == 0 && fs::exists(e.path() / kShardedIndexName, ec))
        throw Error("model " + dir + " is a sharded training checkpoint (" + (e.path() / kShardedIndexName).string() +
                    ", no Hugging Face weights): continue it with --resume " + dir +
                    ", or write its weights with `twinkle export --from-checkpoint " + dir + " -o OUT`");
  std::vector<std::string> found, interrupted;
  // What an interrupted save leaves (io's write_file_atomic writes `<file>.tmp.<pid>` and renames
  // it into place when complete; a sharded save writes model.safetensors.index.json last): the
  // temporaries of the weights or the index, or shards without their index.
  static const std::regex temp_weights(R"((model(-[0-9]{5}-of-[0-9]{5})?\.safetensors(\.index\.json)?)\.tmp\.[0-9]+)");
  static const std::regex shard(R"(model-[0-9]{5}-of-[0-9]{5}\.safetensors)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string(), x = e.path().extension().string();
    if (std::regex_match(n, temp_weights) || std::regex_match(n, shard)) interrupted.push_back(n);
    if (x == ".bin" || x == ".pt" || x == ".pth" || x == ".safetensors" || x == ".gguf" ||
        n == "pytorch_model.bin.index.json")
      found.push_back(n);
  }
  auto join = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    std::string list;
    for (const auto& f : v) list += (list.empty() ? "" : ", ") + f;
    return list;
  };
  if (!interrupted.empty())
    throw Error("model " + dir + ": holds no complete weights but " + join(interrupted) +
                ", what a save interrupted while writing them leaves (a weight file appears under its name only "
                "when complete; model.safetensors.index.json is written after the shards): save the model again "
                "or use an earlier checkpoint; the seeded random init is not used for a directory in this state");
  if (found.empty()) return;
  const std::string list = join(found);
  throw Error("model " + dir + ": holds weight files twinkle does not read (" + list +
              "); it reads model.safetensors, or shards listed in model.safetensors.index.json (transformers' "
              "save_pretrained(dir, safe_serialization=True) writes them)");
}

// Why this rank's micro-batches cannot be made: `input_error` when the caller's conversion failed,
// else what `split` throws (twinkle::Error, or a std:: error of this rank's rows alone), else "".
// The Engine's agreed input check raises it on every rank alike.
std::string refusal_of(const std::string& input_error, const std::function<void()>& split) {
  if (!input_error.empty()) return input_error;
  try {
    split();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// StepMetrics::peak_memory_bytes: the device allocator's peak where it tracks one, else the process's
// peak resident set (the CPU's host memory).
int64_t peak_memory_bytes(Device d) {
  if (d != Device::CPU && has_device_allocator(d)) {
    const int64_t p = device_allocator(d).peak_bytes_in_use();
    if (p >= 0) return p;
  }
  return step_peak_rss_bytes();
}

std::string fmt_double(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

MegatronModel::MegatronModel(const std::string& model_id, const MegatronModelOptions& options)
    : ps_(global_state()), opts_(options) {
  validate(opts_);
  // Everything up to the engine reads files (config, weights, tokenizer) and runs no collective:
  // a failure on some ranks only (a checkpoint missing the tensors of one pipeline stage, a file
  // one node cannot read) is raised on every rank alike, so a caller that catches it leaves no
  // rank waiting in job_peak_flops' all-reduce below.
  dist::run_agreed(*ps_->world, [&] { build(model_id); });
  peak_flops_ = job_peak_flops(*ps_->world, opts_.mixed_precision == "bf16", ps_->mesh.device_type());
  t_start_ = t_last_metric_ = Clock::now();
}

void MegatronModel::build(const std::string& model_id) {
  model_dir_ = resolve_model_dir(model_id);
  ModelConfig cfg = load_model_config((fs::path(model_dir_) / "config.json").string());
  Qwen3ModelOptions mo;
  mo.layers_per_stage = opts_.layers_per_stage;
  mo.pipeline_split = opts_.pipeline_split;
  mo.recompute_granularity = opts_.recompute_granularity;
  mo.lm_head_chunk_tokens = opts_.lm_head_chunk_tokens;
  mo.moe_aux_loss_type = opts_.moe_aux_loss_type;
  mo.moe_aux_loss_coeff = opts_.moe_aux_loss_coeff
                              ? *opts_.moe_aux_loss_coeff
                              : (cfg.is_moe() && cfg.output_router_logits ? cfg.router_aux_loss_coef : 0.0);
  mo.moe_z_loss_coeff = opts_.moe_z_loss_coeff;
  mo.cp_comm_type = opts_.cp_comm_type;
  mo.mixed_precision = opts_.mixed_precision;
  std::optional<CheckpointReader> ck;
  if (opts_.load_weights) {
    ck = CheckpointReader::open_dir(model_dir_);
    if (!ck->has_weights()) {
      refuse_unread_weights(model_dir_);
      ck.reset();
    }
  }
  // A tied config with a checkpoint holding a different lm_head: untie (transformers 5).
  if (ck) {
    const std::string warn = untie_if_checkpoint_head_differs(cfg, *ck);
    if (!warn.empty() && ps_->world->rank() == 0) get_logger().warning(warn);
  }
  // The model starts on the plain reference kernels; the fused set is applied through kernelize_model,
  // which logs each op it replaces (Twinkle's kernelize with the device's built-in bundle). A device
  // without a reference set (cuda: only its fused kernels) starts on the set asked for.
  kernels::check_kernel_set(opts_.kernels);
  mo.kernels = ps_->mesh.device_type() == "cpu" ? "reference" : opts_.kernels;
  model_ = std::make_unique<Qwen3Model>(cfg, ps_, mo);
  if (opts_.kernels == "fused") kernelize_model(*model_);
  bool loaded = false;
  if (ck) {
    model_->load_checkpoint(*ck);
    warn_unused_tensors(*ck);
    loaded = true;
  }
  if (!loaded) {
    const uint64_t seed = opts_.seed ? opts_.seed : global_seed();
    // Not silent: a directory whose weights were forgotten must not look like a loaded model.
    get_logger().warning("model " + model_dir_ + ": " +
                         (opts_.load_weights ? "no *.safetensors weights found" : "weights not loaded (load_weights off)") +
                         "; parameters get the seeded random init (seed " + std::to_string(seed) + ")");
    model_->init_random(seed);
  }
  engine_ = std::make_unique<Engine>(*model_);
  // The pad id collates padded micro-batches: a tokenizer that is present but cannot be
  // loaded is an error naming its file, not a silent pad id 0.
  if (fs::exists(fs::path(model_dir_) / "tokenizer.json")) pad_id_ = Tokenizer::from_dir(model_dir_).pad_token_id();
}

void MegatronModel::set_optimizer(const std::string& name, const OptimizerConfig& cfg) {
  check(name.empty() || name == "default" || name == "MegatronOptimizer" || name == "Adam" || name == "AdamW",
        "set_optimizer: optimizer '" + name + "' is not supported (use \"default\" / AdamW)");
  validate(cfg);
  if (has_sched_) {  // the scheduler's max_lr follows the optimizer's lr: check before changing anything
    LRSchedulerConfig sc = sched_.config();
    sc.max_lr = cfg.lr;
    validate(sc);
  }
  optim_cfg_ = cfg;
  optim_cfg_.overlap_grad_reduce = opts_.overlap_grad_reduce;
  optim_cfg_.overlap_param_gather = opts_.overlap_param_gather;
  if (opts_.bucket_size > 0) optim_cfg_.bucket_bytes = 4 * opts_.bucket_size;
  if (optim_) {  // the old optimizer's collectives in flight end before it goes
    optim_->finish_param_sync();
    engine_->set_optimizer(nullptr);
  }
  optim_ = std::make_unique<DistributedOptimizer>(model_->trainable_store(), ps_, optim_cfg_);
  optim_->set_kernels(model_->kernels());  // the model's table: kernelize_model swaps both
  engine_->set_optimizer(optim_.get());
  if (has_sched_) {
    LRSchedulerConfig sc = sched_.config();
    sc.max_lr = cfg.lr;
    int64_t steps = sched_.steps();
    sched_ = LRScheduler(sc);
    sched_.set_steps(steps);
  }
}

void MegatronModel::add_adapter_to_model(const std::string& name, const LoraConfig& cfg) {
  check(!name.empty(), "add_adapter_to_model: the adapter name is empty");
  check(!model_->has_adapter(), "add_adapter_to_model: the model already has adapter '" + adapter_name_ +
                                    "' (one adapter per model)");
  finish_param_sync();
  model_->add_adapter(cfg, opts_.seed ? opts_.seed : global_seed());
  adapter_name_ = name;
  // An optimizer built before is rebuilt over the adapter (its base-weight state is freed).
  if (optim_) {
    optim_->finish_param_sync();
    engine_->set_optimizer(nullptr);
    optim_.reset();
    set_optimizer("default", optim_cfg_);
  }
}

void MegatronModel::load_adapter(const std::string& dir, const std::string& name) {
  const fs::path d(dir);
  const fs::path cfg_path = d / "adapter_config.json";
  // The files are read on every rank; a failure on some ranks only (a tensor of one stage's
  // layers missing, a file one node cannot read) is raised on all of them (run_agreed), first
  // for the config (before the adapter exists), then for the tensors.
  LoraConfig cfg;
  SafetensorsFile file;
  dist::run_agreed(*ps_->world, [&] {
    check(fs::exists(cfg_path), "load_adapter: " + dir + " has no adapter_config.json (not a PEFT adapter directory)");
    check(fs::exists(d / "adapter_model.safetensors"), "load_adapter: " + dir + " has no adapter_model.safetensors");
    cfg = read_peft_adapter_config(cfg_path.string());
    file = SafetensorsFile::open((d / "adapter_model.safetensors").string());
  });
  add_adapter_to_model(name, cfg);
  dist::run_agreed(*ps_->world, [&] { model_->check_adapter(file); });
  dist::run_agreed(*ps_->world, [&] { model_->load_adapter(file); });
}

void MegatronModel::set_lr_scheduler(const std::string& name, LRSchedulerConfig cfg) {
  check(name.empty() || name == "default" || name == "OptimizerParamScheduler",
        "set_lr_scheduler: scheduler '" + name + "' is not supported");
  cfg.max_lr = optim_cfg_.lr;
  sched_ = LRScheduler(cfg);
  has_sched_ = true;
}

DistributedOptimizer& MegatronModel::optimizer() {
  if (!optim_) set_optimizer("default", optim_cfg_);
  return *optim_;
}

std::vector<MicroBatch> MegatronModel::split(const std::vector<EncodedRow>& rows, int64_t row0) const {
  std::vector<MicroBatch> out;
  if (rows.empty()) return out;  // a rank without a row of a short last batch
  int64_t mbs = opts_.micro_batch_size > 0 ? opts_.micro_batch_size : std::min<int64_t>(2, rows.size());
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(mbs)) {
    std::vector<EncodedRow> part(rows.begin() + static_cast<std::ptrdiff_t>(i),
                                 rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), i + mbs)));
    out.push_back(opts_.packing ? collate_packed(part) : collate_padded(part, pad_id_));
    for (int64_t& r : out.back().segment_row) r += row0 + static_cast<int64_t>(i);
  }
  return out;
}

double MegatronModel::forward_backward(const std::vector<EncodedRow>& rows) { return forward_backward(rows, ""); }

double MegatronModel::forward_backward(const std::vector<EncodedRow>& rows, const std::string& input_error) {
  auto t0 = Clock::now();
  // Refused on every rank alike before any communication (the LoRA dropout row offsets below are an
  // all-gather); Engine::run checks again for callers that drive the Engine directly.
  if (optim_) optim_->check_backward_allowed();
  int64_t row0 = 0;
  if (model_->has_adapter() && model_->adapter_config().lora_dropout > 0) {
    // LoRA dropout masks are keyed by each token's row in the global batch: this replica's
    // block starts after the rows of the replicas before it (the DataLoader's contiguous
    // blocks in dp rank order; the cp ranks of a replica share its rows, so over dp, not dp-cp).
    auto& dp = *ps_->dp;
    std::vector<int64_t> counts(static_cast<size_t>(dp.size()), 0);
    const int64_t mine = static_cast<int64_t>(rows.size());
    if (dp.size() > 1) dp.all_gather(&mine, counts.data(), 1, DType::I64);
    for (int r = 0; r < dp.rank(); ++r) row0 += counts[static_cast<size_t>(r)];
    model_->set_lora_dropout_step(cur_step_);
  }
  // A row this rank cannot collate is refused on every rank alike (Engine's agreed input check).
  std::vector<MicroBatch> mbs;
  const std::string refused = refusal_of(input_error, [&] { mbs = split(rows, row0); });
  last_fb_ = engine_->forward_backward(mbs, refused);
  fb_time_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  ++cur_step_;
  if (last_fb_.label_tokens == 0)
    get_logger().warning("step " + std::to_string(cur_step_) +
                         ": no labelled tokens in the global batch (every label is -100): the loss is undefined "
                         "(logged as \"no labelled tokens\", null in JSON) and the gradients are zero");
  return last_fb_.loss;
}

double MegatronModel::forward_only(const std::vector<EncodedRow>& rows) { return forward_only(rows, ""); }

double MegatronModel::forward_only(const std::vector<EncodedRow>& rows, const std::string& input_error) {
  finish_param_sync();
  std::vector<MicroBatch> mbs;
  const std::string refused = refusal_of(input_error, [&] { mbs = split(rows); });
  StepResult r = engine_->forward_only(mbs, refused);
  last_eval_label_tokens_ = r.label_tokens;
  last_eval_lm_loss_sum_ = r.lm_loss_sum;
  if (r.label_tokens == 0)
    get_logger().warning("eval: no labelled tokens in the batch (every label is -100): the loss is undefined");
  return r.loss;
}

double MegatronModel::flops_per_token(double S) const {
  return qwen3_flops_per_token(model_->config(), model_->num_parameters(), S);
}

namespace {

// Fault injection for the restart tests (TWINKLE_FAULT_KILL="R:S", read once): world rank R
// SIGKILLs itself in step S, after its backward and before the optimizer step (its peers are left
// waiting in the step's collectives: a rank dying mid-step). It fires only in a job's first attempt
// (TWINKLE_RESTART_COUNT unset or 0; twinkle-run --max-restarts sets it), so the restarted job that
// resumes before step S runs through it.
void fault_kill_check(int world_rank, int64_t step) {
  static const std::pair<int64_t, int64_t> at = [] {
    const char* e = std::getenv("TWINKLE_FAULT_KILL");
    const char* rc = std::getenv("TWINKLE_RESTART_COUNT");
    if (!e || (rc && *rc && std::string(rc) != "0")) return std::pair<int64_t, int64_t>{-1, -1};
    long long r = -1, s = -1;
    if (std::sscanf(e, "%lld:%lld", &r, &s) != 2) return std::pair<int64_t, int64_t>{-1, -1};
    return std::pair<int64_t, int64_t>{r, s};
  }();
  if (at.first == world_rank && at.second == step) {
    std::fprintf(stderr, "[rank %d] TWINKLE_FAULT_KILL: SIGKILL in step %lld\n", world_rank,
                 static_cast<long long>(step));
    std::fflush(nullptr);
    std::raise(SIGKILL);
  }
}

}  // namespace

StepStats MegatronModel::clip_grad_and_step(std::optional<double> max_grad_norm) {
  fault_kill_check(ps_->global_rank, cur_step_);
  auto t0 = Clock::now();
  DistributedOptimizer& opt = optimizer();
  const double lr = has_sched_ ? sched_.current() : optim_cfg_.lr;
  const bool has_loss = last_fb_.label_tokens > 0;
  // Megatron's check_for_nan_in_loss_and_grad: the loss first (it is the same on every
  // rank; the flag is still agreed over the world so no rank can go its own way), then the
  // grad norm (reduced over the world inside step(), which applies nothing when it is
  // non-finite).
  int64_t bad_loss = has_loss && !std::isfinite(last_fb_.loss) ? 1 : 0;
  if (ps_->world->size() > 1) ps_->world->all_reduce(&bad_loss, 1, DType::I64, dist::ReduceOp::Max);
  const bool skip_policy = opts_.on_nonfinite == "skip";
  auto value = [](double v) { return std::isnan(v) ? std::string("nan") : fmt_double("%g", v); };
  StepStats st;
  if (bad_loss) {
    opt.discard_gradients();
    st.grad_norm = std::numeric_limits<double>::quiet_NaN();
    st.lr = lr;
    st.step = opt.steps();
    st.skipped = true;
    if (!skip_policy)
      throw Error("step " + std::to_string(cur_step_) + ": the loss is non-finite (" + value(last_fb_.loss) +
                  "); nothing was applied, the weights are those of the last good step (lower the learning rate or "
                  "check the data; --on-nonfinite skip / on_nonfinite=\"skip\" skips such steps instead)");
  } else {
    // an argument <= 0 turns clipping off (DistributedOptimizer::step reads a negative max_norm as "use clip_grad")
    st = opt.step(lr, max_grad_norm ? std::max(0.0, *max_grad_norm) : -1.0);
    if (st.skipped && !skip_policy)
      throw Error("step " + std::to_string(cur_step_) + ": the gradient norm is non-finite (" + value(st.grad_norm) +
                  ", loss " + (has_loss ? value(last_fb_.loss) : std::string("undefined")) +
                  "); nothing was applied, the weights are those of the last good step (lower the learning rate or "
                  "check the data; --on-nonfinite skip / on_nonfinite=\"skip\" skips such steps instead)");
  }
  if (st.skipped) {
    ++skipped_steps_;
    get_logger().warning("step " + std::to_string(cur_step_) + ": skipped the update: non-finite " +
                         (bad_loss ? "loss (" + value(last_fb_.loss) + ")" : "grad norm (" + value(st.grad_norm) + ")") +
                         "; " + std::to_string(skipped_steps_) + " skipped so far");
  } else if (has_sched_) {
    sched_.step();  // Megatron advances the scheduler only when the update succeeded
  }
  fb_time_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
  last_.step = st.step;
  last_.loss = last_fb_.loss;
  last_.has_loss = has_loss;
  last_.skipped = st.skipped;
  last_.skipped_steps = skipped_steps_;
  last_.grad_norm = st.grad_norm;
  last_.lr = lr;
  last_.tokens = last_fb_.tokens;
  last_.label_tokens = last_fb_.label_tokens;
  last_.moe = last_fb_.moe;
  last_.lm_loss = last_fb_.lm_loss;
  last_.aux_loss = last_fb_.aux_loss;
  last_.z_loss = last_fb_.z_loss;
  last_.expert_load_max = last_fb_.expert_load_max;
  last_.expert_load_min = last_fb_.expert_load_min;
  last_.expert_grad_norm = st.expert_grad_norm;
  last_.step_time_s = fb_time_s_;
  last_.tokens_per_s = fb_time_s_ > 0 ? static_cast<double>(last_fb_.tokens) / fb_time_s_ : 0;
  // the global mean sequence length (every rank the same, also one without a row this step)
  const double mean_seq = last_fb_.sequences > 0 ? static_cast<double>(last_fb_.sequence_tokens) /
                                                       static_cast<double>(last_fb_.sequences)
                                                 : 0.0;
  const double fl = flops_per_token(mean_seq) * static_cast<double>(last_fb_.tokens);
  last_.mfu = (peak_flops_ > 0 && fb_time_s_ > 0) ? fl / fb_time_s_ / peak_flops_ : 0;
  last_.peak_memory_bytes = peak_memory_bytes(model_->device());
  fb_time_s_ = 0;
  ++steps_since_metric_;
  if (!opts_.tensorboard_dir.empty() && ps_->global_rank == 0) {
    // opened at the first step, after a resume_from_checkpoint set cur_step_: the SessionLog START at
    // the first new step makes TensorBoard drop what an earlier run logged from there on (as `twinkle
    // train --tensorboard-dir` does, tools/twinkle/cmd_train.cpp)
    if (!tb_) {
      tb_ = std::make_unique<TensorBoardWriter>(opts_.tensorboard_dir, resumed_step_ >= 0 ? resumed_step_ + 1 : -1);
      get_logger().info("tensorboard: " + tb_->path());
    }
    write_step_scalars(*tb_, last_, cur_step_);
  }
  // an asynchronous save in flight is committed once every rank's writer is done (SaveOptions::async_save)
  if (pending_save_) finish_pending_save(false);
  return st;
}

std::map<std::string, std::string> MegatronModel::calculate_metric(bool is_training) {
  std::map<std::string, std::string> m;
  auto now = Clock::now();
  const double since_last = std::chrono::duration<double>(now - t_last_metric_).count();
  const double total = std::chrono::duration<double>(now - t_start_).count();
  m["loss"] = last_.has_loss ? fmt_double("%.4f", last_.loss) : std::string("no labelled tokens");
  if (last_.skipped_steps > 0) m["skipped steps"] = std::to_string(last_.skipped_steps);
  if (is_training) {
    if (last_.grad_norm != 0) m["grad_norm"] = fmt_double("%.6f", last_.grad_norm);
    m["learning rate"] = fmt_double("%.6e", has_sched_ ? sched_.current() : optim_cfg_.lr);
    m["iters"] = std::to_string(std::max<int64_t>(0, last_.step - 1));
    m["speed"] = fmt_double("%.2f iters/s", since_last > 0 ? static_cast<double>(steps_since_metric_) / since_last : 0);
    m["tokens_per_s"] = fmt_double("%.1f", last_.tokens_per_s);
    m["mfu"] = fmt_double("%.4f", last_.mfu);
  }
  m["total time elapse"] = since_last >= 60 ? fmt_double("%.1f minutes", total / 60) : fmt_double("%.0f seconds", total);
  t_last_metric_ = now;
  steps_since_metric_ = 0;
  return m;
}

std::string MegatronModel::get_train_configs() const {
  const auto& mesh = ps_->mesh;
  const auto& c = model_->config();
  std::ostringstream o;
  o << "Backend: twinkle (Megatron-style, " << mesh.device_type() << ")\n";
  o << "DP size: " << mesh.dp_size() << "\nTP size: " << mesh.tp_size() << "\nPP size: " << mesh.pp_size()
    << "\nCP size: " << mesh.cp_size() << "\nEP size: " << mesh.ep_size()
    // what the model runs: on only with tp > 1 (Megatron drops it at tp 1), forced on for MoE with tp > 1
    << "\nSequence Parallel: "
    << (mesh.tp_size() > 1 && (mesh.sequence_parallel() || c.is_moe()) ? "True" : "False") << "\n";
  if (model_->has_adapter()) {  // Twinkle's "Adapter config:" line (the LoraConfig fields)
    const LoraConfig& a = model_->adapter_config();
    o << "Adapter config: " << adapter_name_ << " {\"r\": " << a.r << ", \"lora_alpha\": " << a.lora_alpha
      << ", \"target_modules\": \"" << a.target_modules << "\", \"lora_dropout\": " << a.lora_dropout
      << ", \"use_rslora\": " << (a.use_rslora ? "true" : "false") << ", \"init_lora_weights\": \""
      << a.init_lora_weights << "\"}\n";
  }
  o << "Model: " << model_dir_ << " (" << c.model_type << ", " << c.num_hidden_layers << " layers, hidden "
    << c.hidden_size << ", heads " << c.num_attention_heads << "/" << c.num_key_value_heads << ", head_dim "
    << c.head_dim << ", vocab " << c.vocab_size << (c.tie_word_embeddings ? ", tied" : ", untied") << ", "
    << model_->num_parameters() << " parameters)\n";
  if (c.is_moe())
    o << "MoE: " << c.num_experts << " experts, top-" << c.num_experts_per_tok << (c.norm_topk_prob ? " (renormalised)" : "")
      << ", aux loss " << model_->options().moe_aux_loss_type << " x " << model_->options().moe_aux_loss_coeff
      << ", z-loss x " << model_->options().moe_z_loss_coeff << "\n";
  {
    const auto& kt = model_->kernels();
    std::string impls;
    for (const auto& op : kernels::op_names())
      if (kt.impl(op) != kt.impl("rms_norm")) impls += " " + op + "=" + kt.impl(op);
    o << "Kernels: " << kt.device << " " << kt.impl("rms_norm") << (impls.empty() ? "" : " except" + impls) << "\n";
    o << "Mixed precision: " << model_->options().mixed_precision
      << (model_->options().mixed_precision == "bf16"
              ? " (bf16 GEMM inputs, fp32 accumulation, fp32 master weights / grads / Adam state)"
              : "")
      << "\n";
  }
  o << "Optimizer: AdamW (" << (optim_cfg_.use_distributed_optimizer ? "distributed" : "replicated")
    << "), lr " << optim_cfg_.lr << ", weight_decay " << optim_cfg_.weight_decay << ", betas (" << optim_cfg_.adam_beta1
    << ", " << optim_cfg_.adam_beta2 << "), eps " << optim_cfg_.adam_eps << ", clip_grad " << optim_cfg_.clip_grad
    << "\n";
  if (has_sched_) {
    const auto& s = sched_.config();
    o << "LR scheduler: OptimizerParamScheduler (" << s.lr_decay_style << ", warmup " << s.lr_warmup_steps
      << ", decay " << s.lr_decay_steps << ", min_lr " << s.min_lr << ")\n";
  } else {
    o << "LR scheduler: constant\n";
  }
  o << "Micro batch size: " << (opts_.micro_batch_size ? std::to_string(opts_.micro_batch_size) : "min(2, rows)")
    << (opts_.packing ? " (packed)" : "")
    << "\nGradient accumulation steps: 1 (one optimizer step per global batch; its micro-batches are pipelined "
       "and their gradients summed)";
  return o.str();
}

void MegatronModel::write_model_files(const std::string& dir_s, const ModelConfig& cfg) const {
  const fs::path dir(dir_s);
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                        "special_tokens_map.json", "generation_config.json"}) {
    fs::path src = fs::path(model_dir_) / f;
    if (!fs::exists(src) || fs::equivalent(src.parent_path(), dir)) continue;
    std::ifstream in(src, std::ios::binary);
    io_detail::write_file_atomic((dir / f).string(),
                                 std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  save_model_config(cfg, (dir / "config.json").string());
}

void MegatronModel::write_peft_adapter_config(const std::string& dir) const {
  // PEFT expands only the string "all-linear", to every nn.Linear but the output layer — on
  // Qwen3-MoE the router "mlp.gate" too, which twinkle's all-linear leaves out (Twinkle's
  // rule). On a MoE model, or inside a list, it is spelled out as the suffixes it stands
  // for, so PEFT attaches exactly the saved pairs.
  LoraConfig saved = model_->adapter_config();
  const std::vector<std::string> tl = lora_target_list(saved);
  if (std::find(tl.begin(), tl.end(), "all-linear") != tl.end() && (model_->config().is_moe() || tl.size() > 1)) {
    std::vector<std::string> out = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    for (const auto& t : tl)
      if (t != "all-linear" && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    saved.target_modules.clear();
    for (const auto& t : out) saved.target_modules += (saved.target_modules.empty() ? "" : ",") + t;
  }
  io_detail::write_file_atomic((fs::path(dir) / "adapter_config.json").string(),
                               peft_adapter_config_json(saved, model_dir_));
}

std::string MegatronModel::save(const std::optional<std::string>& name_opt, const SaveOptions& opts) {
  check_option(opts.interval >= 1, "save", "interval", ">= 1", opts.interval);
  check_option(opts.keep_last >= 0, "save", "keep_last", ">= 0 (0 = keep all)", opts.keep_last);
  check(opts.save_format == "sharded" || opts.save_format == "gathered",
        "save: option save_format (--save-format) must be \"sharded\" or \"gathered\", got \"" + opts.save_format + "\"");
  DType save_dtype = model_->config().torch_dtype;
  if (!opts.dtype.empty()) {
    check(opts.dtype == "float32" || opts.dtype == "bfloat16" || opts.dtype == "float16",
          "save: option dtype (--save-dtype) must be \"float32\", \"bfloat16\" or \"float16\" (or empty: the "
          "dtype the model was loaded in), got \"" + opts.dtype + "\"");
    save_dtype = dtype_from_torch_name(opts.dtype);
  }
  check(!opts.async_save || (opts.save_optimizer && opts.save_format == "sharded"),
        "save: async_save (--async-save) needs save_optimizer with save_format \"sharded\"");
  if (cur_step_ % opts.interval != 0) return "";  // Twinkle: save only every `interval` steps
  wait_for_save();  // the previous asynchronous save is committed first
  finish_param_sync();
  const std::string name = name_opt ? *name_opt : checkpoint_step_name(cur_step_);
  check(!(opts.save_optimizer && name.empty()),
        "save: save_optimizer needs a checkpoint name (the directory is replaced as a whole), not output_dir itself");
  const fs::path final_dir = name.empty() ? fs::path(opts.output_dir) : fs::path(opts.output_dir) / name;
  ModelConfig cfg = model_->config();
  if (!opts.dtype.empty()) cfg.torch_dtype = save_dtype;  // config.json names the dtype written
  if (opts.save_optimizer && opts.save_format == "sharded") {
    save_sharded(name, final_dir.string(), opts, cfg);
    return final_dir.string();
  }
  const bool adapter = model_->has_adapter();
  const bool peft = adapter && !opts.merge_lora;
  auto tensors = peft ? std::vector<std::pair<std::string, Tensor>>{} : model_->gather_state_dict();
  std::vector<std::pair<std::string, Tensor>> lora;
  if (adapter) lora = model_->gather_adapter_state_dict();
  auto& world = *ps_->world;
  if (peft) tensors = lora;
  // The training state is gathered (collectively) before rank 0 touches any file; the fp32
  // trainable weights are the adapter's with LoRA, else every gathered tensor (before any
  // dtype conversion or LoRA merge).
  TrainingStateTensors train_state;
  if (opts.save_optimizer) train_state = gather_training_state(adapter ? lora : tensors);
  // With save_optimizer the whole directory is staged and renamed into place (checkpoint_dir.h).
  const fs::path dir = opts.save_optimizer ? fs::path(staging_dir_for(final_dir.string())) : final_dir;
  run_on_rank0_agreed(
      world,
      [&] {
        if (opts.save_optimizer) remove_stale_staging(final_dir.string());  // of a process that died mid-write
        if (adapter && opts.merge_lora) merge_lora_into(tensors, lora, model_->adapter_config().scaling());
        // Never write non-finite weights: refuse before any file is touched.
        for (auto& [n, t] : tensors) {
          const float* p = t.f32();
          for (int64_t i = 0, e = t.numel(); i < e; ++i)
            if (!std::isfinite(p[i]))
              throw Error("save: parameter " + n + " holds a non-finite value at element " + std::to_string(i) +
                          "; refusing to write a checkpoint to " + dir.string());
        }
        // Every file is written atomically (io's write_file_atomic / save_checkpoint_dir), and the
        // weights last: save_checkpoint_dir removes old weights first and writes its index last,
        // so an interrupted save never leaves a checkpoint that looks complete.
        write_model_files(dir.string(), cfg);
        std::vector<std::pair<std::string, Tensor>> out;
        out.reserve(tensors.size());
        if (peft) {
          // PEFT layout: f32 adapter tensors under PEFT's key names, the config written first.
          for (auto& [n, t] : tensors) out.emplace_back(peft_key(n), t);
          write_peft_adapter_config(dir.string());
          save_safetensors((dir / "adapter_model.safetensors").string(), out);
        } else {
          for (auto& [n, t] : tensors) out.emplace_back(n, cfg.torch_dtype == DType::F32 ? t : t.to_dtype(cfg.torch_dtype));
          save_checkpoint_dir(dir.string(), out, opts.max_shard_bytes);
        }
        if (opts.save_optimizer) {
          write_training_state(dir.string(), train_state, opts);
          fsync_tree(dir.string());
          commit_dir(dir.string(), final_dir.string());  // the checkpoint appears complete, or not at all
          write_latest(opts.output_dir, name);           // `latest` last
          for (const auto& old : prune_checkpoints(opts.output_dir, opts.keep_last, final_dir.string()))
            get_logger().info("save: removed " + old + " (keep_last " + std::to_string(opts.keep_last) + ")");
        }
      },
      [&](const std::string& what) {
        if (!opts.save_optimizer) return what;
        std::error_code ec;
        fs::remove_all(dir, ec);  // the staging dir; earlier checkpoints were never touched
        return "save: checkpoint " + final_dir.string() + " was not written (earlier checkpoints are untouched): " + what;
      },
      "save: writing " + final_dir.string() + " failed on rank 0");
  return final_dir.string();
}

void MegatronModel::load(const std::string& dir) {
  finish_param_sync();
  // Every rank reads its own shards. The checks are agreed over the world before any rank loads,
  // so a checkpoint refused on some ranks only (one stage's tensors missing) changes no rank.
  std::optional<CheckpointReader> ck;
  dist::run_agreed(*ps_->world, [&] {
    ck = CheckpointReader::open_dir(resolve_model_dir(dir));
    check(ck->has_weights(), "load: " + dir + " has no safetensors weights");
    check(!(model_->config().tie_word_embeddings && checkpoint_head_differs(*ck)),
          "load: " + ck->dir() + " holds an lm_head.weight that differs from model.embed_tokens.weight but this "
          "model is tied; build the model from that checkpoint (it is then untied, as transformers 5 does)");
    model_->check_checkpoint(*ck);
  });
  dist::run_agreed(*ps_->world, [&] {
    model_->load_checkpoint(*ck);
    warn_unused_tensors(*ck);
  });
}

void MegatronModel::warn_unused_tensors(const CheckpointReader& ck) const {
  if (ps_->world->rank() != 0) return;
  const std::vector<std::string> unused = model_->unused_checkpoint_tensors(ck);
  if (unused.empty()) return;
  std::string list;
  for (size_t i = 0; i < unused.size() && i < 5; ++i) list += (i ? ", " : "") + unused[i];
  if (unused.size() > 5) list += ", ...";
  get_logger().warning("checkpoint " + ck.dir() + ": " + std::to_string(unused.size()) +
                       " tensor(s) are not used by the model config.json describes (" + list +
                       "); config.json and the weights may disagree (e.g. num_hidden_layers)");
}

}  // namespace twinkle
