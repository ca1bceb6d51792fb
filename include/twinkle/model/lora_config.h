// twinkle/model/lora_config.h — LoRA adapter options (PEFT's LoraConfig) and their targets.
//
// Meanings and defaults from PEFT (peft/tuners/lora/config.py, peft/tuners/lora/layer.py):
//   y = base(x) + scaling * B(A(dropout(x))),  A [r, in], B [out, r],
//   scaling = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora (Kalajdzievski 2023).
// Init (LoraLayer.reset_lora_parameters): "true" = A kaiming-uniform with a = sqrt(5)
// (U(-1/sqrt(in), 1/sqrt(in))) and B zeros (the adapter starts as a no-op); "gaussian" = A
// N(0, 1/r) and B zeros; "false" = A and B both nn.Linear's default init (kaiming-uniform,
// a = sqrt(5): U(-1/sqrt(fan_in), 1/sqrt(fan_in))) — not a no-op, for tests (PEFT's
// init_lora_weights=False).
// target_modules: "all-linear" (PEFT / Twinkle: every linear layer but the lm head and the MoE
// router; on a dense Qwen3 q/k/v/o_proj and gate/up/down_proj of every layer, on Qwen3-MoE also
// every expert's gate/up/down_proj, one pair per expert, PEFT's per-expert keys) or a comma-separated list of HF
// module names or suffixes ("q_proj,v_proj", "self_attn.o_proj", "model.layers.0.mlp.up_proj")
// matched like PEFT does: a module is targeted when its full name equals an entry or ends
// with "." + entry. An adapter_config.json whose target_modules is a string other than
// "all-linear" holds PEFT's regular expression (peft/tuners/tuners_utils.py
// check_target_module_exists: re.fullmatch(target_modules, key) over the base model's module
// names, e.g. ".*\.(q_proj|v_proj)"); read_peft_adapter_config sets target_modules_regex for it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace twinkle {

struct LoraConfig {
  int64_t r = 8;                              ///< rank (>= 1)
  double lora_alpha = 8;                      ///< PEFT's default lora_alpha = 8
  std::string target_modules = "all-linear";  ///< "all-linear" or comma-separated names / suffixes
  double lora_dropout = 0.0;                  ///< dropout on the adapter input, in [0, 1)
  bool use_rslora = false;                    ///< scaling alpha / sqrt(r)
  std::string init_lora_weights = "true";     ///< "true" | "gaussian" | "false"
  /// target_modules is one regular expression a module's full HF name must match entirely
  /// (PEFT's str target_modules; ECMAScript syntax, the subset it shares with Python's re).
  bool target_modules_regex = false;

  /// lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora (PEFT LoraLayer.update_layer).
  double scaling() const;
};

/// Checks every field (core/option_check.h messages, set "lora", e.g. "lora option 'r'
/// (--lora-r) must be >= 1, got 0"): r >= 1, lora_alpha finite and > 0, lora_dropout in
/// [0, 1), init_lora_weights (--lora-init) one of true / gaussian / false, target_modules non-empty
/// (and, with target_modules_regex, a regular expression std::regex compiles).
void validate(const LoraConfig& cfg);

/// The entries of target_modules: {"all-linear"} or the comma-separated names (trimmed); with
/// target_modules_regex the one expression, whole.
std::vector<std::string> lora_target_list(const LoraConfig& cfg);

/// A module of the Hugging Face model that twinkle gives no LoRA adapter (Qwen3Model::other_modules):
/// its HF module name and what it is, with what PEFT does with it.
struct NonLoraModule {
  std::string name;  ///< e.g. "model.embed_tokens"
  std::string what;  ///< e.g. "an nn.Embedding (PEFT would add a LoRA Embedding layer to it)"
};

/// The modules of `linear_modules` (HF module names of every linear layer but the lm head,
/// in model order) that `cfg` targets. Throws twinkle::Error when an entry matches no module,
/// listing the valid short names (e.g. "lora option 'lora_targets' (--lora-targets): 'qproj'
/// matches no linear module; valid: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj,
/// up_proj, down_proj (or full module names)"). With target_modules_regex: the modules whose
/// full name the expression matches entirely (the MoE router too, if it matches, as in PEFT);
/// an error when none does.
/// PEFT matches target_modules against EVERY module name of the model
/// (peft/tuners/tuners_utils.py check_target_module_exists: re.fullmatch for a str, name ==
/// entry or name ending "." + entry for a list) and wraps what it selects: nn.Linear (the lm
/// head included) and nn.Embedding get LoRA layers, any other type raises "Target module ... is
/// not supported" (peft/tuners/lora/model.py _create_new_module). So when the expression or an
/// entry selects one of `other_modules` (the modules twinkle cannot wrap: the embedding, the lm
/// head, the norms, containers, activations, the rotary embedding), this throws twinkle::Error
/// naming that module, what it is and the pattern, instead of training fewer modules than
/// asked. "all-linear" never selects them (PEFT leaves the output layer out of it).
std::vector<std::string> resolve_lora_targets(const LoraConfig& cfg, const std::vector<std::string>& linear_modules,
                                              const std::vector<NonLoraModule>& other_modules = {});

}  // namespace twinkle
