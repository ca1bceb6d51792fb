// `twinkle eval`: the global per-token loss of a dataset (forward only), as one JSON line.
//
//   twinkle eval --model DIR --dataset rows.jsonl [--batch-size 8] [--template qwen3 ...]
//   twinkle eval --model BASE --adapter LORA_DIR --dataset rows.jsonl   (PEFT adapter, unmerged)
//
// Pre-tokenized rows ({"input_ids", "labels"}), or message / Alpaca / self-cognition
// (--self-cognition NAME,AUTHOR) rows through the chat template, exactly as `twinkle train` reads
// them, with the same dataset options (dataset_args.h: --data-slice, --skip-bad-rows, --truncation,
// ...). Prints {"loss": x, "label_tokens": n, "rows": r} where loss = sum of token losses / labelled tokens over the whole dataset (null, with a
// warning, when no row has a labelled token).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "command.h"
#include "dataset_args.h"
#include "twinkle/core/option_check.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/hub.h"
#include "twinkle/io/model_config.h"
#include <filesystem>
#include "twinkle/dist/runtime.h"
#include "twinkle/train/megatron_model.h"

namespace {

int eval_main(int argc, char** argv) {
  std::string kernels = "fused";
  CLI::App app{"Loss of a dataset under a model (forward only)", "twinkle eval"};
  app.option_defaults()->always_capture_default();
  std::string model, adapter;
  twinkle::cli::DatasetArgs data;
  int64_t batch_size = 8;
  app.add_option("--model", model, "model directory or hub id")->required();
  app.add_option("--adapter", adapter, "PEFT LoRA adapter directory to apply to the model (default: none)");
  twinkle::cli::add_dataset_option(app, data)->required();
  app.add_option("--batch-size", batch_size, "rows per forward pass");
  twinkle::cli::add_dataset_options(app, data);
  app.add_option("--kernels", kernels, "kernel set: fused | reference (plain loops, for debugging; default: fused)")
      ->check(CLI::IsMember({"fused", "reference"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  twinkle::check_option(batch_size >= 1, "eval", "batch_size", ">= 1", batch_size);
  const twinkle::TemplateOptions to = twinkle::cli::checked_template_options(data, model);
  const std::string config_path = (std::filesystem::path(twinkle::resolve_model_dir(model)) / "config.json").string();
  const twinkle::ModelConfig model_cfg = twinkle::load_model_config(config_path);
  const twinkle::Dataset ds = twinkle::cli::load_encoded_dataset(app, data, to, model_cfg, config_path);
  const std::vector<twinkle::EncodedRow>& rows = ds.encoded();
  twinkle::MegatronModel m(model, {.micro_batch_size = batch_size, .kernels = kernels});
  if (!adapter.empty()) m.load_adapter(adapter);
  double loss_sum = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(batch_size)) {
    std::vector<twinkle::EncodedRow> part(rows.begin() + static_cast<std::ptrdiff_t>(i),
                                          rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), i + batch_size)));
    auto mb = twinkle::collate_padded(part, m.pad_token_id());
    const int64_t n = mb.num_label_tokens();
    loss_sum += m.forward_only(part) * static_cast<double>(n);
    tokens += n;
  }
  // No labelled token: the loss is undefined (null), never 0.0 (a perfect fit).
  if (tokens == 0) twinkle::get_logger().warning("eval: the dataset has no labelled tokens (every label is -100): loss is null");
  nlohmann::json out = {{"loss", tokens ? nlohmann::json(loss_sum / static_cast<double>(tokens)) : nlohmann::json(nullptr)},
                        {"label_tokens", tokens},
                        {"rows", rows.size()}};
  if (twinkle::parallel_state().global_rank == 0) std::printf("%s\n", out.dump().c_str());
  return 0;
}

int eval_entry(int argc, char** argv) { return twinkle::run_main(argc, argv, eval_main); }

}  // namespace

TWINKLE_REGISTER_COMMAND("eval", "loss of a dataset under a model (forward only)", eval_entry);
