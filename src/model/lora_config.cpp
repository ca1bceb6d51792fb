#include "twinkle/model/lora_config.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include "twinkle/core/error.h"
#include "twinkle/core/option_check.h"

namespace twinkle {

double LoraConfig::scaling() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
}

void validate(const LoraConfig& c) {
  check_option(c.r >= 1, "lora", "lora_r", ">= 1", c.r);
  check_option(std::isfinite(c.lora_alpha) && c.lora_alpha > 0, "lora", "lora_alpha", "finite and > 0", c.lora_alpha);
  check_option(std::isfinite(c.lora_dropout) && c.lora_dropout >= 0 && c.lora_dropout < 1, "lora", "lora_dropout",
               "in [0, 1)", c.lora_dropout);
  check_option(c.init_lora_weights == "true" || c.init_lora_weights == "gaussian" || c.init_lora_weights == "false",
               "lora", "lora_init", "one of true, gaussian, false", c.init_lora_weights);
  check_option(!lora_target_list(c).empty(), "lora", "lora_targets", "all-linear or a list of module names",
               c.target_modules);
  if (c.target_modules_regex) {
    try {
      std::regex re(c.target_modules);
    } catch (const std::regex_error& e) {
      throw Error(option_name("lora", "lora_targets") + ": target_modules '" + c.target_modules +
                  "' is PEFT's regular expression (a string other than all-linear), but not one std::regex "
                  "(ECMAScript) compiles: " + e.what());
    }
  }
}

std::vector<std::string> lora_target_list(const LoraConfig& c) {
  std::vector<std::string> out;
  if (c.target_modules_regex) {
    if (!c.target_modules.empty()) out.push_back(c.target_modules);
    return out;
  }
  size_t i = 0;
  const std::string& s = c.target_modules;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string t = s.substr(i, j - i);
    const auto b = t.find_first_not_of(" \t"), e = t.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(t.substr(b, e - b + 1));
    i = j + 1;
  }
  return out;
}

namespace {

// The refusal when a target selects a module twinkle cannot wrap (PEFT would wrap it or refuse).
[[noreturn]] void refuse_non_lora(const LoraConfig& cfg, const std::string& entry, const NonLoraModule& m) {
  const std::string which = cfg.target_modules_regex
                                ? "target_modules '" + cfg.target_modules + "' (PEFT's regular expression, matched "
                                  "against every module name)"
                                : "the entry '" + entry + "' of target_modules '" + cfg.target_modules + "'";
  throw Error(option_name("lora", "lora_targets") + ": " + which + " selects " + m.name + ", " + m.what +
              "; twinkle gives LoRA adapters to linear layers only (q/k/v/o_proj, gate/up/down_proj, the MoE router "
              "and experts), not the lm head: select only those (e.g. all-linear, or a pattern that leaves " +
              m.name + " out) rather than train fewer modules than asked");
}

}  // namespace

std::vector<std::string> resolve_lora_targets(const LoraConfig& cfg, const std::vector<std::string>& linear_modules,
                                              const std::vector<NonLoraModule>& other_modules) {
  const auto targets = lora_target_list(cfg);
  if (cfg.target_modules_regex) {  // PEFT: re.fullmatch(target_modules, module name)
    validate(cfg);
    const std::regex re(cfg.target_modules);
    for (const auto& m : other_modules)
      if (std::regex_match(m.name, re)) refuse_non_lora(cfg, cfg.target_modules, m);
    std::vector<std::string> out;
    for (const auto& m : linear_modules)
      if (std::regex_match(m, re)) out.push_back(m);
    if (out.empty())
      throw Error(option_name("lora", "lora_targets") + ": target_modules '" + cfg.target_modules +
                  "' (PEFT's regular expression, matched against whole module names) matches no linear module, e.g. " +
                  (linear_modules.empty() ? std::string("-") : linear_modules[0]));
    return out;
  }
  auto matches = [](const std::string& module, const std::string& t) {
    return module == t || (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
                           module[module.size() - t.size() - 1] == '.');
  };
  std::vector<std::string> out;
  for (const auto& t : targets) {
    if (t == "all-linear") continue;
    for (const auto& m : other_modules)
      if (matches(m.name, t)) refuse_non_lora(cfg, t, m);
    bool any = false;
    for (const auto& m : linear_modules) any = any || matches(m, t);
    if (!any) {
      std::vector<std::string> shorts;
      for (const auto& m : linear_modules) {
        std::string s = m.substr(m.rfind('.') + 1);
        if (std::find(shorts.begin(), shorts.end(), s) == shorts.end()) shorts.push_back(s);
      }
      std::string valid = "all-linear";
      for (const auto& s : shorts) valid += ", " + s;
      throw Error(option_name("lora", "lora_targets") + ": '" + t + "' matches no linear module; valid: " + valid +
                  " (or full module names, e.g. " + (linear_modules.empty() ? std::string("-") : linear_modules[0]) +
                  "; the lm head is never a target)");
    }
  }
  const bool all = std::find(targets.begin(), targets.end(), "all-linear") != targets.end();
  for (const auto& m : linear_modules) {
    // all-linear: every linear layer but the lm head and the MoE router "mlp.gate" (Twinkle's
    // add_adapter_to_model, src/twinkle/model/megatron/megatron.py); the router only when named.
    const bool router = m.size() > 9 && m.compare(m.size() - 9, 9, ".mlp.gate") == 0;
    bool hit = all && !router;
    for (const auto& t : targets) hit = hit || matches(m, t);
    if (hit) out.push_back(m);
  }
  return out;
}

}  // namespace twinkle
