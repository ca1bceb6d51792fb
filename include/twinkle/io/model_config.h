// twinkle/io/model_config.h — Hugging Face config.json for Qwen3 and Qwen3-MoE.
//
// Field names, meanings and defaults are those of transformers'
// models/qwen3/configuration_qwen3.py (Qwen3Config) and
// models/qwen3_moe/configuration_qwen3_moe.py (Qwen3MoeConfig), plus PretrainedConfig
// (torch_dtype, bos/eos/pad_token_id, tie_word_embeddings). Deliberate differences, chosen
// so that a hand-written config cannot silently turn into Qwen3-8B:
//   * vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads
//     (and, for qwen3_moe, num_experts, num_experts_per_tok, moe_intermediate_size) are
//     REQUIRED (transformers would fill in its Qwen3-8B / Qwen3-15B-A2B sizes);
//   * num_key_value_heads absent or null -> num_attention_heads (transformers: null ->
//     num_attention_heads, absent -> 32 for qwen3 / 4 for qwen3_moe).
// Everything else follows transformers exactly, in particular:
//   * head_dim absent -> 128 for qwen3 (Qwen3Config default; NOT hidden/heads), and
//     hidden_size / num_attention_heads for qwen3_moe (Qwen3MoeConfig has no head_dim; the
//     model uses getattr(config, "head_dim", hidden_size // num_attention_heads));
//   * rope_theta 10000.0, rms_norm_eps 1e-6, initializer_range 0.02, tie_word_embeddings
//     false, max_position_embeddings 32768, attention_bias false, attention_dropout 0.0;
//   * torch_dtype absent -> float32 (PretrainedConfig.torch_dtype None: weights load as f32);
//     transformers >= 4.56 writes "dtype" instead, which is accepted too;
//   * RoPE in every form transformers reads (configuration_utils / modeling_rope_utils.py,
//     RotaryEmbeddingConfigMixin.convert_rope_params_to_dict + standardize_rope_params of
//     transformers 5): top-level "rope_theta" and "rope_scaling" (4.x), or "rope_parameters"
//     (5.x); a non-null "rope_scaling" replaces "rope_parameters"; the type is "rope_type",
//     else the legacy "type", else "default"; rope_theta inside the dict wins over the
//     top-level one. Types "default", "linear", "dynamic" and "yarn" are implemented (see
//     RopeScaling); any other type is refused by name;
//   * null is an error naming the field for every field transformers gives no meaning to
//     null (rope_theta, rms_norm_eps, head_dim, max_position_embeddings, the booleans, ...);
//     null stays allowed where transformers defines it: num_key_value_heads, bos/eos/pad ids,
//     torch_dtype, rope_scaling / rope_parameters, sliding_window, layer_types, mlp_only_layers;
//   * sliding-window attention (Qwen3Config): sliding_window counts only when
//     use_sliding_window; layer_types absent -> layer i is "sliding_attention" iff
//     sliding_window is set and i >= max_window_layers (default 28); see attention_window().
//   * MoE defaults: decoder_sparse_step 1, norm_topk_prob false, router_aux_loss_coef 0.001,
//     mlp_only_layers [], output_router_logits false.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "twinkle/core/dtype.h"
#include "twinkle/core/error.h"

namespace twinkle {

struct ModelConfig {
  std::string model_type;                  ///< "qwen3" or "qwen3_moe"
  std::vector<std::string> architectures;  ///< e.g. {"Qwen3ForCausalLM"}; may be empty
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  ///< dense MLP width (qwen3_moe: the mlp_only_layers' MLP)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  ///< divides num_attention_heads (GQA groups)
  int64_t head_dim = 0;             ///< even (RoPE rotates pairs); may differ from hidden/heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  /// RoPE variant, transformers modeling_rope_utils.py (ROPE_INIT_FUNCTIONS of transformers 5).
  struct RopeScaling {
    std::string rope_type = "default";  ///< "default" | "linear" | "dynamic" | "yarn"
    double factor = 1.0;                ///< linear / dynamic / yarn (yarn: null -> max_pos / original)
    std::optional<double> attention_factor;  ///< yarn; absent -> from factor (and mscale)
    double beta_fast = 32.0, beta_slow = 1.0;  ///< yarn (transformers: `or 32` / `or 1`)
    std::optional<double> mscale, mscale_all_dim;  ///< yarn (DeepSeek-style attention factor)
    /// yarn: top-level original_max_position_embeddings, else the dict's, else
    /// max_position_embeddings (standardize_rope_params).
    int64_t original_max_position_embeddings = 0;
    bool truncate = true;  ///< yarn: floor/ceil the correction range
  };
  RopeScaling rope_scaling;
  bool attention_bias = false;
  double attention_dropout = 0.0;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 32768;
  double initializer_range = 0.02;
  DType torch_dtype = DType::F32;  ///< dtype of the published weights
  std::string hidden_act = "silu";
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_id;  ///< int or list in JSON; empty when absent/null
  std::optional<int64_t> pad_token_id;
  bool use_sliding_window = false;
  std::optional<int64_t> sliding_window = 4096;  ///< Qwen3Config default; null allowed
  std::optional<int64_t> max_window_layers = 28;  ///< Qwen3Config default; null allowed if unused
  /// As read ("full_attention" / "sliding_attention" per layer); empty = derived by
  /// transformers' rule from use_sliding_window / sliding_window / max_window_layers.
  std::vector<std::string> layer_types;
  bool use_cache = true;            ///< inference-only flag, kept for round trips

