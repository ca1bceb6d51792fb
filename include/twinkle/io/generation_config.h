// twinkle/io/generation_config.h — the stop ids of a Hugging Face model directory.
//
// transformers loads generation_config.json (GenerationConfig.from_pretrained) when the model
// directory has one and otherwise derives the generation config from config.json
// (GenerationConfig.from_model_config); generate() stops a sequence at ANY id of
// generation_config.eos_token_id (an int or a list). Qwen3 checkpoints declare
// eos_token_id [151645, 151643] (<|im_end|>, <|endoftext|>) there and 151645 in config.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/io/model_config.h"

namespace twinkle {

/// The EOS ids generation stops at: `eos_token_id` of <model_dir>/generation_config.json when
/// the file exists and the field is present and not null (an integer or a list of integers),
/// else cfg.eos_token_id (config.json's). Empty when neither declares one (generation then runs
/// to its token limit). Throws twinkle::Error naming generation_config.json when it is not a
/// JSON object or eos_token_id is neither an integer >= 0 nor a list of them.
std::vector<int64_t> load_eos_token_ids(const std::string& model_dir, const ModelConfig& cfg);

}  // namespace twinkle
