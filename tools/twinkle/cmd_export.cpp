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
#include <CLI/CLI.hpp>

#include <cstdio>

#include "command.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/train/megatron_model.h"

namespace {

int export_main(int argc, char** argv) {
  CLI::App app{"Merge a PEFT LoRA adapter into its base model and write a Hugging Face checkpoint", "twinkle export"};
  std::string model, adapter, out;
  bool merge = false;
  int64_t max_shard_bytes = 5'000'000'000;
  app.add_option("--model", model, "base model directory or hub id")->required();
  app.add_option("--adapter", adapter, "PEFT adapter directory (adapter_config.json + adapter_model.safetensors)")
      ->required();
  app.add_flag("--merge", merge, "write W + scaling B A for every adapted weight (required)");
  app.add_option("-o,--output", out, "output directory (created; its weights are replaced)")->required();
  app.add_option("--max-shard-bytes", max_shard_bytes, "safetensors shard size limit (default 5e9)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  twinkle::check(merge, "export: --merge is required (the adapter directory " + adapter +
                            " is already PEFT's format; export writes the merged full checkpoint)");
  twinkle::check(max_shard_bytes > 0, "export: --max-shard-bytes must be > 0, got " + std::to_string(max_shard_bytes));
  twinkle::MegatronModel m(model);
  m.load_adapter(adapter);
  const std::string dir = m.save("", {.output_dir = out, .max_shard_bytes = max_shard_bytes, .merge_lora = true});
  if (twinkle::parallel_state().global_rank == 0)
    twinkle::get_logger().info("export: merged " + adapter + " into " + model + " -> " + dir);
  return 0;
}

int export_entry(int argc, char** argv) { return twinkle::run_main(argc, argv, export_main); }

}  // namespace

TWINKLE_REGISTER_COMMAND("export", "merge a PEFT LoRA adapter into its base model (HF checkpoint)", export_entry);