  // Qwen3-MoE (meaningful when model_type == "qwen3_moe"; zero / defaults for qwen3).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;  ///< top-k, 1 <= k <= num_experts
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  double router_aux_loss_coef = 0.001;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;  ///< layer indices using a dense MLP
  bool output_router_logits = false;

  /// The JSON object as read (empty object for a config built in code). save_model_config /
  /// to_json start from it so fields twinkle does not model survive a round trip.
  nlohmann::json raw = nlohmann::json::object();
  /// Path the config was read from ("" when built in code); used in error messages.
  std::string source;

  bool is_moe() const { return model_type == "qwen3_moe"; }
  /// Sliding window of decoder layer `layer` (0-based): 0 = full causal attention, w > 0 = a
  /// query at position t sees keys t-w+1 .. t (transformers masking_utils
  /// sliding_window_overlay: kv_idx > q_idx - sliding_window, i.e. w keys including itself).
  /// Window iff layer_types[layer] == "sliding_attention" (layer_types given), else iff
  /// use_sliding_window && sliding_window && layer >= max_window_layers (Qwen3Config).
  int64_t attention_window(int64_t layer) const;
  /// Whether decoder layer `layer` (0-based) uses the sparse MoE block rather than a dense MLP:
  /// transformers' Qwen3MoeDecoderLayer rule `layer not in mlp_only_layers and num_experts > 0
  /// and (layer + 1) % decoder_sparse_step == 0`. Always false for qwen3.
  bool is_moe_layer(int64_t layer) const;
  /// Throws twinkle::Error (naming `source` and the field) when a value makes no sense:
  /// sizes <= 0, num_attention_heads % num_key_value_heads != 0, odd head_dim, top-k outside
  /// [1, num_experts], mlp_only_layers entries outside [0, num_hidden_layers), eps / theta
  /// <= 0, dropout outside [0, 1), unknown model_type, hidden_act other than "silu", a
  /// rope_type other than default/linear/dynamic/yarn or its factor <= 0, layer_types of the
  /// wrong length or with another value, a layer with a window while sliding_window is unset
  /// (transformers fails there too) or < 1. load_model_config and save_model_config call it.
  void validate() const;
};

/// Parses `path` (a config.json, or a directory containing one). Throws twinkle::Error:
/// "config.json not found in <dir>" / "<path>: cannot open"; malformed JSON (with the
/// parser's byte position); not an object; "unknown model_type 'x' in <file> (supported:
/// qwen3, qwen3_moe)"; a missing required field; a field of the wrong JSON type (naming it
/// and the expected type, e.g. "expected integer"); a null field where null has no meaning
/// ("field 'rope_theta' is null"); unsupported torch_dtype / hidden_act; a RoPE type other
/// than default/linear/dynamic/yarn ("rope_type 'llama3' is not supported"), a scaled type
/// without its factor, partial_rotary_factor != 1; and the checks of ModelConfig::validate.
ModelConfig load_model_config(const std::string& path);

/// `cfg.raw` with every modelled field overwritten by the struct's value (MoE fields only for
/// qwen3_moe; torch_dtype written under the key the input used, "torch_dtype" by default;
/// rope_theta inside "rope_parameters" when the input used that form).
nlohmann::json to_json(const ModelConfig& cfg);

/// Validates, then writes to_json(cfg) (2-space indent, sorted keys, as transformers'
/// to_json_file) to `path` atomically. Throws twinkle::Error naming `path` on failure.
void save_model_config(const ModelConfig& cfg, const std::string& path);

}  // namespace twinkle
