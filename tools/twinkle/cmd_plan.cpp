// `twinkle plan` — per-rank memory and FLOPs of a layout before launching it (train/plan.h).
//
//   twinkle plan --model DIR --tp 2 --pp 2 --dp 2 [--cp 1] [--ep 1] [--etp 1] [--sequence-parallel]
//                [--recompute full|selective|none] --micro-batch-size 1 --seq-length 4096
//                [--global-batch-size N] [--lora-r R] [--bf16 | --fp32] [--async-save] [--memory-per-rank GiB] [--json]
//
// Prints one row per pipeline stage (every tp / cp / dp rank of a stage holds the same): GiB of
// parameters, gradients, optimizer state, activations, workspace, runtime and the peak, and the
// TFLOPs the rank computes per step; the last line is the per-rank peak. Under cp > 1 rows are
// planned padded as training pads them (a multiple of 2·cp, 2·cp·tp with SP; a line says so). A MoE rank's expert
// FLOPs are those of balanced routing (its experts run its own tokens x top_k rows; the job total,
// every token through top_k experts, holds for any routing; bench/layout_bench prints the rows
// the experts of each rank really ran). With --memory-per-rank,
// a stage above it is reported with its biggest item and the exit code is 1. --bf16 plans the
// mixed-precision run (`twinkle train --bf16`): fp32 master weights, grads, Adam state and
// activations, plus the bf16 kernels' workspace (train/plan.h). --async-save adds the column "async GiB":
// the asynchronous sharded save's staging copy of each rank's own slices (`twinkle train --async-save`;
// master weight and both AdamW moments of its ZeRO-1 shard), kept from the first asynchronous save on,
// and so part of the peak. A layout training would refuse
// (etp·ep·pp not dividing the world, experts or moe_intermediate_size not divisible, ...) fails
// with training's message.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "twinkle/parallel/pipeline_layout.h"
#include "twinkle/data/hub.h"
#include "twinkle/io/model_config.h"
#include "twinkle/train/plan.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int cmd_plan(int argc, char** argv) {
  CLI::App app{"Per-rank memory and FLOPs of a parallel layout, before launching it", "twinkle plan"};
  std::string model;
  twinkle::PlanOptions o;
  double limit_gib = 0;
  bool json = false, bf16 = false, fp32 = false;
  app.add_option("--model", model, "model directory or hub id (config.json)")->required();
  app.add_option("--tp", o.tp, "tensor-parallel size");
  app.add_option("--pp", o.pp, "pipeline-parallel size");
  app.add_option("--virtual-pipeline-model-parallel-size,--virtual-pipeline-stages,--vpp", o.vpp,
                 "model chunks per pipeline rank (the interleaved schedule; default 1)");
  app.add_option("--dp", o.dp, "data-parallel size");
  app.add_option("--cp", o.cp, "context-parallel size");
  app.add_option("--ep", o.ep, "expert-parallel size (Qwen3-MoE)");
  app.add_option("--etp", o.etp, "expert tensor-parallel size (Qwen3-MoE; 1 as in Twinkle)");
  app.add_flag("--sequence-parallel", o.sequence_parallel, "sequence parallelism in the tp regions");
  app.add_option("--recompute,--recompute-granularity", o.recompute_granularity,
                 "full (default, as MegatronModel) | selective | none");
  app.add_option("--pipeline-split", o.pipeline_split, "balanced (default) | even");
  std::string pipeline_layout;
  app.add_option("--pipeline-model-parallel-layout", pipeline_layout,
                 "Megatron's layout string (twinkle train's option; vpp from its stage count; default: none)");
  app.add_option("--layers-per-stage", o.layers_per_stage, "decoder layers per stage (overrides --pipeline-split)")
      ->delimiter(',');
  app.add_option("--micro-batch-size", o.micro_batch_size, "rows per micro-batch")->required();
  app.add_option("--seq-length", o.seq_length, "tokens per row")->required();
  app.add_option("--global-batch-size", o.global_batch_size, "rows per step (default: micro-batch size x dp)");
  app.add_option("--use-distributed-optimizer", o.use_distributed_optimizer, "ZeRO-1 sharding over dp·cp (default true)");
  app.add_option("--lora-r", o.lora_rank, "LoRA rank on all linear layers (the recipes: 8); 0 = full training");
  auto* bf16_flag = app.add_flag("--bf16", bf16, "plan mixed_precision bf16 (as twinkle train --bf16)");
  app.add_flag("--fp32", fp32, "plan fp32 everywhere (the default)")->excludes(bf16_flag);
  app.add_flag("--async-save", o.async_save,
               "plan twinkle train --async-save: count the staging copy of each rank's slices (master weight, "
               "exp_avg, exp_avg_sq of its ZeRO-1 shard) in the peak");
  app.add_option("--memory-per-rank", limit_gib, "GiB a rank may use: a stage above it fails the plan (exit 1)");
  app.add_flag("--json", json, "one JSON object instead of the table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.mixed_precision = bf16 ? "bf16" : "fp32";
  const std::string dir = twinkle::resolve_model_dir(model);
  const twinkle::ModelConfig cfg = twinkle::load_model_config((std::filesystem::path(dir) / "config.json").string());
  if (!pipeline_layout.empty()) {
    o.layers_per_stage = twinkle::parallel::parse_pipeline_layout(pipeline_layout);
    const int stages = static_cast<int>(o.layers_per_stage.size());
    twinkle::check(stages % o.pp == 0, "--pipeline-model-parallel-layout has " + std::to_string(stages) +
                                           " stages, not a multiple of --pp " + std::to_string(o.pp));
    if (o.vpp == 1) o.vpp = stages / o.pp;
  }
  const twinkle::Plan plan = twinkle::plan_layout(cfg, o);
  const auto& worst = plan.worst();
  if (json) {
    nlohmann::json j;
    j["micro_batches"] = plan.micro_batches;
    j["padded_seq_length"] = plan.padded_seq_length;
    j["mixed_precision"] = o.mixed_precision;
    j["async_save"] = o.async_save;
    j["job_model_flops_per_step"] = plan.job_model_flops;
    j["peak_bytes"] = worst.peak;
    for (const auto& s : plan.stages)
      j["stages"].push_back({{"stage", s.stage},         {"layers", s.layers},       {"slots", s.slots},
                             {"params", s.params},       {"grads", s.grads},         {"optimizer", s.optimizer},
                             {"param_numel", s.param_numel}, {"expert_numel", s.expert_numel},
                             {"adapter_numel", s.adapter_numel}, {"state_numel", s.state_numel},
                             {"activations", s.activations}, {"workspace", s.workspace}, {"runtime", s.runtime},
                             {"save_staging", s.save_staging},
                             {"peak", s.peak},           {"model_flops", s.model_flops},
                             {"executed_flops", s.executed_flops}, {"biggest", s.biggest()}});
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s: tp %d pp %d%s dp %d cp %d ep %d etp %d%s%s, %s, recompute %s, micro-batch %lld x %lld tokens, %lld micro-batches "
                "per replica; %d ranks\n",
                dir.c_str(), o.tp, o.pp, o.vpp > 1 ? (" vpp " + std::to_string(o.vpp)).c_str() : "", o.dp, o.cp, o.ep,
                o.etp, o.sequence_parallel ? " sp" : "",
                o.lora_rank > 0 ? (", LoRA r " + std::to_string(o.lora_rank)).c_str() : "",
                o.mixed_precision.c_str(), o.recompute_granularity.c_str(), static_cast<long long>(o.micro_batch_size),
                static_cast<long long>(o.seq_length), static_cast<long long>(plan.micro_batches),
                o.tp * o.pp * o.dp * o.cp);
    if (plan.padded_seq_length != o.seq_length)
      std::printf("cp %d: each row of %lld tokens is padded to %lld (a multiple of 2·cp%s, as training pads it)\n", o.cp,
                  static_cast<long long>(o.seq_length), static_cast<long long>(plan.padded_seq_length),
                  (o.sequence_parallel || cfg.is_moe()) && o.tp > 1 ? "·tp under sequence parallelism" : "");
    // the async save's staging copy is a column of its own, shown only when it is planned
    std::printf("%-6s %-7s %-6s %11s %11s %11s %11s %11s %9s%s %10s %14s\n", "stage", "layers", "slots", "params GiB",
                "grads GiB", "optim GiB", "activ GiB", "work GiB", "rt GiB", o.async_save ? "   async GiB" : "",
                "peak GiB", "TFLOP/step");
    for (const auto& s : plan.stages) {
      char staging[32] = "";
      if (o.async_save) std::snprintf(staging, sizeof staging, " %11.3f", s.save_staging / kGiB);
      std::printf("%-6d %-7lld %-6lld %11.3f %11.3f %11.3f %11.3f %11.3f %9.3f%s %10.3f %14.3f\n", s.stage,
                  static_cast<long long>(s.layers), static_cast<long long>(s.slots), s.params / kGiB, s.grads / kGiB,
                  s.optimizer / kGiB, s.activations / kGiB, s.workspace / kGiB, s.runtime / kGiB, staging,
                  s.peak / kGiB, s.executed_flops / 1e12);
    }
    if (o.async_save) {
      const twinkle::StagePlan* most = &plan.stages.front();
      for (const auto& s : plan.stages)
        if (s.save_staging > most->save_staging) most = &s;
      std::printf("async save: each rank's staging copy of its own slices (fp32 master weight, exp_avg, exp_avg_sq of "
                  "its ZeRO-1 shard) is held from the first asynchronous save on: at most %.3f GiB (stage %d)\n",
                  most->save_staging / kGiB, most->stage);
    }
    std::printf("job: %.3f TFLOP per step (model FLOPs, forward + backward)\n", plan.job_model_flops / 1e12);
    if (cfg.is_moe() && o.ep > 1)
      std::printf("MoE: a rank's TFLOP/step assume balanced routing (its experts run its own tokens x top_k rows); "
                  "real routing moves expert FLOPs between ep ranks, the job total does not change\n");
    std::printf("per-rank peak: %.3f GiB (stage %d)\n", worst.peak / kGiB, worst.stage);
  }
  if (limit_gib > 0 && worst.peak > limit_gib * kGiB) {
    const double big = worst.biggest() == "parameters"        ? worst.params
                       : worst.biggest() == "gradients"       ? worst.grads
                       : worst.biggest() == "optimizer state" ? worst.optimizer
                       : worst.biggest() == "activations"     ? worst.activations
                       : worst.biggest() == "workspace"       ? worst.workspace
                       : worst.biggest() == "async save staging" ? worst.save_staging
                                                              : worst.runtime;
    std::fprintf(stderr,
                 "twinkle plan: the layout does not fit --memory-per-rank %.2f GiB: stage %d needs %.3f GiB; its "
                 "biggest item is %s (%.3f GiB)\n",
                 limit_gib, worst.stage, worst.peak / kGiB, worst.biggest().c_str(), big / kGiB);
    return 1;
  }
  return 0;
}

}  // namespace

TWINKLE_REGISTER_COMMAND("plan", "per-rank memory and FLOPs of a layout, before launching it", cmd_plan);
