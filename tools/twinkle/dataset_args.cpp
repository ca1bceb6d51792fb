// tools/twinkle/dataset_args.cpp — see dataset_args.h.
#include "dataset_args.h"

#include "dataset_checks.h"

#include <optional>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset_meta.h"
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
}

TemplateOptions checked_template_options(const DatasetArgs& a, const std::string& model_id) {
  TemplateOptions to;
  to.model_id = model_id;
  to.max_length = a.max_length;
  to.truncation = a.truncation;
  to.ignore_empty_think = a.ignore_empty_think;
  validate(to);
  if (!a.data_slice.empty()) (void)DataSlice::parse(a.data_slice);
  if (!a.self_cognition.empty())
    check(a.self_cognition.find(',') != std::string::npos,
          "--self-cognition expects NAME,AUTHOR, got '" + a.self_cognition + "'");
  return to;
}

Dataset load_encoded_dataset(const CLI::App& app, const DatasetArgs& a, const TemplateOptions& to,
                             const ModelConfig& model_cfg, const std::string& config_path) {
  const std::optional<DataSlice> slice =
      a.data_slice.empty() ? std::nullopt : std::optional<DataSlice>(DataSlice::parse(a.data_slice));
  DatasetMeta meta(a.dataset, slice);
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
