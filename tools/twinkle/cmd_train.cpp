// `twinkle train`: full-parameter training of a Qwen3 model on any dp/tp/pp layout.
//
//   twinkle train --model DIR --dataset FILE.jsonl --batch-size 8 --max-steps 10 --lr 1e-4 ...
//   twinkle-run --nproc_per_node=8 build/bin/twinkle train --tp 2 --pp 2 --dp 2 ...
//
// The dataset is either pre-tokenized JSONL rows {"input_ids": [...], "labels": [...]}
// (labels optional: then equal to input_ids) or a message / self-cognition dataset
// encoded with --template. Each step appends one JSON line to --metrics-file (a loss that
// is undefined — no labelled token — or non-finite is null); the final weights are saved to
// --output-dir in Hugging Face format. Every option is checked by the validate() of its
// option set (the C++ API's checks) before anything is loaded; --max-steps 0 (the default)
// trains one epoch. --report-memory prints every rank's peak resident set over the training
// steps (VmHWM reset once the model and optimizer are built), the figure `twinkle plan` predicts.
//
// Evaluation (Megatron's, twinkle/train/evaluate.h): with a validation set — --val-dataset (any --dataset
// spec, mixtures included, concatenated in order as ms-swift loads --val_dataset) or --split-dataset-ratio R
// (ms-swift's seeded split of every --dataset, twinkle/data/train_val_split.h) — every --eval-interval steps
// and after the last step, --eval-iters global batches of --batch-size validation rows go through
// MegatronModel::forward_only; the token-weighted mean loss and its perplexity are logged as Megatron's
// "validation loss at iteration N" line, appended to --metrics-file as a record
// {"step", "eval_loss", "eval_ppl", "eval_label_tokens", "eval_iters", "eval_rows", "eval_first_row",
// "eval_time_s"} (no "loss" key: a step record has one) and written to --tensorboard-dir as
// "lm loss validation" / "lm loss validation ppl".
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "command.h"
#include "dataset_args.h"
#include "metrics_file.h"
#include "twinkle/data/dataloader.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/preprocessor.h"
#include "twinkle/data/hub.h"
#include "twinkle/data/mixture.h"
#include "twinkle/data/pretokenized.h"
#include "twinkle/core/option_check.h"
#include "twinkle/core/peak_rss.h"
#include "twinkle/io/model_config.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/io/tensorboard.h"
#include "twinkle/train/tensorboard_log.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/train/checkpoint_dir.h"
#include "twinkle/train/evaluate.h"
#include "twinkle/parallel/pipeline_layout.h"
#include "twinkle/train/megatron_model.h"

