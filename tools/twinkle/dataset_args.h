// tools/twinkle/dataset_args.h — the dataset options `twinkle train` and `twinkle eval` share, and
// the one function that turns them into encoded rows, so that eval reads a dataset exactly as train
// does (eval lacked --self-cognition, --data-slice, --skip-bad-rows, --truncation and
// --ignore-empty-think, and read Alpaca rows, which train maps with AlpacaPreprocessor, as
// malformed message rows).
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "twinkle/data/dataset.h"
#include "twinkle/data/template.h"
#include "twinkle/io/model_config.h"

namespace twinkle::cli {

struct DatasetArgs {
  /// --dataset (repeatable, or several values: ms-swift's `--dataset a b#1000`): file, directory or
  /// hub id, each optionally with #N (rows) or #R (ratio), twinkle/data/mixture.h
  std::vector<std::string> dataset;
  std::string dataset_mix = "shuffle";  ///< --dataset-mix: concat | shuffle | interleave
  std::vector<double> interleave_prob;  ///< --interleave-prob: one weight per dataset (interleave)
  uint64_t mix_seed = 42;        ///< the command's --seed (the mixture's sampling and shuffle)
  std::string templ;             ///< --template ("" = Template = qwen3)
  int64_t max_length = 8192;     ///< --max-length
  std::string truncation = "raise";
  bool ignore_empty_think = false;
  std::string data_slice;        ///< --data-slice text ("" = all rows)
  std::string self_cognition;    ///< --self-cognition NAME,AUTHOR ("" = none)
  bool skip_bad_rows = false;
};

/// Registers --template, --max-length, --truncation, --ignore-empty-think, --data-slice,
/// --self-cognition, --skip-bad-rows, --dataset-mix and --interleave-prob on `app` (--dataset is registered by the
/// command, add_dataset_option).
void add_dataset_options(CLI::App& app, DatasetArgs& a);

/// Registers --dataset (one or more values, repeatable) on `app`; `required` for train.
CLI::Option* add_dataset_option(CLI::App& app, DatasetArgs& a);

/// The template options of `a` for `model_id`, validated (twinkle::validate; throws
/// twinkle::Error naming the option). --data-slice is parsed too (DataSlice::parse's error).
TemplateOptions checked_template_options(const DatasetArgs& a, const std::string& model_id);

/// Loads `a.dataset` (data slice, skip-bad-rows) and encodes it as `twinkle train` trains it.
/// Several datasets, or one with #N / #R, are loaded and preprocessed one by one (each by its own
/// columns: pre-tokenized, Alpaca, query/response with --self-cognition, else messages), mixed by
/// --dataset-mix with `a.mix_seed` (mix_datasets, twinkle/data/mixture.h) and encoded together;
/// --data-slice is then refused (one slice for several datasets; use #N), --self-cognition when no
/// dataset has query/response rows, and a mixture of
/// pre-tokenized and message datasets (naming one of each). One plain dataset:
/// pre-tokenized rows as they are (the template's options, given on `app`, are refused naming
/// the option and the first row); else --self-cognition NAME,AUTHOR (SelfCognitionProcessor),
/// Alpaca rows ("instruction" in the first row: AlpacaPreprocessor) or message rows
/// (MessagesPreprocessor) through the chat template. Every encoded row is checked against the
/// model's max_position_embeddings (`config_path` names it). Throws twinkle::Error naming the
/// file:line, field or option.
Dataset load_encoded_dataset(const CLI::App& app, const DatasetArgs& a, const TemplateOptions& to,
                             const ModelConfig& model_cfg, const std::string& config_path);

/// The training rows and, with split_ratio > 0 (`--split-dataset-ratio`), a validation set split off them
/// as ms-swift's load_dataset does (twinkle/data/train_val_split.h): every --dataset, loaded and
/// preprocessed as above, is split before the mixture into train_test_split(test_size =
/// split_val_count(...), seed = the next get_seed draw of np.random.RandomState(seed)); an ID#N / ID#R
/// dataset then keeps N - val_sample training rows for the mixture (ms-swift's train_sample). The train
/// parts are mixed (and encoded) as load_encoded_dataset mixes them; the validation parts are concatenated
/// in dataset order and encoded alike. split_ratio 0: no split (val empty), load_encoded_dataset's rows.
/// Throws what load_encoded_dataset throws, and twinkle::Error naming --split-dataset-ratio and the
/// dataset (split_val_count, SwiftSeedStream).
struct TrainVal {
  Dataset train;
  std::optional<Dataset> val;
};
TrainVal load_encoded_train_val(const CLI::App& app, const DatasetArgs& a, const TemplateOptions& to,
                                const ModelConfig& model_cfg, const std::string& config_path, double split_ratio,
                                uint64_t seed);

}  // namespace twinkle::cli
