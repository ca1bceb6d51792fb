// examples/moe_recipe.h — the body of the Qwen3-MoE recipes (examples/moe_recipe.cpp, the
// the cookbook's tp_moe_npu; examples/moe_cp_recipe.cpp, tp_moe_cp_npu), which differ only in their mesh
// and output directory (moe_recipe::Defaults). Not a library header: each recipe includes it once.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "recipe_metrics.h"
#include "twinkle/train/checkpoint_dir.h"
#include "twinkle/train/tensorboard_log.h"
#include "twinkle/twinkle.h"

using namespace twinkle;

namespace moe_recipe {

/// What distinguishes the two recipes (Twinkle's cookbook/megatron/ascend/tp_moe_npu.py and
/// tp_moe_cp_npu.py).
struct Defaults {
  const char* title;       ///< CLI description
  const char* name;        ///< program name
  int dp, tp, pp, cp, ep;  ///< the cookbook's mesh
  const char* output_dir;  ///< output/<recipe>
};

inline std::string env_or(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

inline int run(int argc, char** argv, const Defaults& d) {
  // the source tree at run time ($TWINKLE_SOURCE_DIR: a relocated copy, e.g. scripts/device-check's bundle), else
  // the one the recipe was built from
  std::string model_id =
      env_or("TWINKLE_MODEL", env_or("TWINKLE_SOURCE_DIR", TWINKLE_SOURCE_DIR) + "/models/qwen3-moe-tiny");
  std::string device = env_or("TWINKLE_DEVICE", "cpu");
  std::string dataset_id = "ms://swift/self-cognition";
  std::string output_dir = d.output_dir, cp_comm_type = "p2p";
  std::string aux_type = "per_layer";
  int64_t max_steps = 10, data_rows = 128, batch_size = 2, max_length = 512, micro_batch_size = 0, save_interval = 0;
  std::string resume;
  double lr = 1e-4, aux_coeff = 0.0;
  int dp = d.dp, tp = d.tp, pp = d.pp, cp = d.cp, ep = d.ep, vpp = 1;
  bool use_lora = false, bf16 = false, fp32 = false;
  LoraConfig lora{.r = 8, .lora_alpha = 32, .target_modules = "all-linear"};  // the cookbook's LoraConfig
  CLI::App app{d.title, d.name};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.add_option("--model", model_id, "model directory or hub id (default: models/qwen3-moe-tiny)");
  app.add_option("--device", device, "cpu | cuda | npu (TWINKLE_DEVICE)");
  app.add_option("--dataset", dataset_id, "dataset id or file");
  app.add_option("--data-rows", data_rows, "data_slice = range(N) (indices past the end wrap around)");
  app.add_option("--max-steps", max_steps, "optimizer steps (>= 0; 0 = one epoch; the cookbook recipe runs 10 of 64)");
  app.add_option("--batch-size", batch_size, "global batch size");
  app.add_option("--micro-batch-size", micro_batch_size, "rows per micro-batch (0: Twinkle's min(2, rows of the dp rank))");
  app.add_option("--lr", lr, "peak learning rate");
  app.add_option("--output-dir", output_dir, "where the final checkpoint and metrics.jsonl go");
  std::string tensorboard_dir;
  app.add_option("--tensorboard-dir", tensorboard_dir,
                 "write TensorBoard event files of every step's metrics here (rank 0; Megatron's --tensorboard-dir; "
                 "default: none)");
  app.add_option("--save-interval", save_interval,
                 "every N steps save OUTPUT_DIR/checkpoint-step-<step> with the optimizer state (0 = none)");
  bool async_save = false;
  app.add_flag("--async-save", async_save,
               "write the --save-interval checkpoints in a background thread from a copy of each rank's slices while "
               "training goes on (twinkle train --async-save; the next save and the end of the run wait for it)");
  app.add_option("--resume", resume,
                 "continue from this checkpoint (or OUTPUT_DIR, whose 'latest' names one); auto = the newest "
                 "complete checkpoint in --output-dir, or a fresh start when there is none (twinkle-run "
                 "--max-restarts; default: none)");
  app.add_option("--dp", dp, "data-parallel size");
  app.add_option("--tp", tp, "tensor-parallel size (sequence parallelism switched on for MoE)");
  app.add_option("--pp", pp, "pipeline-parallel size");
  app.add_option("--vpp,--virtual-pipeline-stages", vpp,
                 "model chunks per pipeline rank (interleaved 1F1B; needs --pp > 1; default 1)");
  app.add_option("--cp", cp, "context-parallel size (every sequence split over cp ranks, load-balanced)");
  app.add_option("--cp-comm-type", cp_comm_type, "p2p (ring attention) | a2a (Ulysses)");
  app.add_option("--ep", ep, "expert-parallel size");
  app.add_option("--moe-aux-loss-coeff", aux_coeff, "load-balancing loss coefficient (Twinkle's Megatron path: 0)");
  app.add_option("--moe-aux-loss-type", aux_type, "global (transformers, pp = 1) | per_layer (Megatron)");
  app.add_flag("--lora", use_lora,
               "train a LoRA adapter (the cookbook's add_adapter_to_model line; all-linear includes every expert's "
               "gate/up/down, PEFT's per-expert keys) instead of the full model");
  app.add_option("--lora-r", lora.r, "LoRA rank (with --lora)");
  app.add_option("--lora-alpha", lora.lora_alpha, "LoRA alpha: scaling alpha / r (with --lora)");
  app.add_option("--lora-targets", lora.target_modules, "all-linear or comma-separated module names (with --lora)");
  auto* bf16_flag = app.add_flag("--bf16", bf16, "bf16 mixed precision (fp32 master weights; cpu and cuda)");
  app.add_flag("--fp32", fp32, "fp32 everywhere (the default)")->excludes(bf16_flag);
  bool overlap_grad = false, overlap_param = false;
  app.add_flag("--overlap-grad-reduce", overlap_grad, "overlap the gradient dp reduce-scatter with the backward");
  app.add_flag("--overlap-param-gather", overlap_param, "overlap the parameter all-gather with the next forward");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // Every option through the API's own checks before anything starts.
  check_option(max_steps >= 0, "train", "max_steps", ">= 0 (0 = one epoch)", max_steps);
  check_option(data_rows >= 1, "recipe", "data_rows", ">= 1", data_rows);
  check_option(save_interval >= 0, "train", "save_interval", ">= 0 (0 = none)", save_interval);
  check_option(!async_save || save_interval > 0, "train", "async_save", "with --save-interval N (the checkpoints it writes)",
               "set");
  validate(OptimizerConfig{.lr = lr});
  validate(TemplateOptions{.model_id = model_id, .max_length = max_length});
  validate(DataLoaderOptions{.batch_size = batch_size, .dp_rank = 0, .dp_size = dp});
  if (use_lora) validate(lora);

  // 1. mesh and runtime (experts: etp=1, ep, edp = world / (ep*pp))
  DeviceMesh mesh = DeviceMesh::from_sizes({.dp = dp, .tp = tp, .pp = pp, .cp = cp, .ep = ep, .vpp = vpp, .device_type = device});
  twinkle::initialize({.mode = "local", .global_device_mesh = mesh});
  auto& log = get_logger();
  auto& ps = parallel_state();

  // 2. data: self-cognition through the Qwen3 chat template
  Dataset ds(DatasetMeta(dataset_id, DataSlice::range(data_rows)));
  ds.set_template("Template", {.model_id = model_id, .max_length = max_length});
  ds.map(SelfCognitionProcessor("twinkle大模型", "ModelScope社区"));
  ds.encode();
  DataLoader loader(ds, {.batch_size = batch_size});  // dp rank and size from the global mesh

  // 3. model, optimizer, schedule (lr_decay_steps = len(dataloader), as the seed)
  MegatronModel model(model_id, {.micro_batch_size = micro_batch_size,
                                 .moe_aux_loss_type = aux_type,
                                 .moe_aux_loss_coeff = aux_coeff,
                                 .cp_comm_type = cp_comm_type,
                                 .mixed_precision = bf16 ? "bf16" : "fp32",
                                 .overlap_grad_reduce = overlap_grad,
                                 .overlap_param_gather = overlap_param});
  if (use_lora) model.add_adapter_to_model("default", lora);  // only the adapter trains from here on
  model.set_optimizer("default", {.lr = lr});
  const int64_t steps = resolve_max_steps(max_steps, loader.size());  // 0 = one epoch
  model.set_lr_scheduler("default",
                         {.lr_warmup_steps = 2, .lr_decay_steps = std::max<int64_t>(loader.size(), 3)});
  log.info(get_device_placement());
  log.info("\n" + model.get_train_configs());

  // 4. train
  const bool rank0 = ps.global_rank == 0;
  int64_t step = 0;
  // --resume auto: the newest complete checkpoint of output_dir, none = a fresh start (train/checkpoint_dir.h)
  const std::string resume_dir = resolve_resume_option(resume, output_dir);
  if (resume == "auto")
    log.info(resume_dir.empty() ? "resume auto: no checkpoint in " + output_dir + ", starting fresh"
                                : "resume auto: resuming from " + resume_dir);
  if (!resume_dir.empty()) step = model.resume_from_checkpoint(resume_dir, false, &loader).cur_step;  // Twinkle's resume
  const int64_t start_step = step;
  // a resumed run keeps the earlier steps' lines (recipe_metrics.h)
  std::ofstream metrics;
  if (rank0) metrics = recipe_metrics::open_metrics(std::filesystem::path(output_dir) / "metrics.jsonl", start_step);
  // TensorBoard (twinkle/train/tensorboard_log.h): a new event file per run; a resumed run marks its first
  // step, so TensorBoard shows one curve through the restart
  std::unique_ptr<TensorBoardWriter> tb;
  if (rank0 && !tensorboard_dir.empty()) {
    tb = std::make_unique<TensorBoardWriter>(tensorboard_dir, start_step > 0 ? start_step + 1 : -1);
    log.info("tensorboard: " + tb->path());
  }
  double first_loss = 0, last_loss = 0, time_sum = 0;
  while (step < steps) {
    for (auto& batch : loader) {
      model.forward_backward(batch);
      model.clip_grad_and_step();
      ++step;
      const auto& m = model.last_metrics();
      model.calculate_metric(true);
      if (step == start_step + 1) first_loss = m.loss;
      last_loss = m.loss;
      if (step > start_step + 1) time_sum += m.step_time_s;  // the run's first step warms up
      if (rank0) {
        nlohmann::json loss = m.has_loss && std::isfinite(m.loss) ? nlohmann::json(m.loss) : nlohmann::json(nullptr);
        nlohmann::json j = {{"step", step},
                            {"loss", loss},
                            {"grad_norm", m.grad_norm},
                            {"expert_grad_norm", m.expert_grad_norm},
                            {"lr", m.lr},
                            {"lm_loss", m.lm_loss},
                            {"aux_loss", m.aux_loss},
                            {"expert_load_max", m.expert_load_max},
                            {"expert_load_min", m.expert_load_min},
                            {"tokens", m.tokens},
                            {"tokens_per_s", m.tokens_per_s},
                            {"step_time_s", m.step_time_s}};
        metrics << j.dump() << "\n";
        metrics.flush();
        if (tb) write_step_scalars(*tb, m, step);
        char line[320];
        std::snprintf(line, sizeof line,
                      "step %3lld/%lld  loss %.4f  grad_norm %.4f  lr %.3e  aux %.4f  expert load %.3f/%.3f  "
                      "tokens/s %.0f  %.2f s",
                      static_cast<long long>(step), static_cast<long long>(steps), m.loss, m.grad_norm, m.lr,
                      m.aux_loss, m.expert_load_max, m.expert_load_min, m.tokens_per_s, m.step_time_s);
        log.info(line);
      }
      if (save_interval > 0)  // Twinkle's save(interval=N, save_optimizer=True): "" on the other steps
        model.save(std::nullopt, {.output_dir = output_dir, .interval = save_interval, .save_optimizer = true,
                                  .dataloader = &loader, .async_save = async_save});
      if (step >= steps) break;
    }
  }

  // 5. save (Hugging Face format, every expert gathered from its ep rank; with --lora PEFT's adapter
  // directory, every expert's pair gathered) and summary
  // --async-save: the last interval checkpoint is committed (every rank's write done) before the final save
  if (model.save_pending()) {
    model.wait_for_save();
    log.info("the last asynchronous checkpoint is written");
  }
  std::filesystem::path out(output_dir);
  std::string dir = model.save("", {.output_dir = out.string()});
  if (rank0) {
    char buf[512];
    char trained[112] = "";  // no loss or speed to report when a resumed run had no step left
    if (step > start_step)
      std::snprintf(trained, sizeof trained, ", loss %.4f -> %.4f, mean step %.2f s (after the first)", first_loss,
                    last_loss, time_sum / static_cast<double>(std::max<int64_t>(1, step - start_step - 1)));
    std::snprintf(buf, sizeof buf, "summary: %s%s, %s %s, metrics %s",
                  recipe_metrics::steps_phrase(start_step, step).c_str(), trained,
                  use_lora ? "PEFT adapter (adapter_config.json, adapter_model.safetensors)"
                           : "checkpoint (config.json, safetensors, tokenizer files)",
                  dir.c_str(), (out / "metrics.jsonl").string().c_str());
    log.info(buf);
  }
  return 0;
}

}  // namespace moe_recipe
