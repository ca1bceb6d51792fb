// Stop ids from generation_config.json / config.json (see twinkle/io/generation_config.h).
#include "twinkle/io/generation_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "twinkle/core/error.h"

namespace twinkle {

std::vector<int64_t> load_eos_token_ids(const std::string& model_dir, const ModelConfig& cfg) {
  const std::filesystem::path file = std::filesystem::path(model_dir) / "generation_config.json";
  if (!std::filesystem::exists(file)) return cfg.eos_token_id;
  const std::string f = file.string();
  std::ifstream in(file, std::ios::binary);
  check(static_cast<bool>(in), f + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(f + ": malformed JSON: " + e.what());
  }
  check(j.is_object(), f + ": must be a JSON object");
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return cfg.eos_token_id;
  auto bad = [&] {
    throw Error(f + ": field 'eos_token_id' must be an integer >= 0 or a list of them, got " + it->dump());
  };
  std::vector<int64_t> out;
  auto add = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) bad();
    out.push_back(v.get<int64_t>());
  };
  if (it->is_array()) {
    for (const auto& v : *it) add(v);
  } else {
    add(*it);
  }
  return out;
}

}  // namespace twinkle
