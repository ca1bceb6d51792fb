// tools/twinkle/dataset_checks.h — the dataset refusals `twinkle train` and `twinkle eval` share, one
// text each (tests/reference/check_cli.py checks both commands against it).
#pragma once
#include <CLI/CLI.hpp>

#include <initializer_list>
#include <string>

#include "twinkle/data/dataset.h"
#include "twinkle/io/model_config.h"

namespace twinkle::cli {

/// Pre-tokenized rows (input_ids) are used as they are, so the chat template's options would do
/// nothing: throws twinkle::Error for the first of `options` given on `app`'s command line
/// ("OPT applies to message rows encoded with the chat template, but FILE:ROW is a pre-tokenized row
/// (input_ids), ..."), naming ds's first row. Call it only for a pre-tokenized dataset.
void refuse_template_options(const CLI::App& app, std::initializer_list<const char*> options, const Dataset& ds);

/// After encoding: throws twinkle::Error (Dataset::check_encoded_length) naming the first row with more
/// tokens than cfg.max_position_embeddings (the model's RoPE positions), the limit, `config_path` and
/// how to shorten the rows (--max-length with --truncation for message rows).
void check_rows_fit_positions(const Dataset& ds, const ModelConfig& cfg, const std::string& config_path);

}  // namespace twinkle::cli
