#include "dataset_checks.h"

#include "twinkle/core/error.h"

namespace twinkle::cli {

void refuse_template_options(const CLI::App& app, std::initializer_list<const char*> options, const Dataset& ds) {
  for (const char* opt : options)
    check(app.count(opt) == 0, std::string(opt) + " applies to message rows encoded with the chat template, but " +
                                   ds.row_name(0) +
                                   " is a pre-tokenized row (input_ids), used as it is: drop the option (or give "
                                   "message rows)");
}

void check_rows_fit_positions(const Dataset& ds, const ModelConfig& cfg, const std::string& config_path) {
  // positions past the RoPE table are refused by the model at the step that meets the row; name it now
  ds.check_encoded_length(cfg.max_position_embeddings,
                          "max_position_embeddings " + std::to_string(cfg.max_position_embeddings) + " of " +
                              config_path +
                              " (the model's positions; shorten it, or encode message rows with --max-length and "
                              "--truncation left|right|delete)");
}

}  // namespace twinkle::cli
