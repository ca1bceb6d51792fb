// `twinkle export`: a base model plus a PEFT LoRA adapter written as one merged Hugging Face
// checkpoint.
//
//   twinkle export --model BASE --adapter ADAPTER_DIR --merge -o OUT
//
// The adapter (adapter_config.json + adapter_model.safetensors, PEFT's layout) is loaded onto
// the base (MegatronModel::load_adapter) and saved with SaveOptions::merge_lora: every
// targeted weight becomes W + scaling B A (PEFT's Linear.merge / merge_and_unload), written in
// the base config's torch_dtype with config.json and the tokenizer files — a plain HF
// directory that `twinkle train/eval/generate`, transformers or vLLM load without PEFT.
// --merge is required: the unmerged adapter directory is already PEFT's format.
// Works under `twinkle-run` on any layout (the save gathers every shard to rank 0).
//
//   twinkle export --from-checkpoint CKPT -o OUT [--save-dtype D] [--merge --model BASE]
//
// writes a checkpoint saved with --save-format sharded (train/checkpoint_export.h) as the
// directory save() writes for the same weights, one tensor at a time: the full HF checkpoint, or
// for a LoRA run PEFT's adapter directory (with --merge: that adapter merged into --model, or
// into the adapter config's base_model_name_or_path). One process does it (rank 0 under a launcher).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "command.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/model/lora_files.h"
#include "twinkle/train/checkpoint_export.h"
#include "twinkle/train/megatron_model.h"

namespace {

int export_main(int argc, char** argv) {
  CLI::App app{"Merge a PEFT LoRA adapter into its base model, or write a sharded training checkpoint as a "
               "Hugging Face directory", "twinkle export"};
  std::string model, adapter, out, from_checkpoint, save_dtype;
  bool merge = false;
  int64_t max_shard_bytes = 5'000'000'000;
  app.add_option("--model", model, "base model directory or hub id");
  app.add_option("--adapter", adapter, "PEFT adapter directory (adapter_config.json + adapter_model.safetensors)");
  app.add_option("--from-checkpoint", from_checkpoint,
                 "a checkpoint saved with --save-format sharded (or an output dir whose 'latest' names one): write "
                 "its weights as a Hugging Face directory (a LoRA run's as PEFT's adapter directory)");
  app.add_option("--save-dtype", save_dtype,
                 "with --from-checkpoint: dtype of the written weights (float32 | bfloat16 | float16; default: the "
                 "checkpoint's torch_dtype)");
  app.add_flag("--merge", merge, "write W + scaling B A for every adapted weight (required with --adapter)");
  app.add_option("-o,--output", out, "output directory (created; its weights are replaced)")->required();
  app.add_option("--max-shard-bytes", max_shard_bytes, "safetensors shard size limit (default 5e9)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  twinkle::check(max_shard_bytes > 0, "export: --max-shard-bytes must be > 0, got " + std::to_string(max_shard_bytes));
  if (!from_checkpoint.empty()) {
    twinkle::check(adapter.empty(), "export: --from-checkpoint and --adapter exclude each other");
    // The merge below is collective (every rank builds the model); the export alone is one process's.
    if (merge && !twinkle::is_initialized()) twinkle::initialize(twinkle::InitOptions{});
    const bool rank0 = twinkle::world_rank() == 0;
    const std::string peft_dir = merge ? (std::filesystem::path(out) / ".adapter-from-checkpoint").string() : out;
    twinkle::ExportResult r;
    if (rank0) {
      r = twinkle::export_sharded_checkpoint(from_checkpoint, peft_dir,
                                             {.dtype = save_dtype, .max_shard_bytes = max_shard_bytes});
      twinkle::check(!merge || r.adapter, "export: --merge needs a checkpoint of a LoRA run; " + from_checkpoint +
                                               " holds full weights (written to " + peft_dir + ")");
      twinkle::get_logger().info("export: " + from_checkpoint + " -> " + r.out_dir + " (" + std::to_string(r.tensors) +
                                 (r.adapter ? " adapter" : "") + " tensors, largest " +
                                 std::to_string(r.largest_bytes) + " bytes)");
    }
    if (!merge) return 0;
    if (twinkle::parallel_state().world->size() > 1) {  // every rank takes part in the merge below
      int64_t ok = 1;
      twinkle::parallel_state().world->broadcast(&ok, 1, twinkle::DType::I64, 0);
    }
    if (model.empty()) model = twinkle::peft_base_model((std::filesystem::path(peft_dir) / "adapter_config.json").string());
    twinkle::check(!model.empty(), "export: --merge needs --model BASE (the adapter config names no base model)");
    adapter = peft_dir;
  }
  twinkle::check(!model.empty() && !adapter.empty(), "export: --model and --adapter are required (or --from-checkpoint)");
  twinkle::check(merge, "export: --merge is required (the adapter directory " + adapter +
                            " is already PEFT's format; export writes the merged full checkpoint)");
  twinkle::MegatronModel m(model);
  m.load_adapter(adapter);
  const std::string dir = m.save("", {.output_dir = out, .max_shard_bytes = max_shard_bytes, .merge_lora = true});
  if (!from_checkpoint.empty() && twinkle::parallel_state().global_rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(adapter, ec);
    std::filesystem::remove(std::filesystem::path(out) / "adapter_config.json", ec);
  }
  if (twinkle::parallel_state().global_rank == 0)
    twinkle::get_logger().info("export: merged " + adapter + " into " + model + " -> " + dir);
  return 0;
}

int export_entry(int argc, char** argv) { return twinkle::run_main(argc, argv, export_main); }

}  // namespace

TWINKLE_REGISTER_COMMAND("export", "merge a PEFT LoRA adapter into its base model (HF checkpoint)", export_entry);
