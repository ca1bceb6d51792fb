// tools/twinkle/dataset_args.cpp — see dataset_args.h.
#include "dataset_args.h"

#include "dataset_checks.h"

#include <optional>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset_meta.h"
#include "twinkle/data/mixture.h"
#include "twinkle/data/preprocessor.h"
#include "twinkle/data/pretokenized.h"

namespace twinkle::cli {

void add_dataset_options(CLI::App& app, DatasetArgs& a) {
  app.add_option("--template", a.templ, "chat template for message datasets (default: Template = qwen3)");
  app.add_option("--max-length", a.max_length,
                 "template max_length of message rows (>= 1; pre-tokenized rows are used as they are)");
  app.add_option("--truncation", a.truncation, "raise | left | right | delete | split");
  app.add_flag("--ignore-empty-think", a.ignore_empty_think,
               "no loss on the empty <think>\\n\\n</think>\\n\\n block of assistant turns (ms-swift ignore_empty_think)");
  app.add_option("--data-slice", a.data_slice, "rows: A:B, N, or i,j,k (indices past the end wrap; default: all rows)");
  app.add_option("--self-cognition", a.self_cognition, "NAME,AUTHOR: apply SelfCognitionProcessor (default: none)");
  app.add_flag("--skip-bad-rows", a.skip_bad_rows, "drop malformed rows with a warning naming file:line instead of failing");
  app.add_option("--dataset-mix", a.dataset_mix,
                 "several datasets (or ID#N): shuffle (concatenate, then a seeded shuffle: ms-swift), concat "
                 "(Twinkle mix_dataset(interleave=False)), interleave (round robin until the shortest ends)")
      ->capture_default_str();
  app.add_option("--interleave-prob", a.interleave_prob,
                 "with --dataset-mix interleave: one weight per dataset, rows drawn by weight until one dataset "
                 "ends (ms-swift --interleave_prob, datasets' interleave_datasets probabilities; default: none, "
                 "round robin)");
}

CLI::Option* add_dataset_option(CLI::App& app, DatasetArgs& a) {
  return app.add_option("--dataset", a.dataset,
                        "JSONL/JSON/CSV/parquet file, directory (its split's files as Hugging Face datasets picks "
                        "them) or hub id; several (--dataset A --dataset B#500, or --dataset A B#500) are mixed "
                        "(--dataset-mix); ID#N takes N rows (more than it has: whole copies, then sampled rows, "
                        "ms-swift's rule), ID#R (R with a '.') floor(R * rows)");
}

TemplateOptions checked_template_options(const DatasetArgs& a, const std::string& model_id) {
  TemplateOptions to;
  to.model_id = model_id;
  to.max_length = a.max_length;
  to.truncation = a.truncation;
  to.ignore_empty_think = a.ignore_empty_think;
  validate(to);
  if (!a.data_slice.empty()) (void)DataSlice::parse(a.data_slice);
  (void)parse_mix_mode(a.dataset_mix);
  for (const auto& d : a.dataset) (void)DatasetSpec::parse(d);
  check(a.interleave_prob.empty() || (a.dataset_mix == "interleave" && a.interleave_prob.size() == a.dataset.size()),
        "--interleave-prob: one weight per --dataset (" + std::to_string(a.dataset.size()) +
            "), with --dataset-mix interleave; got " + std::to_string(a.interleave_prob.size()) + " with --dataset-mix " +
            a.dataset_mix);
  const bool mixed = a.dataset.size() > 1 || (a.dataset.size() == 1 && DatasetSpec::parse(a.dataset[0]).id != a.dataset[0]);
  check(!(mixed && !a.data_slice.empty()),
        "--data-slice selects rows of one dataset; with several datasets or ID#N give each its own #N instead");
  if (!a.self_cognition.empty())
    check(a.self_cognition.find(',') != std::string::npos,
          "--self-cognition expects NAME,AUTHOR, got '" + a.self_cognition + "'");
  return to;
}

namespace {

// Several datasets (or one with #N / #R): each loaded and preprocessed by its own columns, then mixed
// and encoded once (dataset_args.h).
Dataset load_encoded_mixture(const CLI::App& app, const DatasetArgs& a, const std::vector<DatasetSpec>& specs,
                             const TemplateOptions& to, const ModelConfig& model_cfg, const std::string& config_path) {
  check(a.data_slice.empty(),
        "--data-slice selects rows of one dataset; with several datasets or ID#N give each its own #N instead");
  std::vector<Dataset> parts;
  int pretok = -1, chat = -1;
  bool self_cognition_used = false;
  for (size_t i = 0; i < specs.size(); ++i) {
    DatasetMeta meta(specs[i].id);
    meta.skip_bad_rows = a.skip_bad_rows;
    Dataset ds(meta);
    if (is_pretokenized(ds[0])) {
      pretok = static_cast<int>(i);
    } else {
      chat = static_cast<int>(i);
      if (!a.self_cognition.empty() && ds[0].contains("query") && ds[0].contains("response")) {
        const auto comma = a.self_cognition.find(',');
        ds.map(SelfCognitionProcessor(a.self_cognition.substr(0, comma), a.self_cognition.substr(comma + 1)));
        self_cognition_used = true;
      } else if (ds[0].contains("instruction")) {
        ds.map(AlpacaPreprocessor());
      } else {
        ds.map(MessagesPreprocessor());
      }
    }
    parts.push_back(std::move(ds));
  }
  check(a.self_cognition.empty() || self_cognition_used,
        "--self-cognition: none of the datasets has query/response rows (self-cognition data) to apply it to");
  if (pretok >= 0 && chat >= 0)
    throw Error("--dataset: '" + specs[static_cast<size_t>(pretok)].id + "' holds pre-tokenized rows (input_ids) and '" +
                specs[static_cast<size_t>(chat)].id +
                "' message rows: a mixture is encoded once, so its datasets must be all pre-tokenized or all messages");
  std::vector<const Dataset*> ptrs;
  for (const auto& p : parts) ptrs.push_back(&p);
  MixOptions mo;
  mo.mode = parse_mix_mode(a.dataset_mix);
  mo.seed = a.mix_seed;
  mo.probabilities = a.interleave_prob;
  Dataset mix = mix_datasets(ptrs, specs, mo);
  if (pretok >= 0) {
    refuse_template_options(
        app, {"--template", "--self-cognition", "--max-length", "--truncation", "--ignore-empty-think"}, mix);
    mix.encode_pretokenized(model_cfg.vocab_size);
  } else {
    mix.set_template(a.templ.empty() ? "Template" : a.templ, to);
    mix.encode();
  }
  check_rows_fit_positions(mix, model_cfg, config_path);
  return mix;
}

}  // namespace

Dataset load_encoded_dataset(const CLI::App& app, const DatasetArgs& a, const TemplateOptions& to,
                             const ModelConfig& model_cfg, const std::string& config_path) {
  check(!a.dataset.empty(), "--dataset: no dataset given");
  std::vector<DatasetSpec> specs;
  for (const auto& d : a.dataset) specs.push_back(DatasetSpec::parse(d));
  if (specs.size() > 1 || specs[0].id != a.dataset[0]) return load_encoded_mixture(app, a, specs, to, model_cfg, config_path);
  const std::optional<DataSlice> slice =
      a.data_slice.empty() ? std::nullopt : std::optional<DataSlice>(DataSlice::parse(a.data_slice));
  DatasetMeta meta(a.dataset[0], slice);
  meta.skip_bad_rows = a.skip_bad_rows;  // also while the file is read (bad JSON lines)
  Dataset ds(meta);
  if (ds.size() > 0 && is_pretokenized(ds[0])) {
    // The template's options do nothing to rows that are already token ids: refuse them rather
    // than run, e.g., rows longer than the --max-length the user asked for.
    refuse_template_options(
        app, {"--template", "--self-cognition", "--max-length", "--truncation", "--ignore-empty-think"}, ds);
    ds.encode_pretokenized(model_cfg.vocab_size);
  } else {
    if (!a.self_cognition.empty()) {
      const auto comma = a.self_cognition.find(',');
      ds.map(SelfCognitionProcessor(a.self_cognition.substr(0, comma), a.self_cognition.substr(comma + 1)));
    } else if (ds.size() > 0 && ds[0].contains("instruction")) {
      ds.map(AlpacaPreprocessor());
    } else {
      ds.map(MessagesPreprocessor());
    }
    ds.set_template(a.templ.empty() ? "Template" : a.templ, to);
    ds.encode();
  }
  check_rows_fit_positions(ds, model_cfg, config_path);
  return ds;
}

}  // namespace twinkle::cli
