#include "twinkle/model/lora_files.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "twinkle/core/error.h"

namespace twinkle {

using json = nlohmann::json;

std::string peft_key(const std::string& hf_name) { return "base_model.model." + hf_name; }

std::string peft_adapter_config_json(const LoraConfig& cfg, const std::string& base_model) {
  json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = base_model;
  j["r"] = cfg.r;
  j["lora_alpha"] = cfg.lora_alpha;
  j["lora_dropout"] = cfg.lora_dropout;
  const auto t = lora_target_list(cfg);
  if (cfg.target_modules_regex) j["target_modules"] = cfg.target_modules;  // PEFT's regex string, as read
  else if (t.size() == 1 && t[0] == "all-linear") j["target_modules"] = "all-linear";
  else j["target_modules"] = t;
  j["use_rslora"] = cfg.use_rslora;
  if (cfg.init_lora_weights == "gaussian") j["init_lora_weights"] = "gaussian";
  else j["init_lora_weights"] = cfg.init_lora_weights == "true";
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["use_dora"] = false;
  j["inference_mode"] = true;
  j["modules_to_save"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["revision"] = nullptr;
  return j.dump(2) + "\n";
}

namespace {
json read_json(const std::string& path) {
  std::ifstream f(path);
  check(f.good(), "cannot open adapter config " + path);
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
}
}  // namespace

std::string peft_base_model(const std::string& path) {
  json j = read_json(path);
  return j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()
             ? j["base_model_name_or_path"].get<std::string>()
             : std::string();
}

LoraConfig read_peft_adapter_config(const std::string& path) {
  json j = read_json(path);
  auto field = [&](const char* k) -> const json& {
    check(j.contains(k) && !j[k].is_null(), path + ": field '" + k + "' is missing");
    return j[k];
  };
  try {
    check(field("peft_type").get<std::string>() == "LORA",
          path + ": peft_type '" + j["peft_type"].get<std::string>() + "' is not LORA");
    LoraConfig c;
    c.r = field("r").get<int64_t>();
    c.lora_alpha = field("lora_alpha").get<double>();
    if (j.contains("lora_dropout") && !j["lora_dropout"].is_null()) c.lora_dropout = j["lora_dropout"].get<double>();
    if (j.contains("use_rslora") && !j["use_rslora"].is_null()) c.use_rslora = j["use_rslora"].get<bool>();
    if (j.contains("init_lora_weights")) {
      const json& w = j["init_lora_weights"];
      c.init_lora_weights = w.is_string() ? w.get<std::string>() : (w.is_boolean() && !w.get<bool>() ? "false" : "true");
    }
    // PEFT >= 0.17 target_parameters: LoRA on nn.Parameters through lora.ParamWrapper, the way
    // PEFT reaches transformers 5's fused 3-D experts (mlp.experts.gate_up_proj [E, 2I, H],
    // down_proj [E, H, I]). Not a renaming of twinkle's per-expert pairs: ParamWrapper keeps one
    // lora_A [r E, in] / lora_B [out, r E] per parameter with in / out read off the 3-D shape
    // (so for gate_up_proj A sits on the 2I side and B on H: W_e += s A_e^T B_e^T), gate and up
    // share one factor, B's columns interleave rank and expert, nested wrappers add
    // "base_layer." to the keys, and it refuses lora_dropout. twinkle writes and reads the
    // transformers 4 per-expert layout (mlp.experts.{e}.{gate,up,down}_proj, the released
    // checkpoints' names), so such a file is refused by name here.
    if (j.contains("target_parameters") && !j["target_parameters"].is_null() &&
        !(j["target_parameters"].is_array() && j["target_parameters"].empty()))
      throw Error(path + ": field 'target_parameters' = " + j["target_parameters"].dump() +
                  " is not supported: it is PEFT's ParamWrapper LoRA on fused 3-D expert parameters (transformers 5's "
                  "mlp.experts.gate_up_proj / down_proj), a different adapter format; twinkle reads and writes the "
                  "transformers 4 per-expert layout (target_modules reaching mlp.experts.{e}.gate_proj / up_proj / "
                  "down_proj, as in the released Qwen3-MoE checkpoints)");
    const json& t = field("target_modules");
    if (t.is_string()) {
      // PEFT: a string other than "all-linear" is a regular expression full-matched against every
      // module name (check_target_module_exists), not a module name.
      c.target_modules = t.get<std::string>();
      c.target_modules_regex = c.target_modules != "all-linear";
    } else {
      c.target_modules.clear();
      for (const auto& x : t) c.target_modules += (c.target_modules.empty() ? "" : ",") + x.get<std::string>();
    }
    auto off = [&](const char* k, bool bad, const std::string& what) {
      check(!(j.contains(k) && bad), path + ": field '" + k + "' = " + j[k].dump() + " is not supported (" + what + ")");
    };
    off("use_dora", j.contains("use_dora") && j["use_dora"].is_boolean() && j["use_dora"].get<bool>(), "no DoRA");
    off("bias", j.contains("bias") && j["bias"].is_string() && j["bias"].get<std::string>() != "none", "bias must be none");
    off("modules_to_save", j.contains("modules_to_save") && !j["modules_to_save"].is_null(), "must be null");
    off("layers_to_transform", j.contains("layers_to_transform") && !j["layers_to_transform"].is_null(), "must be null");
    // PEFT fields that change what the adapter computes or which modules it holds: a non-default
    // value would otherwise be dropped silently (e.g. alpha_pattern's per-module scaling).
    auto non_empty = [&](const char* k) {
      return j.contains(k) && !j[k].is_null() && !((j[k].is_object() || j[k].is_array()) && j[k].empty());
    };
    off("rank_pattern", non_empty("rank_pattern"), "per-module ranks; must be {}");
    off("alpha_pattern", non_empty("alpha_pattern"), "per-module lora_alpha; must be {}");
    off("exclude_modules", non_empty("exclude_modules"), "must be null");
    off("lora_bias", j.contains("lora_bias") && j["lora_bias"].is_boolean() && j["lora_bias"].get<bool>(),
        "a bias on lora_B; must be false");
    off("trainable_token_indices", non_empty("trainable_token_indices"), "trained embedding rows; must be null");
    off("layer_replication", non_empty("layer_replication"), "must be null");
    return c;
  } catch (const json::exception& e) {
    throw Error(path + ": a field has the wrong type (" + e.what() + ")");
  }
}

void merge_lora_into(std::vector<std::pair<std::string, Tensor>>& base,
                     const std::vector<std::pair<std::string, Tensor>>& adapter, double scaling) {
  std::map<std::string, const Tensor*> ad;
  for (const auto& [n, t] : adapter) ad[n] = &t;
  std::map<std::string, Tensor*> bw;
  for (auto& [n, t] : base) bw[n] = &t;
  const std::string suf = ".lora_A.weight";
  for (const auto& [n, A] : ad) {
    if (n.size() <= suf.size() || n.compare(n.size() - suf.size(), suf.size(), suf) != 0) continue;
    const std::string m = n.substr(0, n.size() - suf.size());
    auto bi = ad.find(m + ".lora_B.weight");
    check(bi != ad.end(), "merge_lora: " + n + " has no " + m + ".lora_B.weight");
    auto wi = bw.find(m + ".weight");
    check(wi != bw.end(), "merge_lora: the base model has no " + m + ".weight");
    const Tensor& B = *bi->second;
    Tensor& W = *wi->second;
    const int64_t r = A->shape()[0], in = A->shape()[1], out = B.shape()[0];
    check(B.shape()[1] == r && W.shape()[0] == out && W.shape()[1] == in,
          "merge_lora: shapes of " + m + " disagree (W " + shape_str(W.shape()) + ", A " + shape_str(A->shape()) +
              ", B " + shape_str(B.shape()) + ")");
    const float* a = A->f32();
    const float* b = B.f32();
    float* w = W.f32();
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (int64_t k = 0; k < r; ++k) acc += static_cast<double>(b[o * r + k]) * a[k * in + i];
        w[o * in + i] = static_cast<float>(w[o * in + i] + scaling * acc);
      }
  }
}

}  // namespace twinkle
