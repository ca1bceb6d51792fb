// `twinkle generate`: greedy decoding through the chat template (single process).
//
//   twinkle generate --model output/tp_recipe --prompt "你是谁？" [--max-new-tokens 64]
//   twinkle generate --model BASE --adapter output/lora --prompt "你是谁？"
//
// The prompt is rendered as [system?, user] with add_generation_prompt (Qwen3 template,
// enable_thinking as in training) and decoded greedily until any EOS id the model declares
// (generation_config.json's eos_token_id, else config.json's, int or list: transformers'
// generate) or the token limit. No KV cache: each token re-runs the forward (fine for small
// models). --adapter loads a PEFT LoRA adapter directory onto the base (unmerged: y = W x +
// scaling B A x, PEFT's Linear.forward in eval mode, no dropout). --ids prints {"prompt_ids": [...], "generated_ids": [...]} instead of the text.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "command.h"
#include "twinkle/core/option_check.h"
#include "twinkle/io/generation_config.h"
#include "twinkle/data/template.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/train/megatron_model.h"

namespace {

int generate_main(int argc, char** argv) {
  std::string kernels = "fused";
  CLI::App app{"Greedy generation with the chat template", "twinkle generate"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  std::string model, adapter, prompt, system = "You are a helpful assistant.";
  int64_t max_new = 64;
  bool raw = false, print_ids = false;
  app.add_option("--model", model, "model directory or hub id")->required();
  app.add_option("--adapter", adapter, "PEFT LoRA adapter directory to apply to the model (default: none)");
  app.add_option("--prompt", prompt, "user message")->required();
  app.add_option("--system", system, "system message (empty: none)");
  app.add_option("--max-new-tokens", max_new, "at most this many new tokens (>= 1)");
  app.add_flag("--raw", raw, "print the generated text as is (with the think block)");
  app.add_flag("--ids", print_ids, "print the prompt and generated token ids as JSON instead of the text");
  app.add_option("--kernels", kernels, "kernel set: fused | reference (plain loops, for debugging; default: fused)")
      ->check(CLI::IsMember({"fused", "reference"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // transformers' GenerationConfig refuses max_new_tokens <= 0; a negative value used to print
  // "(empty reply)" as if the model had answered nothing.
  twinkle::check_option(max_new >= 1, "generate", "max_new_tokens", ">= 1", max_new);
  twinkle::Template tmpl("qwen3", {.model_id = model});
  std::vector<twinkle::Message> msgs;
  if (!system.empty()) msgs.push_back({"system", system, ""});
  msgs.push_back({"user", prompt, ""});
  std::vector<int32_t> ids = tmpl.encode_prompt(msgs);
  const size_t prompt_len = ids.size();
  twinkle::MegatronModelOptions mo;
  mo.kernels = kernels;
  twinkle::MegatronModel m(model, mo);
  if (!adapter.empty()) m.load_adapter(adapter);
  auto& qm = m.model();
  const auto& tok = tmpl.tokenizer();
  const std::vector<int64_t> stops = twinkle::load_eos_token_ids(m.model_dir(), qm.config());
  for (int64_t i = 0; i < max_new; ++i) {
    twinkle::EncodedRow r;
    r.input_ids = ids;
    r.labels.assign(ids.size(), twinkle::kIgnoreIndex);
    for (size_t t = 0; t < ids.size(); ++t) r.position_ids.push_back(static_cast<int32_t>(t));
    r.length = static_cast<int64_t>(ids.size());
    auto sb = qm.prepare(twinkle::collate_padded({r}, 0));
    qm.forward(0, sb, nullptr, 0.0f, false);
    auto logits = qm.last_token_logits(0, sb);
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (std::find(stops.begin(), stops.end(), static_cast<int64_t>(next)) != stops.end()) break;
    ids.push_back(next);
  }
  if (print_ids) {
    nlohmann::json out{{"prompt_ids", std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(prompt_len))},
                       {"generated_ids", std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt_len), ids.end())},
                       {"eos_token_ids", stops}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::string text = tok.decode(std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt_len), ids.end()));
  if (!raw) {
    auto end = text.find("</think>");
    if (end != std::string::npos) text = text.substr(end + 8);
    for (const char* tag : {"<think>", "</think>"})
      for (auto pos = text.find(tag); pos != std::string::npos; pos = text.find(tag)) text.erase(pos, std::strlen(tag));
    const auto b = text.find_first_not_of(" \n"), e = text.find_last_not_of(" \n");
    text = b == std::string::npos ? "(empty reply)" : text.substr(b, e - b + 1);
  }
  std::printf("%s\n", text.c_str());
  return 0;
}

int generate_entry(int argc, char** argv) { return twinkle::run_main(argc, argv, generate_main); }

}  // namespace

TWINKLE_REGISTER_COMMAND("generate", "greedy-decode a reply with the chat template", generate_entry);
