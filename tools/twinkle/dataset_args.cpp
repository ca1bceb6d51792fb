// tools/twinkle/dataset_args.cpp — see dataset_args.h.
#include "dataset_args.h"

#include "dataset_checks.h"

#include <optional>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset_meta.h"
#include "twinkle/data/mixture.h"
#include "twinkle/data/preprocessor.h"
#include "twinkle/data/pretokenized.h"
#include "twinkle/data/train_val_split.h"

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

// A loaded dataset preprocessed by its columns (pre-tokenized rows as they are; else --self-cognition on
// query/response rows, AlpacaPreprocessor on "instruction" rows, MessagesPreprocessor otherwise).
struct Part {
  Dataset ds;
  bool pretokenized = false;
  bool self_cognition = false;
};

Part load_part(const DatasetArgs& a, const DatasetMeta& meta, bool mixture) {
  Part p{Dataset(meta)};
  if (p.ds.size() > 0 && is_pretokenized(p.ds[0])) {
    p.pretokenized = true;
    return p;
  }
  const bool sc_rows = p.ds.size() > 0 && p.ds[0].contains("query") && p.ds[0].contains("response");
  if (!a.self_cognition.empty() && (!mixture || sc_rows)) {
    const auto comma = a.self_cognition.find(',');
    p.ds.map(SelfCognitionProcessor(a.self_cognition.substr(0, comma), a.self_cognition.substr(comma + 1)));
    p.self_cognition = true;
  } else if (p.ds.size() > 0 && p.ds[0].contains("instruction")) {
    p.ds.map(AlpacaPreprocessor());
  } else {
    p.ds.map(MessagesPreprocessor());
  }
  return p;
}

// Encodes `ds` (pre-tokenized: as they are, the template options refused; else through the template) and
// checks the rows against the model's positions.
void encode_rows(const CLI::App& app, const DatasetArgs& a, const TemplateOptions& to, const ModelConfig& model_cfg,
                 const std::string& config_path, Dataset& ds, bool pretokenized) {
  if (pretokenized) {
    // The template's options do nothing to rows that are already token ids: refuse them rather
    // than run, e.g., rows longer than the --max-length the user asked for.
    refuse_template_options(
        app, {"--template", "--self-cognition", "--max-length", "--truncation", "--ignore-empty-think"}, ds);
    ds.encode_pretokenized(model_cfg.vocab_size);
  } else {
    ds.set_template(a.templ.empty() ? "Template" : a.templ, to);
    ds.encode();
  }
  check_rows_fit_positions(ds, model_cfg, config_path);
}

std::vector<std::pair<int32_t, int64_t>> rows_of(int32_t part, const std::vector<int64_t>& idx) {
  std::vector<std::pair<int32_t, int64_t>> o;
  o.reserve(idx.size());
  for (int64_t i : idx) o.emplace_back(part, i);
  return o;
}

}  // namespace

