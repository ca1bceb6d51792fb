// examples/tp_recipe.cpp — dense Qwen3 with TP + PP + DP: the C++ twin of Twinkle's
// cookbook/megatron/tp.py (GPU) and cookbook/megatron/ascend/tp_npu.py (NPU).
//
//   twinkle-run --nproc_per_node=8 build/examples/tp_recipe [--model DIR|ms://Qwen/Qwen3-0.6B]
//               [--device cpu] [--max-steps N] [--output-dir output/tp_recipe]
//               [--save-interval N [--async-save]] [--resume output/tp_recipe] [--tensorboard-dir DIR]
//               [--lora [--lora-r 8 --lora-alpha 32 --lora-targets all-linear]]
//
// --lora is the cookbook recipe's commented line switched on: before the optimizer,
//   model.add_adapter_to_model("default", LoraConfig{.r = 8, .lora_alpha = 32, .target_modules = "all-linear"})
// (Twinkle: model.add_adapter_to_model('default', LoraConfig(r=8, lora_alpha=32, target_modules='all-linear'))),
// so only the adapter trains and the save writes a PEFT adapter directory.
//
// Model id and device type also come from TWINKLE_MODEL / TWINKLE_DEVICE. Defaults: the
// embedded models/qwen3-tiny, device cpu, the shipped self-cognition data (or
// ms://swift/self-cognition from the local ModelScope cache when it is there).
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

namespace {

std::string env_or(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return v && *v ? v : def;
}

std::string progress_bar(int64_t done, int64_t total) {
  const int width = 24;
  int fill = total > 0 ? static_cast<int>(width * done / total) : 0;
  return "[" + std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(width - fill), '.') + "]";
}