namespace {

using json = nlohmann::json;

// JSON number, or null for a value that is undefined (no labelled token) or non-finite.
json num_or_null(double v, bool defined = true) { return defined && std::isfinite(v) ? json(v) : json(nullptr); }

int train_main(int argc, char** argv) {
  CLI::App app{"Train a Qwen3 model (full parameters) on a dp/tp/pp layout", "twinkle train"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  std::string model, output_dir = "output/train", metrics_file, tensorboard_dir;
  twinkle::cli::DatasetArgs data;  // --dataset and the template / slice options (dataset_args.h, shared with eval)
  std::string lr_style = "constant", device = "cpu", on_nonfinite = "error";
  int64_t batch_size = 8, max_steps = 0, mbs = 0, warmup = 0, decay = 0;
  double lr = 1e-4, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, clip = 1.0, min_lr = 0;
  uint64_t seed = 42;
  int tp = 1, pp = 1, dp = 0, cp = 1, ep = 1, etp = 1;
  std::string cp_comm_type = "p2p";
  std::string moe_aux_type = "global";
  std::optional<double> moe_aux_coeff;
  double moe_z_coeff = 0.0;
  std::string dump_grads;
  std::string kernels = "fused";
  std::string pipeline_split = "balanced";
  std::string recompute = "full";
  bool bf16 = false, fp32 = false;
  std::string save_dtype;
  std::vector<int64_t> layers_per_stage;
  int vpp = 1;
  int64_t layers_per_vstage = 0;
  std::string pipeline_layout;
  bool sp = false, dist_opt = true, shuffle = false, packing = false, no_save = false,
       report_memory = false;
  bool drop_last = false;
  // LoRA (model/lora_config.h; PEFT's LoraConfig): on when --lora-r > 0 or --adapter is given.
  twinkle::LoraConfig lora;
  lora.r = 0;
  lora.lora_alpha = 32;
  bool merge_lora = false;
  std::string adapter_dir, save_init_adapter;
  // Checkpoints for resuming (train/megatron_model.h save / resume_from_checkpoint).
  std::string resume;
  int64_t save_interval = 0, keep_last = 0;
  bool save_optimizer = false;
  std::string save_format = "sharded";
  bool async_save = false;
  app.add_option("--model", model, "model directory or hub id (config.json [+ safetensors])")->required();
  twinkle::cli::add_dataset_option(app, data)->required();
  app.add_option("--batch-size", batch_size, "global batch size (rows per step, >= 1, divisible by dp)");
  app.add_option("--micro-batch-size", mbs, "rows per micro-batch (>= 0; 0 = min(2, rows of the rank))");
  app.add_option("--max-steps", max_steps, "optimizer steps (>= 0; 0 = one epoch)");
  app.add_option("--lr", lr, "learning rate (finite, >= 0)");
  app.add_option("--min-lr", min_lr, "minimum learning rate of the decay (0 <= min-lr <= lr)");
  app.add_option("--lr-warmup-steps", warmup, "linear warm-up steps from 0 (< decay steps)");
  app.add_option("--lr-decay-steps", decay, "decay steps (0 = the run's steps when a decay style or warm-up is set)");
  app.add_option("--lr-decay-style", lr_style, "constant | cosine | linear");
  app.add_option("--weight-decay", wd, "AdamW weight decay (>= 0; not applied to biases and 1-D params)");
  app.add_option("--adam-beta1", b1, "AdamW beta1, in [0, 1)");
  app.add_option("--adam-beta2", b2, "AdamW beta2, in [0, 1)");
  app.add_option("--adam-eps", eps, "AdamW eps (finite, > 0)");
  app.add_option("--clip-grad", clip, "max global grad norm (finite; <= 0: no clipping)");
  app.add_option("--on-nonfinite", on_nonfinite,
                 "a step with a NaN/inf loss or grad norm: error (stop, weights untouched) | skip (no update, counted)");
  app.add_option("--seed", seed, "seed of the random init (when the model has no weights) and shuffling");
  app.add_option("--output-dir", output_dir, "where the final Hugging Face checkpoint is written");
  // Evaluation (twinkle/train/evaluate.h; Megatron's --eval-interval / --eval-iters, ms-swift's
  // --val_dataset / --split_dataset_ratio)
  std::vector<std::string> val_dataset;
  double split_ratio = 0;
  int64_t eval_interval = 0, eval_iters = 100;
  auto* val_opt = app.add_option("--val-dataset", val_dataset,
                                 "validation set: any --dataset spec (file, directory, hub id, ID#N, several = "
                                 "concatenated in order, ms-swift's --val_dataset; default: none)");
  auto* split_opt = app.add_option("--split-dataset-ratio", split_ratio,
                                   "hold out this share of every --dataset as the validation set, in (0, 1) "
                                   "(ms-swift's --split_dataset_ratio: max(int(rows * R), 1) rows by datasets' "
                                   "train_test_split seeded from np.random.RandomState(--seed); 0 = none)");
  val_opt->excludes(split_opt);
  auto* interval_opt = app.add_option("--eval-interval", eval_interval,
                                      "evaluate the validation set every N steps and after the last one (Megatron's "
                                      "--eval-interval; 0 = after the last step only)");
  auto* iters_opt = app.add_option("--eval-iters", eval_iters,
                                   "global batches of --batch-size validation rows per evaluation, rows in order, "
                                   "continuing across evaluations and wrapping at the end (Megatron's --eval-iters; "
                                   "0 = no evaluation)");
  app.add_option("--tensorboard-dir", tensorboard_dir,
                 "write TensorBoard event files of every step's metrics here (rank 0; Megatron's --tensorboard-dir: "
                 "'lm loss', 'grad-norm', 'learning-rate', ...; a resumed run starts a new file that supersedes the "
                 "old ones' steps after the checkpoint; default: none)");
  app.add_option("--metrics-file", metrics_file, "JSONL file that gets one line of metrics per step (default: none); rewritten by a new run, kept up to the checkpoint's step by --resume");
  app.add_option("--tp", tp, "tensor-parallel size");
  app.add_option("--pp", pp, "pipeline-parallel size");
  app.add_option("--virtual-pipeline-model-parallel-size,--virtual-pipeline-stages", vpp,
                 "model chunks per pipeline rank (Megatron's interleaved 1F1B; needs --pp > 1; micro-batches of a "
                 "step padded with empty ones to a multiple of pp; default 1)");
  app.add_option("--pipeline-model-parallel-layout", pipeline_layout,
                 "Megatron's explicit layout, one stage per '|' in virtual-stage order (E embedding, t layer, L loss; "
                 "t*N, (...)*N), e.g. \"Et*3|(tt|)*2tL\"; sets the layers of each (virtual) stage; default: none)");
  app.add_option("--num-layers-per-virtual-pipeline-stage", layers_per_vstage,
                 "Megatron's other spelling: vpp = num_hidden_layers / (pp * this); must divide");
  app.add_option("--dp", dp, "data-parallel size (0 = world / (tp*pp*cp))");
  app.add_option("--pipeline-split", pipeline_split,
                 "balanced (stages of equal matmul FLOPs, lm head on the last; default) | even (Megatron's default)");
  app.add_option("--recompute-granularity", recompute,
                 "activation recompute: full (every layer from its input; Twinkle's default) | selective (core attention) | none");
  app.add_option("--layers-per-stage", layers_per_stage, "decoder layers of each pipeline stage (overrides --pipeline-split)")
      ->delimiter(',');
  app.add_option("--cp", cp, "context-parallel size (every sequence split over cp ranks, load-balanced)");
  app.add_option("--cp-comm-type", cp_comm_type, "p2p (ring attention) | a2a (Ulysses; heads divisible by cp*tp)");
  app.add_option("--ep", ep, "expert-parallel size (Qwen3-MoE)");
  app.add_option("--etp", etp, "expert tensor-parallel size (Qwen3-MoE; 1 as in Twinkle)");
  app.add_option("--moe-aux-loss-coeff", moe_aux_coeff,
                 "load-balancing loss coefficient (default: config's router_aux_loss_coef when output_router_logits, else 0)");
  app.add_option("--moe-aux-loss-type", moe_aux_type,
                 "global (transformers' load_balancing_loss_func, pp = 1) | per_layer (Megatron's)");
  app.add_option("--moe-z-loss-coeff", moe_z_coeff, "router z-loss coefficient (default 0)");
  app.add_flag("--sequence-parallel", sp, "sequence parallelism in the tp regions");
  app.add_option("--use-distributed-optimizer", dist_opt, "ZeRO-1 optimizer sharding over dp");
  bool overlap_grad = false, overlap_param = false;
  int64_t bucket_size = 0;
  app.add_flag("--overlap-grad-reduce", overlap_grad,
               "start each gradient bucket's dp reduce-scatter / all-reduce in the backward (Megatron; default off)");
  app.add_flag("--overlap-param-gather", overlap_param,
               "overlap the ZeRO-1 parameter all-gather with the next forward (Megatron; default off)");
  app.add_option("--bucket-size", bucket_size,
                 "gradient bucket size in elements (Megatron's bucket_size; 0 = 4 MiB = 1,048,576)");
  app.add_option("--device", device, "cpu | cuda | npu");
  twinkle::cli::add_dataset_options(app, data);
  app.add_flag("--shuffle", shuffle, "shuffle rows each epoch");
  app.add_flag("--drop-last", drop_last, "drop a final partial batch of each epoch (for every layout alike)");
  app.add_flag("--packing", packing, "padding-free packed micro-batches");
  app.add_option("--kernels", kernels, "kernel set: fused | reference (plain loops, for debugging; default: fused)")
      ->check(CLI::IsMember({"fused", "reference"}));
  auto* bf16_flag = app.add_flag("--bf16", bf16,
                                 "bf16 mixed precision: bf16 GEMM inputs, fp32 accumulation, fp32 master weights, grads "
                                 "and Adam state (Megatron's; Twinkle's MegatronModel default); cpu and cuda");
  app.add_flag("--fp32", fp32, "fp32 everywhere (the default)")->excludes(bf16_flag);
  app.add_option("--save-dtype", save_dtype,
                 "dtype of the saved HF weights and config.json torch_dtype: float32 | bfloat16 | float16 (default: "
                 "the dtype the model was loaded in)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_flag("--no-save", no_save, "do not save the final checkpoint");
  app.add_flag("--report-memory", report_memory,
               "print each rank's peak resident set over the steps (Linux VmHWM after the model is built; "
               "what twinkle plan predicts)");
  app.add_option("--dump-grads", dump_grads, "write the step-1 gradients (HF names, f32) to this safetensors file (dp=1 only; default: none)");
  app.add_option("--lora-r", lora.r, "LoRA rank (> 0 trains a LoRA adapter instead of the full model; default 0 = full)");
  app.add_option("--lora-alpha", lora.lora_alpha, "LoRA alpha (scaling alpha/r, alpha/sqrt(r) with --lora-rslora; default 32)");
  app.add_option("--lora-targets", lora.target_modules, "all-linear, or comma-separated module names / suffixes (q_proj,v_proj)");
  app.add_option("--lora-dropout", lora.lora_dropout, "dropout on the adapter input in training, in [0, 1) (default 0)");
  app.add_flag("--lora-rslora", lora.use_rslora, "rank-stabilised scaling alpha/sqrt(r)");
  app.add_option("--lora-init", lora.init_lora_weights, "true (A kaiming-uniform, B zeros) | gaussian | false (B random too)");
  app.add_flag("--merge-lora", merge_lora, "save the merged full checkpoint instead of the PEFT adapter");
  app.add_option("--adapter", adapter_dir, "continue training the PEFT adapter in this directory (its config wins over --lora-*; default: none)");
  app.add_option("--save-init-adapter", save_init_adapter, "also save the adapter before the first step to this directory (tests; default: none)");
  app.add_option("--resume", resume,
                 "continue from this checkpoint (or an output dir whose 'latest' names one) to the same "
                 "--max-steps total; auto = the newest complete checkpoint in --output-dir, or a fresh start when "
                 "there is none (twinkle-run --max-restarts; default: none)");
  app.add_option("--save-interval", save_interval,
                 "every N steps save OUTPUT_DIR/checkpoint-step-<step> (0 = none; Twinkle's interval)");
  app.add_flag("--save-optimizer", save_optimizer,
               "the interval checkpoints also hold the optimizer, scheduler, step and data position (for --resume)");
  app.add_option("--keep-last", keep_last, "keep only the newest K interval checkpoints (0 = all)");
  app.add_option("--save-format", save_format,
                 "how --save-optimizer checkpoints hold the training state: sharded (default: each rank writes its "
                 "own slices plus an index, no Hugging Face weights; `twinkle export --from-checkpoint` writes them) "
                 "| gathered (gathered to rank 0: HF weights and full state tensors)");
  app.add_flag("--async-save", async_save,
               "write the sharded --save-optimizer checkpoints in a background thread from a copy of each rank's "
               "slices while training goes on (committed when every rank is done; the next save and the end of the "
               "run wait for it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // ---- every option set, checked before anything is loaded (the same checks as the API) ----
  twinkle::OptimizerConfig oc;
  oc.lr = lr;
  oc.weight_decay = wd;
  oc.adam_beta1 = b1;
  oc.adam_beta2 = b2;
  oc.adam_eps = eps;
  oc.clip_grad = clip;
  oc.use_distributed_optimizer = dist_opt;
  twinkle::validate(oc);
  const bool use_sched = lr_style != "constant" || warmup > 0 || decay > 0;
  twinkle::LRSchedulerConfig sc;
  sc.lr_warmup_steps = warmup;
  sc.lr_decay_steps = decay;
  sc.lr_decay_style = lr_style;
  sc.min_lr = min_lr;
  sc.max_lr = lr;
  twinkle::validate(sc);
  twinkle::check_option(max_steps >= 0, "train", "max_steps", ">= 0 (0 = one epoch)", max_steps);
  twinkle::check_option(save_interval >= 0, "train", "save_interval", ">= 0 (0 = no interval checkpoints)", save_interval);
  twinkle::check_option(keep_last >= 0, "train", "keep_last", ">= 0 (0 = keep all)", keep_last);
  twinkle::check_option(!save_optimizer || save_interval > 0, "train", "save_optimizer",
                        "with --save-interval N (the checkpoints that hold the optimizer)", "set");
  twinkle::check_option(save_format == "sharded" || save_format == "gathered", "train", "save_format",
                        "sharded or gathered", save_format);
  twinkle::check_option(!async_save || (save_optimizer && save_format == "sharded"), "train", "async_save",
                        "with --save-interval N --save-optimizer and --save-format sharded", "set");
  twinkle::check_option(keep_last == 0 || save_optimizer, "train", "keep_last",
                        "with --save-interval N --save-optimizer (the checkpoints it prunes)", keep_last);
  const twinkle::TemplateOptions to = twinkle::cli::checked_template_options(data, model);
  twinkle::MegatronModelOptions mo;
  mo.micro_batch_size = mbs;
  mo.seed = seed;
  mo.packing = packing;
  mo.on_nonfinite = on_nonfinite;
  mo.moe_aux_loss_type = moe_aux_type;
  mo.moe_aux_loss_coeff = moe_aux_coeff;
  mo.moe_z_loss_coeff = moe_z_coeff;
  mo.cp_comm_type = cp_comm_type;
  mo.kernels = kernels;
  mo.pipeline_split = pipeline_split;
  mo.recompute_granularity = recompute;
  mo.mixed_precision = bf16 ? "bf16" : "fp32";
  // refused before the runtime touches a device (Qwen3Model refuses it too, for the API)
  twinkle::kernels::check_mixed_precision_on(device, mo.mixed_precision);
  mo.layers_per_stage = layers_per_stage;
  if (!pipeline_layout.empty()) {
    twinkle::check(layers_per_stage.empty(), "--pipeline-model-parallel-layout and --layers-per-stage both set the split");
    mo.layers_per_stage = twinkle::parallel::parse_pipeline_layout(pipeline_layout);
    // Megatron: the layout's stage count gives vpp = stages / pp (unless vpp is set another way)
    const int stages = static_cast<int>(mo.layers_per_stage.size());
    twinkle::check(stages % pp == 0, "--pipeline-model-parallel-layout has " + std::to_string(stages) +
                                         " stages, not a multiple of --pp " + std::to_string(pp));
    if (vpp == 1 && layers_per_vstage == 0) vpp = stages / pp;
  }
  mo.overlap_grad_reduce = overlap_grad;
  mo.overlap_param_gather = overlap_param;
  mo.bucket_size = bucket_size;
  twinkle::validate(mo);
  const bool use_lora = lora.r > 0 || !adapter_dir.empty();
  if (lora.r > 0) twinkle::validate(lora);
  else twinkle::check_option(lora.r >= 0, "lora", "lora_r", ">= 0 (0 = full fine-tuning)", lora.r);
  twinkle::DataLoaderOptions lo;
  lo.batch_size = batch_size;
  lo.shuffle = shuffle;
  lo.seed = seed;
  lo.drop_last = drop_last;
  twinkle::validate(lo);
  twinkle::check_option(eval_interval >= 0, "train", "eval_interval", ">= 0 (0 = after the last step only)", eval_interval);
  twinkle::check_option(eval_iters >= 0, "train", "eval_iters", ">= 0 (0 = no evaluation)", eval_iters);
  if (split_ratio != 0)
    twinkle::check_option(split_ratio > 0 && split_ratio < 1, "train", "split_dataset_ratio", "in (0, 1) (0 = none)",
                          split_ratio);
  const bool has_val = !val_dataset.empty() || split_ratio > 0;
  for (const auto* o : {interval_opt, iters_opt})
    twinkle::check(has_val || o->count() == 0,
                   o->get_name() + " evaluates a validation set: give --val-dataset or --split-dataset-ratio");
  for (const auto& d : val_dataset) (void)twinkle::DatasetSpec::parse(d, "--val-dataset");
  const bool do_eval = has_val && eval_iters > 0;

  const int world = twinkle::world_size();
  if (dp == 0) dp = std::max(1, world / std::max(1, tp * pp * cp));
  twinkle::MeshSizes ms;
  ms.dp = dp;
  ms.tp = tp;
  ms.pp = pp;
  if (layers_per_vstage > 0) {
    // Megatron's arguments.py: vpp = (num_layers // pp) // num_layers_per_virtual_pipeline_stage
    const twinkle::ModelConfig c =
        twinkle::load_model_config((std::filesystem::path(twinkle::resolve_model_dir(model)) / "config.json").string());
    twinkle::check(c.num_hidden_layers % (static_cast<int64_t>(pp) * layers_per_vstage) == 0,
                   "--num-layers-per-virtual-pipeline-stage " + std::to_string(layers_per_vstage) + " x --pp " +
                       std::to_string(pp) + " does not divide num_hidden_layers " + std::to_string(c.num_hidden_layers));
    vpp = static_cast<int>(c.num_hidden_layers / (pp * layers_per_vstage));
  }
  ms.vpp = vpp;
  ms.ep = ep;
  ms.etp = etp;
  ms.cp = cp;
  ms.device_type = device;
  ms.sequence_parallel = sp;
  twinkle::InitOptions io;
  io.global_device_mesh = twinkle::DeviceMesh::from_sizes(ms);
  io.seed = seed;
  twinkle::initialize(io);
  auto& ps = twinkle::parallel_state();
  auto& log = twinkle::get_logger();
  lo.dp_rank = ps.coord.dp;
  lo.dp_size = ps.mesh.dp_size();
  twinkle::validate(lo);

  // ---- data ----
  const std::string config_path = (std::filesystem::path(twinkle::resolve_model_dir(model)) / "config.json").string();
  const twinkle::ModelConfig model_cfg = twinkle::load_model_config(config_path);
  data.mix_seed = seed;
  twinkle::cli::TrainVal tv =
      twinkle::cli::load_encoded_train_val(app, data, to, model_cfg, config_path, split_ratio, seed);
  twinkle::Dataset& ds = tv.train;
  if (!val_dataset.empty()) {  // ms-swift loads --val_dataset unshuffled, concatenated in order
    twinkle::cli::DatasetArgs va = data;
    va.dataset = val_dataset;
    va.dataset_mix = "concat";
    va.interleave_prob.clear();
    va.data_slice.clear();  // --data-slice selects training rows
    tv.val.emplace(twinkle::cli::load_encoded_dataset(app, va, to, model_cfg, config_path));
  }
  const std::vector<twinkle::EncodedRow> no_rows;
  const std::vector<twinkle::EncodedRow>& val_rows = tv.val ? tv.val->encoded() : no_rows;
  if (tv.val) {
    log.info("validation set: " + std::to_string(val_rows.size()) + " rows (" + tv.val->id() + ")" +
             (do_eval ? ", " + std::to_string(eval_iters) + " batches of " + std::to_string(batch_size) +
                            " rows per evaluation" + (eval_interval > 0 ? ", every " + std::to_string(eval_interval) +
                                                                              " steps and after the last"
                                                                        : ", after the last step")
                      : ", --eval-iters 0: not evaluated"));
    if (do_eval && eval_iters * batch_size > static_cast<int64_t>(val_rows.size()))
      log.warning("--eval-iters " + std::to_string(eval_iters) + " x --batch-size " + std::to_string(batch_size) +
                  " exceeds the validation set's " + std::to_string(val_rows.size()) +
                  " rows: an evaluation repeats rows (Megatron's cyclic validation iterator)");
  }
  const int64_t n_rows = static_cast<int64_t>(ds.encoded().size());
  log.info("dataset: " + std::to_string(n_rows) + " rows" +
           (ds.bad_rows() ? " (" + std::to_string(ds.bad_rows()) + " bad rows skipped)" : std::string()));
  twinkle::DataLoader loader(ds, lo);
  const int64_t steps = twinkle::resolve_max_steps(max_steps, loader.size());

  // ---- model ----
  twinkle::MegatronModel m(model, mo);
  if (!adapter_dir.empty()) m.load_adapter(adapter_dir);
  else if (use_lora) m.add_adapter_to_model("default", lora);
  m.set_optimizer("default", oc);
  if (!save_init_adapter.empty()) {
    std::filesystem::path od(save_init_adapter);
    m.save(od.filename().string(), {od.parent_path().empty() ? "." : od.parent_path().string()});
  }
  if (use_sched) {
    // --lr-decay-steps 0: the run's steps, as Megatron's lr_decay_iters defaults to train_iters, and
    // its OptimizerParamScheduler asserts warm-up < decay (a warm-up past the run's end used to stretch
    // the decay silently, so the run never reached --lr)
    if (sc.lr_decay_steps == 0) {
      twinkle::check_option(warmup < steps, "lr scheduler", "lr_warmup_steps",
                            "smaller than the run's " + std::to_string(steps) +
                                " steps (lr_decay_steps 0 = the run's steps: --max-steps, or one epoch)",
                            warmup);
      sc.lr_decay_steps = steps;
    }
    m.set_lr_scheduler("default", sc);
  }
  log.info(twinkle::get_device_placement());
  log.info("\n" + m.get_train_configs());

  const bool rank0 = ps.global_rank == 0;
  int64_t step = 0;
  if (resume == "auto") {  // the newest complete checkpoint of the output dir, none = a fresh start
    const std::string found = twinkle::find_resume_checkpoint(output_dir);
    log.info(found.empty() ? "resume auto: no checkpoint in " + output_dir + ", starting fresh"
                           : "resume auto: resuming from " + found);
    resume = found;
  }
  if (!resume.empty()) {
    const twinkle::ResumeState rs = m.resume_from_checkpoint(resume, false, &loader);
    step = rs.cur_step;
    log.info("resuming at step " + std::to_string(step) + " of " + std::to_string(steps) + " from " + rs.dir +
             " (epoch " + std::to_string(rs.dataloader.epoch) + ", batch " + std::to_string(rs.dataloader.next_batch) +
             ", " + std::to_string(rs.dataloader.consumed_samples) + " samples consumed)");
    if (step >= steps && rank0)
      log.warning("nothing to train: the checkpoint is at step " + std::to_string(step) + " and --max-steps gives " +
                  std::to_string(steps) + " steps; raise --max-steps to continue training");
  }
  // A new run rewrites the metrics file; a resumed one keeps its steps up to the checkpoint.
  std::ofstream metrics;
  if (rank0 && !metrics_file.empty()) {
    int64_t kept = 0;
    metrics = twinkle::cli::open_metrics_file(metrics_file, step, &kept);
    if (step > 0)
      log.info("metrics: kept the " + std::to_string(kept) + " lines of steps 1.." + std::to_string(step) + " in " +
               metrics_file + ", appending");
  }
  // TensorBoard: a new event file per run; a resumed one marks its first step (SessionLog START) so that
  // TensorBoard drops the steps after the checkpoint that the earlier run had logged
  std::unique_ptr<twinkle::TensorBoardWriter> tb;
  if (rank0 && !tensorboard_dir.empty()) {
    tb = std::make_unique<twinkle::TensorBoardWriter>(tensorboard_dir, step > 0 ? step + 1 : -1);
    log.info("tensorboard: " + tb->path());
  }
  // One evaluation after step `at` (Megatron's evaluate_and_print_results): every rank runs it, rank 0 logs.
  int64_t last_eval_step = -1;
  auto run_eval = [&](int64_t at) {
    const auto t0 = std::chrono::steady_clock::now();
    const twinkle::EvalResult r =
        twinkle::evaluate(m, val_rows, twinkle::validation_first_row(at, eval_interval, eval_iters, batch_size),
                          eval_iters, batch_size);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_eval_step = at;
    if (!rank0) return;
    json j = {{"step", at},
              {"eval_loss", num_or_null(r.lm_loss, r.has_loss)},
              {"eval_ppl", num_or_null(r.ppl, r.has_loss)},
              {"eval_label_tokens", r.label_tokens},
              {"eval_iters", r.iters},
              {"eval_rows", r.rows},
              {"eval_first_row", r.first_row},
              {"eval_time_s", secs}};
    if (metrics.is_open()) {
      metrics << j.dump() << "\n";
      metrics.flush();
    }
    if (tb) twinkle::write_eval_scalars(*tb, r, at);
    log.info(twinkle::validation_line(r, at));
  };
  const int64_t first_step = step;
  twinkle::LocalBatch batch;
  int64_t rss_at_start = 0;
  if (report_memory) {  // the steps' memory, not the init's transients
    twinkle::reset_peak_rss();
    rss_at_start = twinkle::current_rss_bytes();
  }
  while (step < steps) {
    if (!loader.next(batch)) {
      loader.next_epoch();
      twinkle::check(loader.next(batch), "the dataset yields no batch of " + std::to_string(batch_size) + " rows");
    }
    m.forward_backward(batch);
    if (step == 0 && !dump_grads.empty()) {
      twinkle::check(ps.mesh.dp_size() == 1, "--dump-grads needs dp = 1");
      auto grads = use_lora ? m.model().gather_adapter_state_dict(/*grads=*/true)
                            : m.model().gather_state_dict(/*grads=*/true);
      if (rank0) twinkle::save_safetensors(dump_grads, grads);
    }
    m.clip_grad_and_step();
    ++step;
    const auto& mt = m.last_metrics();
    if (rank0) {
      json j = {{"step", step},
                {"loss", num_or_null(mt.loss, mt.has_loss)},
                {"grad_norm", num_or_null(mt.grad_norm)},
                {"lr", mt.lr},
                {"tokens", mt.tokens},
                {"label_tokens", mt.label_tokens},
                {"tokens_per_s", mt.tokens_per_s},
                {"mfu", mt.mfu},
                {"step_time_s", mt.step_time_s},
                {"peak_memory_bytes", mt.peak_memory_bytes}};  // rank 0's (StepMetrics::peak_memory_bytes)
      if (mt.skipped) j["skipped"] = true;
      if (mt.moe) {
        j["lm_loss"] = num_or_null(mt.lm_loss, mt.has_loss);
        j["aux_loss"] = mt.aux_loss;
        j["z_loss"] = mt.z_loss;
        j["expert_load_max"] = mt.expert_load_max;
        j["expert_load_min"] = mt.expert_load_min;
        j["expert_grad_norm"] = num_or_null(mt.expert_grad_norm);
      }
      if (metrics.is_open()) {
        metrics << j.dump() << "\n";
        metrics.flush();
      }
      if (tb) twinkle::write_step_scalars(*tb, mt, step);  // Megatron's tag names (train/tensorboard_log.h)
      char loss[64];
      if (!mt.has_loss) std::snprintf(loss, sizeof loss, "no labelled tokens");
      else if (!std::isfinite(mt.loss)) std::snprintf(loss, sizeof loss, "%s", std::isnan(mt.loss) ? "nan" : "inf");
      else std::snprintf(loss, sizeof loss, "%.6f", mt.loss);
      char line[320];
      std::snprintf(line, sizeof line, "step %lld/%lld  loss %s  grad_norm %.6f  lr %.3e  tokens/s %.1f  mfu %.3f%s",
                    static_cast<long long>(step), static_cast<long long>(steps), loss, mt.grad_norm, mt.lr,
                    mt.tokens_per_s, mt.mfu, mt.skipped ? "  (update skipped: non-finite)" : "");
      log.info(line);
    }
    // Megatron's order: the step's log, then the evaluation, then the interval checkpoint
    if (do_eval && eval_interval > 0 && step % eval_interval == 0) run_eval(step);
    if (save_interval > 0) {
      twinkle::SaveOptions cs;
      cs.output_dir = output_dir;
      cs.interval = save_interval;
      cs.save_optimizer = save_optimizer;
      cs.keep_last = keep_last;
      cs.merge_lora = merge_lora;
      cs.dtype = save_dtype;
      cs.dataloader = &loader;
      cs.save_format = save_format;
      cs.async_save = async_save;
      // TWINKLE_SAVE_STATS=1 (bench/ckpt_save_bench.py): each rank reports the save's wall time and
      // its peak RSS during the save (the kernel's high-water mark reset just before, proc(5) clear_refs 5).
      const bool stats = std::getenv("TWINKLE_SAVE_STATS") && step % save_interval == 0;
      auto status_field = [](const char* key) {
        std::ifstream st("/proc/self/status");
        std::string line, v = "?";
        while (std::getline(st, line))
          if (line.rfind(key, 0) == 0) v = line.substr(std::string(key).size());
        return v;
      };
      const std::string rss_before = stats ? status_field("VmRSS:") : "";
      if (stats) std::ofstream("/proc/self/clear_refs") << "5";
      const auto t0 = std::chrono::steady_clock::now();
      const std::string dir = m.save(std::nullopt, cs);  // "" when step % interval != 0
      if (stats) {
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "save stats: rank %d format %s wall %.3f s RSS before %s peak RSS during save %s\n",
                     twinkle::parallel_state().global_rank, save_format.c_str(), wall, rss_before.c_str(),
                     status_field("VmHWM:").c_str());
      }
      if (!dir.empty())
        log.info((async_save ? "saving checkpoint " : "saved checkpoint ") + dir +
                 (save_optimizer ? " (with the optimizer state)" : "") +
                 (async_save ? " in the background (committed once every rank has written it)" : ""));
    }
  }
  // After the last step (Megatron's do_valid after training), unless it was just evaluated or this run
  // trained nothing (resumed at the end: the earlier run evaluated there)
  if (do_eval && step > first_step && last_eval_step != step) run_eval(step);
  if (m.save_pending()) {  // the last asynchronous save is committed before the run ends
    const auto t0 = std::chrono::steady_clock::now();
    m.wait_for_save();
    if (std::getenv("TWINKLE_SAVE_STATS"))
      std::fprintf(stderr, "save stats: rank %d waited %.3f s at the end for the asynchronous save\n",
                   twinkle::parallel_state().global_rank,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (report_memory) {  // every rank, one whole line each (before saving: the checkpoint gathers)
    std::printf("memory: rank %d (tp %d pp %d dp %d cp %d ep %d): step peak RSS %.1f MiB over %lld steps "
                "(resident before the first step: %.1f MiB)\n",
                ps.global_rank, ps.coord.tp, ps.coord.pp, ps.coord.dp, ps.coord.cp, ps.coord.ep,
                static_cast<double>(twinkle::step_peak_rss_bytes()) / 1048576.0, static_cast<long long>(step),
                static_cast<double>(rss_at_start) / 1048576.0);
    std::fflush(stdout);
  }
  const auto& last = m.last_metrics();
  log.info("summary: " + std::to_string(step) + " steps, " + std::to_string(last.skipped_steps) +
           " skipped (non-finite), " + std::to_string(n_rows) + " rows, " + std::to_string(ds.bad_rows()) +
           " bad rows skipped");
  if (!no_save) {
    std::filesystem::path od(output_dir);
    twinkle::SaveOptions so;
    so.output_dir = od.parent_path().empty() ? "." : od.parent_path().string();
    so.merge_lora = merge_lora;
    so.dtype = save_dtype;
    std::string dir = m.save(od.filename().string(), so);
    log.info(std::string(use_lora && !merge_lora ? "saved PEFT adapter to " : "saved Hugging Face checkpoint to ") + dir);
  }
  return 0;
}

int train_entry(int argc, char** argv) { return twinkle::run_main(argc, argv, train_main); }

}  // namespace

TWINKLE_REGISTER_COMMAND("train", "train a Qwen3 model (full parameters or LoRA; any dp/tp/pp layout)", train_entry);