TrainVal load_encoded_train_val(const CLI::App& app, const DatasetArgs& a, const TemplateOptions& to,
                                const ModelConfig& model_cfg, const std::string& config_path, double split_ratio,
                                uint64_t seed) {
  check(!a.dataset.empty(), "--dataset: no dataset given");
  std::vector<DatasetSpec> specs;
  for (const auto& d : a.dataset) specs.push_back(DatasetSpec::parse(d));
  const bool mixture = specs.size() > 1 || specs[0].id != a.dataset[0];
  check(!(mixture && !a.data_slice.empty()),
        "--data-slice selects rows of one dataset; with several datasets or ID#N give each its own #N instead");
  std::vector<Part> parts;
  int pretok = -1, chat = -1;
  bool self_cognition_used = false;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::optional<DataSlice> slice =
        a.data_slice.empty() ? std::nullopt : std::optional<DataSlice>(DataSlice::parse(a.data_slice));
    DatasetMeta meta(mixture ? specs[i].id : a.dataset[0], slice);
    meta.skip_bad_rows = a.skip_bad_rows;  // also while the file is read (bad JSON lines)
    parts.push_back(load_part(a, meta, mixture));
    (parts.back().pretokenized ? pretok : chat) = static_cast<int>(i);
    self_cognition_used = self_cognition_used || parts.back().self_cognition;
  }
  if (mixture)
    check(a.self_cognition.empty() || self_cognition_used,
          "--self-cognition: none of the datasets has query/response rows (self-cognition data) to apply it to");
  if (pretok >= 0 && chat >= 0)
    throw Error("--dataset: '" + specs[static_cast<size_t>(pretok)].id + "' holds pre-tokenized rows (input_ids) and '" +
                specs[static_cast<size_t>(chat)].id +
                "' message rows: a mixture is encoded once, so its datasets must be all pre-tokenized or all messages");
  const bool pretokenized = pretok >= 0;
  // --split-dataset-ratio: each dataset split before mixing, seeds drawn in dataset order (ms-swift's
  // load_dataset / post_process, twinkle/data/train_val_split.h)
  std::vector<Dataset> train_parts, val_parts;
  if (split_ratio > 0) {
    SwiftSeedStream seeds(seed);
    for (size_t i = 0; i < parts.size(); ++i) {
      const Dataset& ds = parts[i].ds;
      const std::optional<int64_t> sample =
          specs[i].count || specs[i].ratio ? std::optional<int64_t>(specs[i].rows(ds.size())) : std::nullopt;
      const int64_t n_val = split_val_count(ds.size(), sample, split_ratio, specs[i].id);
      const TrainValIndices idx = train_test_split_indices(ds.size(), n_val, static_cast<uint64_t>(seeds.next()));
      train_parts.push_back(Dataset::from_parts({&ds}, rows_of(0, idx.train), ds.id()));
      val_parts.push_back(Dataset::from_parts({&ds}, rows_of(0, idx.val), ds.id()));
      // ms-swift's train_sample = dataset_sample - val_sample of the train part (sample_dataset)
      if (sample) {
        DatasetSpec t;
        t.id = specs[i].id;
        t.count = *sample - n_val;
        specs[i] = t;
      }
    }
  } else {
    for (auto& p : parts) train_parts.push_back(std::move(p.ds));
  }
  auto mixed = [&] {
    std::vector<const Dataset*> ptrs;
    for (const auto& p : train_parts) ptrs.push_back(&p);
    MixOptions mo;
    mo.mode = parse_mix_mode(a.dataset_mix);
    mo.seed = a.mix_seed;
    mo.probabilities = a.interleave_prob;
    return mix_datasets(ptrs, specs, mo);
  };
  TrainVal out{mixture ? mixed() : std::move(train_parts[0]), std::nullopt};
  encode_rows(app, a, to, model_cfg, config_path, out.train, pretokenized);
  if (!val_parts.empty()) {
    // the validation parts concatenated in dataset order (ms-swift's concat_datasets)
    std::vector<const Dataset*> ptrs;
    std::vector<std::pair<int32_t, int64_t>> order;
    for (size_t i = 0; i < val_parts.size(); ++i) {
      ptrs.push_back(&val_parts[i]);
      for (int64_t r = 0; r < val_parts[i].size(); ++r) order.emplace_back(static_cast<int32_t>(i), r);
    }
    std::string id;
    for (const auto& v : val_parts) id += (id.empty() ? "" : " + ") + v.id();
    out.val.emplace(Dataset::from_parts(ptrs, order, id + " (validation split)"));
    encode_rows(app, a, to, model_cfg, config_path, *out.val, pretokenized);
  }
  return out;
}

Dataset load_encoded_dataset(const CLI::App& app, const DatasetArgs& a, const TemplateOptions& to,
                             const ModelConfig& model_cfg, const std::string& config_path) {
  return std::move(load_encoded_train_val(app, a, to, model_cfg, config_path, 0.0, 0).train);
}

}  // namespace twinkle::cli