int recipe(int argc, char** argv) {
  // the source tree at run time ($TWINKLE_SOURCE_DIR: a relocated copy, e.g. scripts/device-check's bundle), else
  // the one the recipe was built from
  std::string model_id =
      env_or("TWINKLE_MODEL", env_or("TWINKLE_SOURCE_DIR", TWINKLE_SOURCE_DIR) + "/models/qwen3-tiny");
  std::string device = env_or("TWINKLE_DEVICE", "cpu");
  std::string dataset_id = "ms://swift/self-cognition";
  std::string output_dir = "output/tp_recipe";
  std::string kernels = "fused";
  int64_t max_steps = 0, data_rows = 256, batch_size = 8, max_length = 512, save_interval = 0;
  std::string resume;
  double lr = 1e-4;
  int dp = 2, tp = 2, pp = 2, vpp = 1;
  bool use_lora = false, bf16 = false, fp32 = false;
  LoraConfig lora{.r = 8, .lora_alpha = 32, .target_modules = "all-linear"};
  CLI::App app{"Dense Qwen3 recipe: dp=2, tp=2, pp=2 (8 processes)", "tp_recipe"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.add_option("--model", model_id, "model directory or hub id (default: models/qwen3-tiny)");
  app.add_option("--device", device, "cpu | cuda | npu (TWINKLE_DEVICE)");
  app.add_option("--dataset", dataset_id, "dataset id or file");
  app.add_option("--data-rows", data_rows, "data_slice = range(N) (indices past the end wrap around)");
  app.add_option("--max-steps", max_steps, "optimizer steps (>= 0; 0 = one epoch)");
  app.add_option("--batch-size", batch_size, "global batch size");
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
  app.add_option("--dp", dp, "data-parallel size (the recipe: 2)");
  app.add_option("--tp", tp, "tensor-parallel size (the recipe: 2)");
  app.add_option("--pp", pp, "pipeline-parallel size (the recipe: 2)");
  app.add_option("--vpp,--virtual-pipeline-stages", vpp,
                 "model chunks per pipeline rank (interleaved 1F1B; needs --pp > 1; default 1)");
  app.add_flag("--lora", use_lora, "train a LoRA adapter (add_adapter_to_model) instead of the full model");
  app.add_option("--lora-r", lora.r, "LoRA rank (with --lora)");
  app.add_option("--lora-alpha", lora.lora_alpha, "LoRA alpha: scaling alpha / r (with --lora)");
  app.add_option("--lora-targets", lora.target_modules, "all-linear or comma-separated module names (with --lora)");
  bool overlap_grad = false, overlap_param = false;
  app.add_flag("--overlap-grad-reduce", overlap_grad, "overlap the gradient dp reduce-scatter with the backward");
  app.add_flag("--overlap-param-gather", overlap_param, "overlap the parameter all-gather with the next forward");
  app.add_option("--kernels", kernels, "kernel set: fused | reference (plain loops, for debugging; default: fused)")
      ->check(CLI::IsMember({"fused", "reference"}));
  auto* bf16_flag = app.add_flag("--bf16", bf16, "bf16 mixed precision (fp32 master weights; cpu and cuda)");
  app.add_flag("--fp32", fp32, "fp32 everywhere (the default)")->excludes(bf16_flag);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // Every option through the API's own checks before anything starts.
  check_option(max_steps >= 0, "train", "max_steps", ">= 0 (0 = one epoch)", max_steps);
  check_option(save_interval >= 0, "train", "save_interval", ">= 0 (0 = none)", save_interval);
  check_option(!async_save || save_interval > 0, "train", "async_save", "with --save-interval N (the checkpoints it writes)",
               "set");
  check_option(data_rows >= 1, "recipe", "data_rows", ">= 1", data_rows);
  validate(OptimizerConfig{.lr = lr});
  validate(TemplateOptions{.model_id = model_id, .max_length = max_length});
  validate(DataLoaderOptions{.batch_size = batch_size, .dp_rank = 0, .dp_size = dp});
  if (use_lora) validate(lora);

  // 1. mesh and runtime
  DeviceMesh mesh = DeviceMesh::from_sizes({.dp = dp, .tp = tp, .pp = pp, .vpp = vpp, .device_type = device});
  twinkle::initialize({.mode = "local", .global_device_mesh = mesh});
  auto& log = get_logger();
  auto& ps = parallel_state();

  // 2. data: self-cognition through the Qwen3 chat template
  Dataset ds(DatasetMeta(dataset_id, DataSlice::range(data_rows)));
  ds.set_template("Template", {.model_id = model_id, .max_length = max_length});
  ds.map(SelfCognitionProcessor("twinkle大模型", "ModelScope社区"));
  ds.encode();
  DataLoader loader(ds, {.batch_size = batch_size});  // dp rank and size from the global mesh

  // 3. model, optimizer, schedule
  MegatronModel model(model_id, {.kernels = kernels,
                                 .mixed_precision = bf16 ? "bf16" : "fp32",
                                 .overlap_grad_reduce = overlap_grad,
                                 .overlap_param_gather = overlap_param});  // fused: kernelize_model logs each op it replaces
  if (use_lora) model.add_adapter_to_model("default", lora);  // only the adapter trains from here on
  model.set_optimizer("default", {.lr = lr});
  const int64_t steps = resolve_max_steps(max_steps, loader.size());  // 0 = one epoch
  model.set_lr_scheduler("default", {.lr_warmup_steps = 2, .lr_decay_steps = std::max<int64_t>(steps, 3)});
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
  double first_loss = 0, last_loss = 0, tok_s_sum = 0;
  while (step < steps) {
    for (auto& batch : loader) {
      model.forward_backward(batch);
      model.clip_grad_and_step();
      ++step;
      const auto& m = model.last_metrics();
      auto shown = model.calculate_metric(true);
      if (step == start_step + 1) first_loss = m.loss;
      last_loss = m.loss;
      tok_s_sum += m.tokens_per_s;
      if (rank0) {
        nlohmann::json loss = m.has_loss && std::isfinite(m.loss) ? nlohmann::json(m.loss) : nlohmann::json(nullptr);
        nlohmann::json j = {{"step", step}, {"loss", loss}, {"grad_norm", m.grad_norm}, {"lr", m.lr},
                            {"tokens", m.tokens}, {"tokens_per_s", m.tokens_per_s}, {"mfu", m.mfu},
                            {"step_time_s", m.step_time_s}};
        metrics << j.dump() << "\n";
        metrics.flush();
        if (tb) write_step_scalars(*tb, m, step);
        char line[256];
        std::snprintf(line, sizeof line, "%s %3lld/%lld  loss %.4f  grad_norm %.4f  lr %.3e  tokens/s %.0f  mfu %.3f",
                      progress_bar(step, steps).c_str(), static_cast<long long>(step), static_cast<long long>(steps),
                      m.loss, m.grad_norm, m.lr, m.tokens_per_s, m.mfu);
        log.info(line);
      }
      if (save_interval > 0)  // Twinkle's save(interval=N, save_optimizer=True): "" on the other steps
        model.save(std::nullopt, {.output_dir = output_dir, .interval = save_interval, .save_optimizer = true,
                                  .dataloader = &loader, .async_save = async_save});
      if (step >= steps) break;
    }
  }

  // 5. save (Hugging Face format) and summary
  // --async-save: the last interval checkpoint is committed (every rank's write done) before the final save
  if (model.save_pending()) {
    model.wait_for_save();
    log.info("the last asynchronous checkpoint is written");
  }
  std::filesystem::path out(output_dir);
  std::string dir = model.save("", {.output_dir = out.string()});
  if (rank0) {
    char buf[512];
    char trained[96] = "";  // no loss or speed to report when a resumed run had no step left
    if (step > start_step)
      std::snprintf(trained, sizeof trained, ", loss %.4f -> %.4f, mean %.0f tokens/s", first_loss, last_loss,
                    tok_s_sum / static_cast<double>(step - start_step));
    std::snprintf(buf, sizeof buf, "summary: %s%s, %s %s, metrics %s",
                  recipe_metrics::steps_phrase(start_step, step).c_str(), trained,
                  use_lora ? "PEFT adapter (adapter_config.json, adapter_model.safetensors)"
                           : "checkpoint (config.json, safetensors, tokenizer files)",
                  dir.c_str(), (out / "metrics.jsonl").string().c_str());
    log.info(buf);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, recipe); }
