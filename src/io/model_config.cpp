// Hugging Face config.json for Qwen3 / Qwen3-MoE (see twinkle/io/model_config.h).
#include "twinkle/io/model_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "io_util.h"
#include "twinkle/core/error.h"
#include "twinkle/io/safetensors.h"

namespace twinkle {

using json = nlohmann::json;

namespace {

std::string short_dump(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Field accessors over the parsed object; every error names the file and the field.
struct Fields {
  const json& j;
  const std::string& file;

  [[noreturn]] void wrong(const std::string& key, const char* expected, const json& v) const {
    throw Error(file + ": field '" + key + "': expected " + expected + ", got " + v.type_name() + " " + short_dump(v));
  }
  [[noreturn]] void missing(const std::string& key) const {
    throw Error(file + ": missing required field '" + key + "'");
  }
  // Present and not null.
  const json* find(const std::string& key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
  }
  // Present (maybe null).
  bool has(const std::string& key) const { return j.find(key) != j.end(); }
  // Present and not null; absent -> nullptr; null -> error naming the field (transformers gives
  // null no meaning for these fields: it would fail later or silently take a default).
  const json* find_strict(const std::string& key) const {
    auto it = j.find(key);
    if (it == j.end()) return nullptr;
    if (it->is_null())
      throw Error(file + ": field '" + key + "' is null; give a value or leave the field out for the default");
    return &*it;
  }
  int64_t as_int(const std::string& key, const json& v) const {
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(file + ": field '" + key + "': value " + v.dump() + " is out of range");
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    wrong(key, "integer", v);
  }
  int64_t req_int(const std::string& key) const {
    const json* v = find_strict(key);
    if (!v) missing(key);
    return as_int(key, *v);
  }
  int64_t opt_int(const std::string& key, int64_t def) const {
    const json* v = find_strict(key);
    return v ? as_int(key, *v) : def;
  }
  std::optional<int64_t> maybe_int(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return as_int(key, *v);
  }
  double as_double(const std::string& key, const json& v) const {
    if (!v.is_number()) wrong(key, "number", v);
    return v.get<double>();
  }
  double opt_double(const std::string& key, double def) const {
    const json* v = find_strict(key);
    if (!v) return def;
    if (!v->is_number()) wrong(key, "number", *v);
    return v->get<double>();
  }
  bool opt_bool(const std::string& key, bool def) const {
    const json* v = find_strict(key);
    if (!v) return def;
    if (!v->is_boolean()) wrong(key, "boolean (true/false)", *v);
    return v->get<bool>();
  }
  std::optional<std::string> maybe_string(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong(key, "string", *v);
    return v->get<std::string>();
  }
  std::vector<int64_t> opt_int_list(const std::string& key, bool allow_scalar) const {
    std::vector<int64_t> out;
    const json* v = find(key);
    if (!v) return out;
    if (allow_scalar && !v->is_array()) {
      if (!v->is_number_integer()) wrong(key, "integer or list of integers", *v);
      out.push_back(as_int(key, *v));
      return out;
    }
    if (!v->is_array()) wrong(key, "list of integers", *v);
    for (const auto& e : *v) {
      if (!e.is_number_integer()) wrong(key, "list of integers", *v);
      out.push_back(as_int(key, e));
    }
    return out;
  }
};

// RoPE settings as transformers 5 reads them (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict
// and standardize_rope_params, then the reads of the _compute_*_parameters functions in
// modeling_rope_utils.py). Needs c.max_position_embeddings.
void parse_rope(const Fields& F, ModelConfig& c) {
  const std::string& file = F.file;
  c.rope_theta = F.opt_double("rope_theta", 10000.0);
  if (const json* prf = F.find_strict("partial_rotary_factor"))
    if (F.as_double("partial_rotary_factor", *prf) != 1.0)
      throw Error(file + ": field 'partial_rotary_factor' " + prf->dump() + " is not supported (Qwen3 rotates the whole head)");
  // A non-empty rope_scaling replaces rope_parameters (`rope_scaling or self.rope_parameters`).
  const json* dict = nullptr;
  std::string where;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const json* v = F.find(key);  // null = not set
    if (!v) continue;
    if (!v->is_object()) F.wrong(key, "object or null", *v);
    if (!v->empty()) {
      dict = v;
      where = key;
      break;
    }
  }
  auto& r = c.rope_scaling;
  r = ModelConfig::RopeScaling{};
  if (!dict) return;
  // Entry `k` of the dict: absent -> nullptr; null -> error unless null_ok (then nullptr).
  auto entry = [&](const char* k, bool null_ok) -> const json* {
    auto it = dict->find(k);
    if (it == dict->end()) return nullptr;
    if (it->is_null()) {
      if (null_ok) return nullptr;
      throw Error(file + ": field '" + where + "." + k + "' is null; give a value or leave it out");
    }
    return &*it;
  };
  auto number = [&](const char* k, const json& v) {
    if (!v.is_number()) F.wrong(where + "." + k, "number", v);
    return v.get<double>();
  };
  const json* rt = entry("rope_type", false);
  if (!rt) rt = entry("type", false);  // legacy spelling (setdefault("rope_type", get("type", "default")))
  if (rt) {
    if (!rt->is_string()) F.wrong(where + ".rope_type", "string", *rt);
    r.rope_type = rt->get<std::string>();
  }
  if (const json* th = entry("rope_theta", false)) c.rope_theta = number("rope_theta", *th);
  if (const json* prf = entry("partial_rotary_factor", false))
    if (number("partial_rotary_factor", *prf) != 1.0)
      throw Error(file + ": field '" + where + ".partial_rotary_factor' " + prf->dump() +
                  " is not supported (Qwen3 rotates the whole head)");
  const std::string& t = r.rope_type;
  if (t == "default") return;
  if (t != "linear" && t != "dynamic" && t != "yarn")
    throw Error(file + ": field '" + where + "': rope_type '" + t +
                "' is not supported (supported: default, linear, dynamic, yarn)");
  if (dict->find("factor") == dict->end())
    throw Error(file + ": field '" + where + "': rope_type '" + t + "' needs 'factor'");
  if (t != "yarn") {
    r.factor = number("factor", *entry("factor", false));
    return;
  }
  // yarn
  if (F.has("original_max_position_embeddings")) {  // top level wins (Phi3-style configs)
    r.original_max_position_embeddings = F.req_int("original_max_position_embeddings");
  } else if (const json* om = entry("original_max_position_embeddings", false)) {
    r.original_max_position_embeddings = F.as_int(where + ".original_max_position_embeddings", *om);
  } else {
    r.original_max_position_embeddings = c.max_position_embeddings;
  }
  if (r.original_max_position_embeddings <= 0)
    throw Error(file + ": field '" + where + ".original_max_position_embeddings' must be > 0, got " +
                std::to_string(r.original_max_position_embeddings));
  if (const json* f = entry("factor", true)) {
    r.factor = number("factor", *f);
  } else {  // null: the ratio of the context lengths (DeepSeek-V3 configs)
    r.factor = static_cast<double>(c.max_position_embeddings) / static_cast<double>(r.original_max_position_embeddings);
  }
  if (const json* a = entry("attention_factor", true)) r.attention_factor = number("attention_factor", *a);
  if (const json* m = entry("mscale", true)) r.mscale = number("mscale", *m);
  if (const json* m = entry("mscale_all_dim", true)) r.mscale_all_dim = number("mscale_all_dim", *m);
  // `get("beta_fast") or 32`: absent, null and 0 all mean the default.
  if (const json* b = entry("beta_fast", true)) r.beta_fast = number("beta_fast", *b) != 0 ? number("beta_fast", *b) : 32.0;
  if (const json* b = entry("beta_slow", true)) r.beta_slow = number("beta_slow", *b) != 0 ? number("beta_slow", *b) : 1.0;
  if (const json* tr = entry("truncate", false)) {
    if (!tr->is_boolean()) F.wrong(where + ".truncate", "boolean (true/false)", *tr);
    r.truncate = tr->get<bool>();
  }
}

std::string who(const ModelConfig& c) { return c.source.empty() ? std::string("ModelConfig") : c.source; }

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return num_experts > 0 && decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::attention_window(int64_t layer) const {
  if (!use_sliding_window || !sliding_window) return 0;  // Qwen3Config: sliding_window = None
  const bool sliding = !layer_types.empty()
                           ? (layer >= 0 && layer < static_cast<int64_t>(layer_types.size()) &&
                              layer_types[static_cast<size_t>(layer)] == "sliding_attention")
                           : (max_window_layers && layer >= *max_window_layers);
  return sliding ? *sliding_window : 0;
}

void ModelConfig::validate() const {
  const std::string f = who(*this);
  auto bad = [&](const std::string& field, const std::string& what) {
    throw Error(f + ": field '" + field + "' " + what);
  };
  if (model_type != "qwen3" && model_type != "qwen3_moe")
    throw Error("unknown model_type '" + model_type + "' in " + f + " (supported: qwen3, qwen3_moe)");
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0) bad(field, "must be > 0, got " + std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  if (num_attention_heads % num_key_value_heads != 0)
    bad("num_key_value_heads", "(" + std::to_string(num_key_value_heads) + ") must divide num_attention_heads (" +
                                   std::to_string(num_attention_heads) + ")");
  if (head_dim % 2 != 0) bad("head_dim", "must be even (RoPE rotates pairs of dims), got " + std::to_string(head_dim));
  if (!(rms_norm_eps > 0)) bad("rms_norm_eps", "must be > 0, got " + std::to_string(rms_norm_eps));
  if (!(rope_theta > 0)) bad("rope_theta", "must be > 0, got " + std::to_string(rope_theta));
  if (!(attention_dropout >= 0 && attention_dropout < 1))
    bad("attention_dropout", "must be in [0, 1), got " + std::to_string(attention_dropout));
  if (!(initializer_range >= 0)) bad("initializer_range", "must be >= 0, got " + std::to_string(initializer_range));
  if (hidden_act != "silu") bad("hidden_act", "'" + hidden_act + "' is not supported (supported: silu)");
  {
    const std::string& t = rope_scaling.rope_type;
    if (t != "default" && t != "linear" && t != "dynamic" && t != "yarn")
      bad("rope_scaling", "rope_type '" + t + "' is not supported (supported: default, linear, dynamic, yarn)");
    if (t != "default" && !(rope_scaling.factor > 0))
      bad("rope_scaling", "factor must be > 0, got " + std::to_string(rope_scaling.factor));
    if (t == "yarn" && rope_scaling.original_max_position_embeddings <= 0)
      bad("rope_scaling", "original_max_position_embeddings must be > 0 for yarn");
  }
  if (!layer_types.empty() && static_cast<int64_t>(layer_types.size()) != num_hidden_layers)
    bad("layer_types", "has " + std::to_string(layer_types.size()) + " entries but num_hidden_layers is " +
                           std::to_string(num_hidden_layers));
  for (size_t i = 0; i < layer_types.size(); ++i)
    if (layer_types[i] != "full_attention" && layer_types[i] != "sliding_attention")
      bad("layer_types", "entry " + std::to_string(i) + " '" + layer_types[i] +
                             "' is not supported (full_attention, sliding_attention)");
  const bool window_set = use_sliding_window && sliding_window.has_value();
  if (window_set && *sliding_window < 1) bad("sliding_window", "must be >= 1, got " + std::to_string(*sliding_window));
  if (window_set && layer_types.empty() && !max_window_layers)
    bad("max_window_layers", "is null but use_sliding_window is true (transformers compares layer >= max_window_layers)");
  if (!window_set)
    for (size_t i = 0; i < layer_types.size(); ++i)
      if (layer_types[i] == "sliding_attention")
        bad("layer_types", "marks layer " + std::to_string(i) +
                               " 'sliding_attention' but no window is set (use_sliding_window false or "
                               "sliding_window null; transformers then fails to build the mask)");
  if (is_moe() && window_set)
    for (int64_t l = 0; l < num_hidden_layers; ++l)
      if (attention_window(l) > 0)
        bad("use_sliding_window", "is true; sliding-window attention is implemented for qwen3 only, not qwen3_moe");
  if (torch_dtype != DType::F32 && torch_dtype != DType::BF16 && torch_dtype != DType::F16 && torch_dtype != DType::F64)
    bad("torch_dtype", "must be a float dtype, got " + dtype_name(torch_dtype));
  if (bos_token_id && *bos_token_id < 0) bad("bos_token_id", "must be >= 0");
  if (pad_token_id && *pad_token_id < 0) bad("pad_token_id", "must be >= 0");
  for (auto e : eos_token_id)
    if (e < 0) bad("eos_token_id", "must be >= 0, got " + std::to_string(e));
  if (is_moe()) {
    positive("num_experts", num_experts);
    positive("moe_intermediate_size", moe_intermediate_size);
    if (num_experts_per_tok < 1 || num_experts_per_tok > num_experts)
      bad("num_experts_per_tok", "must be in [1, num_experts=" + std::to_string(num_experts) + "], got " +
                                     std::to_string(num_experts_per_tok));
    positive("decoder_sparse_step", decoder_sparse_step);
    if (!(router_aux_loss_coef >= 0))
      bad("router_aux_loss_coef", "must be >= 0, got " + std::to_string(router_aux_loss_coef));
    for (auto l : mlp_only_layers)
      if (l < 0 || l >= num_hidden_layers)
        bad("mlp_only_layers", "entry " + std::to_string(l) + " is outside [0, num_hidden_layers=" +
                                   std::to_string(num_hidden_layers) + ")");
  }
}

ModelConfig load_model_config(const std::string& path) {
  std::string file = path;
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    file = (path.empty() || path.back() == '/') ? path + "config.json" : path + "/config.json";
    if (::stat(file.c_str(), &st) != 0) throw Error("config.json not found in " + path);
  } else if (::stat(path.c_str(), &st) != 0) {
    auto slash = path.find_last_of('/');
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    throw Error(base + " not found in " + io_detail::parent_dir(path));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(file + ": cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    throw Error(file + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const json::exception& e) {  // e.g. out_of_range for a number like 1e999
    throw Error(file + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(file + ": must be a JSON object, got " + std::string(j.type_name()));

  Fields F{j, file};
  ModelConfig c;
  c.source = file;
  c.raw = j;
  auto mt = F.maybe_string("model_type");
  if (!mt) F.missing("model_type");
  c.model_type = *mt;
  if (c.model_type != "qwen3" && c.model_type != "qwen3_moe")
    throw Error("unknown model_type '" + c.model_type + "' in " + file + " (supported: qwen3, qwen3_moe)");

  if (const json* a = F.find("architectures")) {
    if (!a->is_array()) F.wrong("architectures", "list of strings", *a);
    for (const auto& e : *a) {
      if (!e.is_string()) F.wrong("architectures", "list of strings", *a);
      c.architectures.push_back(e.get<std::string>());
    }
  }
  c.vocab_size = F.req_int("vocab_size");
  c.hidden_size = F.req_int("hidden_size");
  c.intermediate_size = F.req_int("intermediate_size");
  c.num_hidden_layers = F.req_int("num_hidden_layers");
  c.num_attention_heads = F.req_int("num_attention_heads");
  c.num_key_value_heads = F.maybe_int("num_key_value_heads").value_or(c.num_attention_heads);  // null: MHA
  if (const json* hd = F.find_strict("head_dim")) {
    c.head_dim = F.as_int("head_dim", *hd);
  } else if (!c.is_moe()) {
    c.head_dim = 128;  // Qwen3Config default
  } else {
    if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0)
      throw Error(file + ": field 'head_dim' is absent and hidden_size (" + std::to_string(c.hidden_size) +
                  ") is not divisible by num_attention_heads (" + std::to_string(c.num_attention_heads) + ")");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.rms_norm_eps = F.opt_double("rms_norm_eps", 1e-6);
  c.attention_bias = F.opt_bool("attention_bias", false);
  c.attention_dropout = F.opt_double("attention_dropout", 0.0);
  c.tie_word_embeddings = F.opt_bool("tie_word_embeddings", false);
  c.max_position_embeddings = F.opt_int("max_position_embeddings", 32768);
  parse_rope(F, c);
  c.initializer_range = F.opt_double("initializer_range", 0.02);
  {
    const char* key = F.find("torch_dtype") ? "torch_dtype" : "dtype";
    if (auto td = F.maybe_string(key)) {
      try {
        c.torch_dtype = dtype_from_torch_name(*td);
      } catch (const Error& e) {
        throw Error(file + ": field '" + key + "': " + e.what());
      }
    }
  }
  if (const json* ha = F.find_strict("hidden_act")) {
    if (!ha->is_string()) F.wrong("hidden_act", "string", *ha);
    c.hidden_act = ha->get<std::string>();
  }
  if (c.hidden_act != "silu")
    throw Error(file + ": field 'hidden_act': '" + c.hidden_act + "' is not supported (supported: silu)");
  c.bos_token_id = F.maybe_int("bos_token_id");
  c.pad_token_id = F.maybe_int("pad_token_id");
  c.eos_token_id = F.opt_int_list("eos_token_id", true);
  c.use_sliding_window = F.opt_bool("use_sliding_window", false);
  if (F.has("sliding_window")) c.sliding_window = F.maybe_int("sliding_window");
  if (F.has("max_window_layers")) c.max_window_layers = F.maybe_int("max_window_layers");
  if (const json* lt = F.find("layer_types")) {
    if (!lt->is_array()) F.wrong("layer_types", "list of strings", *lt);
    for (const auto& e : *lt) {
      if (!e.is_string()) F.wrong("layer_types", "list of strings", *lt);
      c.layer_types.push_back(e.get<std::string>());
    }
  }
  c.use_cache = F.opt_bool("use_cache", true);
  if (c.is_moe()) {
    c.num_experts = F.req_int("num_experts");
    c.num_experts_per_tok = F.req_int("num_experts_per_tok");
    c.moe_intermediate_size = F.req_int("moe_intermediate_size");
    c.norm_topk_prob = F.opt_bool("norm_topk_prob", false);
    c.router_aux_loss_coef = F.opt_double("router_aux_loss_coef", 0.001);
    c.decoder_sparse_step = F.opt_int("decoder_sparse_step", 1);
    c.mlp_only_layers = F.opt_int_list("mlp_only_layers", false);
    c.output_router_logits = F.opt_bool("output_router_logits", false);
  }
  c.validate();
  return c;
}

json to_json(const ModelConfig& c) {
  json j = c.raw.is_object() ? c.raw : json::object();
  j["model_type"] = c.model_type;
  if (!c.architectures.empty() || j.contains("architectures")) j["architectures"] = c.architectures;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    j["rope_parameters"]["rope_theta"] = c.rope_theta;
  else
    j["rope_theta"] = c.rope_theta;
  j["attention_bias"] = c.attention_bias;
  j["attention_dropout"] = c.attention_dropout;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = c.initializer_range;
  const char* dkey = (j.contains("dtype") && !j.contains("torch_dtype")) ? "dtype" : "torch_dtype";
  j[dkey] = dtype_torch_name(c.torch_dtype);
  j["hidden_act"] = c.hidden_act;
  auto opt = [&](const char* k, const std::optional<int64_t>& v) {
    if (v) j[k] = *v;
    else if (j.contains(k)) j[k] = nullptr;
  };
  opt("bos_token_id", c.bos_token_id);
  opt("pad_token_id", c.pad_token_id);
  if (c.eos_token_id.empty()) {
    if (j.contains("eos_token_id")) j["eos_token_id"] = nullptr;
  } else if (c.eos_token_id.size() == 1 && !(j.contains("eos_token_id") && j["eos_token_id"].is_array())) {
    j["eos_token_id"] = c.eos_token_id[0];
  } else {
    j["eos_token_id"] = c.eos_token_id;
  }
  j["use_sliding_window"] = c.use_sliding_window;
  auto nullable = [&](const char* k, const std::optional<int64_t>& v) {
    if (v) j[k] = *v;
    else j[k] = nullptr;
  };
  nullable("sliding_window", c.sliding_window);
  nullable("max_window_layers", c.max_window_layers);
  if (!c.layer_types.empty()) j["layer_types"] = c.layer_types;
  const bool has_rope_dict = (j.contains("rope_scaling") && j["rope_scaling"].is_object() && !j["rope_scaling"].empty()) ||
                             (j.contains("rope_parameters") && j["rope_parameters"].is_object());
  if (!has_rope_dict && c.rope_scaling.rope_type != "default") {  // built in code: write the variant out
    const auto& r = c.rope_scaling;
    json d{{"rope_type", r.rope_type}, {"factor", r.factor}};
    if (r.rope_type == "yarn") {
      d["original_max_position_embeddings"] = r.original_max_position_embeddings;
      d["beta_fast"] = r.beta_fast;
      d["beta_slow"] = r.beta_slow;
      d["truncate"] = r.truncate;
      if (r.attention_factor) d["attention_factor"] = *r.attention_factor;
      if (r.mscale) d["mscale"] = *r.mscale;
      if (r.mscale_all_dim) d["mscale_all_dim"] = *r.mscale_all_dim;
    }
    j["rope_scaling"] = d;
  }
  j["use_cache"] = c.use_cache;
  if (c.is_moe()) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["output_router_logits"] = c.output_router_logits;
  }
  return j;
}

void save_model_config(const ModelConfig& cfg, const std::string& path) {
  cfg.validate();
  io_detail::write_file_atomic(path, to_json(cfg).dump(2) + "\n");
}

}  // namespace twinkle
