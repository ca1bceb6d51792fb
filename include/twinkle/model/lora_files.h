// twinkle/model/lora_files.h — PEFT's adapter files and the LoRA merge.
//
// PEFT (peft/utils/save_and_load.py, peft/config.py): an adapter directory holds
// adapter_config.json (LoraConfig's fields, peft_type "LORA") and adapter_model.safetensors
// whose keys are the module's name under "base_model.model." with the adapter name dropped:
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" ([r, in]) and
// "...q_proj.lora_B.weight" ([out, r]). Merge (peft/tuners/lora/layer.py Linear.merge /
// get_delta_weight): W' = W + scaling * B A.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "twinkle/core/tensor.h"
#include "twinkle/model/lora_config.h"

namespace twinkle {

/// "base_model.model." + hf_name (PEFT's saved key of an adapter tensor).
std::string peft_key(const std::string& hf_name);
/// The text of adapter_config.json for `cfg` on base model `base_model` (peft_type LORA,
/// task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules — "all-linear" or a
/// target_modules_regex as a string, else the list —, use_rslora, init_lora_weights, bias
/// "none", use_dora false, ...).
std::string peft_adapter_config_json(const LoraConfig& cfg, const std::string& base_model);
/// Reads a PEFT adapter_config.json into a LoraConfig (r, lora_alpha, lora_dropout,
/// target_modules as a list of names / suffixes or, PEFT's str form, "all-linear" or a regular
/// expression (target_modules_regex), use_rslora, init_lora_weights). Throws twinkle::Error
/// naming the file and field when peft_type is not LORA, a required field (r, lora_alpha,
/// target_modules) is missing, or an unsupported feature is on (use_dora, bias other than
/// "none", modules_to_save, layers_to_transform, a non-empty rank_pattern / alpha_pattern /
/// exclude_modules / trainable_token_indices / layer_replication, lora_bias true,
/// target_parameters).
LoraConfig read_peft_adapter_config(const std::string& path);
/// The base model named in a PEFT adapter_config.json ("" when absent).
std::string peft_base_model(const std::string& path);
/// For every module with "<m>.lora_A.weight" [r, in] and "<m>.lora_B.weight" [out, r] in
/// `adapter` (HF names, f32), adds scaling * B A (accumulated in double) to "<m>.weight" of
/// `base`. Throws twinkle::Error when the base weight is missing or the shapes disagree.
void merge_lora_into(std::vector<std::pair<std::string, Tensor>>& base,
                     const std::vector<std::pair<std::string, Tensor>>& adapter, double scaling);

}  // namespace twinkle
