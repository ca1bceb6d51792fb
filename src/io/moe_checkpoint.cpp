// Expert tensors of a Qwen3-MoE checkpoint vs config.json (see twinkle/io/moe_checkpoint.h).
#include "twinkle/io/moe_checkpoint.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>

#include "twinkle/core/error.h"

namespace twinkle {

namespace {

// "model.layers.<l>.mlp.<rest>" -> l and rest; false for other names.
bool split_mlp_name(const std::string& n, int64_t& layer, std::string& rest) {
  static const std::string pre = "model.layers.";
  if (n.compare(0, pre.size(), pre) != 0) return false;
  size_t i = pre.size(), j = i;
  while (j < n.size() && n[j] >= '0' && n[j] <= '9') ++j;
  if (j == i || n.compare(j, 5, ".mlp.") != 0) return false;
  layer = std::strtoll(n.substr(i, j - i).c_str(), nullptr, 10);
  rest = n.substr(j + 5);
  return true;
}

}  // namespace

void check_moe_checkpoint(const ModelConfig& cfg, const std::vector<std::string>& names, const std::string& source) {
  // layer -> expert -> projections present; layer -> router present
  std::map<int64_t, std::map<int64_t, std::set<std::string>>> experts;
  std::set<int64_t> routers;
  std::map<int64_t, std::string> example;
  for (const auto& n : names) {
    int64_t l = 0;
    std::string rest;
    if (!split_mlp_name(n, l, rest)) continue;
    if (rest == "gate.weight") {
      routers.insert(l);
      example.emplace(l, n);
    } else if (rest.compare(0, 8, "experts.") == 0) {
      size_t j = 8;
      while (j < rest.size() && rest[j] >= '0' && rest[j] <= '9') ++j;
      if (j == 8 || j >= rest.size() || rest[j] != '.') continue;
      const int64_t e = std::strtoll(rest.substr(8, j - 8).c_str(), nullptr, 10);
      const std::string proj = rest.substr(j + 1);
      experts[l][e].insert(proj);
      example.emplace(l, n);
    }
  }
  const std::string L = "layer ";
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const bool moe = cfg.is_moe_layer(l);
    const bool has_any = routers.count(l) || experts.count(l);
    if (!moe) {
      if (has_any)
        throw Error(source + ": " + L + std::to_string(l) + " is a dense MLP layer (" +
                    (cfg.is_moe() ? "mlp_only_layers / decoder_sparse_step" : "model_type qwen3") + ") but holds " +
                    example[l]);
      continue;
    }
    if (!routers.count(l))
      throw Error(source + ": " + L + std::to_string(l) + " is a MoE layer but model.layers." + std::to_string(l) +
                  ".mlp.gate.weight (the router) is missing");
    const auto& ex = experts[l];
    const int64_t found = static_cast<int64_t>(ex.size());
    const int64_t hi = ex.empty() ? -1 : ex.rbegin()->first;
    if (found != cfg.num_experts || hi != cfg.num_experts - 1) {
      if (hi + 1 == found)
        throw Error(source + ": " + L + std::to_string(l) + " holds " + std::to_string(found) + " experts (model.layers." +
                    std::to_string(l) + ".mlp.experts.0 .. " + std::to_string(hi) + ") but config.json says num_experts = " +
                    std::to_string(cfg.num_experts));
      int64_t missing = 0;
      while (ex.count(missing)) ++missing;
      throw Error(source + ": " + L + std::to_string(l) + ": experts 0 .. " + std::to_string(cfg.num_experts - 1) +
                  " expected (num_experts = " + std::to_string(cfg.num_experts) + "), expert " +
                  std::to_string(missing) + " missing" +
                  (hi >= cfg.num_experts ? ", highest index found " + std::to_string(hi) : std::string()));
    }
    for (const auto& [e, projs] : ex)
      for (const char* p : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
        if (!projs.count(p))
          throw Error(source + ": model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." + p +
                      " is missing");
  }
}

}  // namespace twinkle
