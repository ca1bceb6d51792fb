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
    const json* v = find(key);
    if (!v) missing(key);
    return as_int(key, *v);
  }
  int64_t opt_int(const std::string& key, int64_t def) const {
    const json* v = find(key);
    return v ? as_int(key, *v) : def;
  }
  std::optional<int64_t> maybe_int(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return as_int(key, *v);
  }
  double opt_double(const std::string& key, double def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) wrong(key, "number", *v);
    return v->get<double>();
  }
  bool opt_bool(const std::string& key, bool def) const {
    const json* v = find(key);
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

bool is_rope_default(const json& obj) {
  // {"rope_type": "default"} (or legacy {"type": "default"}) means plain RoPE.
  for (const char* k : {"rope_type", "type"}) {
    auto it = obj.find(k);
    if (it != obj.end()) return it->is_string() && it->get<std::string>() == "default";
  }
  return false;
}

std::string who(const ModelConfig& c) { return c.source.empty() ? std::string("ModelConfig") : c.source; }

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return num_experts > 0 && decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
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
  if (use_sliding_window) bad("use_sliding_window", "is true; sliding-window attention is not supported");
  if (torch_dtype != DType::F32 && torch_dtype != DType::BF16 && torch_dtype != DType::F16)
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
  c.num_key_value_heads = F.opt_int("num_key_value_heads", c.num_attention_heads);
  if (const json* hd = F.find("head_dim")) {
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
  c.rope_theta = F.opt_double("rope_theta", 10000.0);
  if (const json* rs = F.find("rope_scaling")) {
    if (!rs->is_object() || !is_rope_default(*rs))
      throw Error(file + ": field 'rope_scaling' " + short_dump(*rs) +
                  " is not supported (only null, i.e. plain RoPE; YaRN / linear / dynamic scaling are not implemented)");
  }
  if (const json* rp = F.find("rope_parameters")) {
    if (!rp->is_object()) F.wrong("rope_parameters", "object", *rp);
    auto rt = rp->find("rope_type");
    if (rt != rp->end() && !(rt->is_string() && rt->get<std::string>() == "default"))
      throw Error(file + ": field 'rope_parameters' " + short_dump(*rp) +
                  " is not supported (only rope_type 'default', i.e. plain RoPE)");
    Fields R{*rp, file};
    if (R.find("rope_theta")) c.rope_theta = R.opt_double("rope_theta", c.rope_theta);
  }
  c.attention_bias = F.opt_bool("attention_bias", false);
  c.attention_dropout = F.opt_double("attention_dropout", 0.0);
  c.tie_word_embeddings = F.opt_bool("tie_word_embeddings", false);
  c.max_position_embeddings = F.opt_int("max_position_embeddings", 32768);
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
  if (auto ha = F.maybe_string("hidden_act")) c.hidden_act = *ha;
  if (c.hidden_act != "silu")
    throw Error(file + ": field 'hidden_act': '" + c.hidden_act + "' is not supported (supported: silu)");
  c.bos_token_id = F.maybe_int("bos_token_id");
  c.pad_token_id = F.maybe_int("pad_token_id");
  c.eos_token_id = F.opt_int_list("eos_token_id", true);
  c.use_sliding_window = F.opt_bool("use_sliding_window", false);
  if (c.use_sliding_window)
    throw Error(file + ": field 'use_sliding_window' is true; sliding-window attention is not supported");
  if (const json* lt = F.find("layer_types")) {
    if (!lt->is_array()) F.wrong("layer_types", "list of strings", *lt);
    for (const auto& e : *lt)
      if (!e.is_string() || e.get<std::string>() != "full_attention")
        throw Error(file + ": field 'layer_types' contains " + short_dump(e) +
                    "; only 'full_attention' layers are supported");
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
