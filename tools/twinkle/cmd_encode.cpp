// `twinkle encode` — chat rows -> training rows with the Qwen3 template (twinkle/data/template.h).
//
//   twinkle encode --template qwen3 --tokenizer DIR --max-length N [--truncation S] [--input FILE]
//     reads {"messages": [{"role","content", optional "reasoning_content"}, ...]} JSONL (stdin or
//     --input) and writes one {"input_ids","labels","attention_mask","position_ids","length"} line
//     per encoded row (0 rows for truncation=delete of a long row, several for split).
//   --render [--add-generation-prompt]: print the rendered chat text (a JSON string) per row.
//   --prompt: print the generation prompt ids (add_generation_prompt=true) per row.
// A bad row stops the run with an error naming its line ("<input>:<line>: ...").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "twinkle/core/error.h"
#include "twinkle/data/hub.h"
#include "twinkle/data/template.h"

namespace {

void append_array(std::string& out, const std::vector<int32_t>& v) {
  out.push_back('[');
  for (size_t k = 0; k < v.size(); ++k) {
    if (k) out.push_back(',');
    out += std::to_string(v[k]);
  }
  out.push_back(']');
}

int cmd_encode(int argc, char** argv) {
  CLI::App app{"Encode chat rows (JSONL with \"messages\") into input_ids / labels rows", "twinkle encode"};
  std::string tmpl = "qwen3", dir, input, truncation = "raise", system;
  int64_t max_length = 8192;
  bool render = false, gen_prompt = false, prompt = false, no_thinking = false, ignore_empty_think = false;
  app.add_option("--template", tmpl, "chat template (qwen3)");
  app.add_option("--tokenizer", dir, "model directory or hub id holding tokenizer.json / tokenizer_config.json")
      ->required();
  app.add_option("--max-length", max_length, "maximum tokens per row");
  app.add_option("--truncation", truncation, "raise | left | right | delete | split")
      ->check(CLI::IsMember({"raise", "left", "right", "delete", "split"}));
  app.add_option("--input", input, "JSONL input file (default: stdin)");
  app.add_option("--system", system, "default system prompt for conversations starting with a user turn");
  app.add_flag("--no-thinking", no_thinking, "enable_thinking=false (only changes the generation prompt)");
  app.add_flag("--ignore-empty-think", ignore_empty_think,
               "label -100 on an assistant turn's empty <think>...</think> block (ms-swift ignore_empty_think)");
  app.add_flag("--render", render, "print the rendered chat text of each row as a JSON string");
  app.add_flag("--add-generation-prompt", gen_prompt, "with --render: add the assistant header");
  app.add_flag("--prompt", prompt, "print the generation prompt ids of each row");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  twinkle::TemplateOptions opts;
  opts.model_id = dir;
  opts.max_length = max_length;
  opts.truncation = truncation;
  opts.enable_thinking = !no_thinking;
  opts.default_system = system;
  opts.ignore_empty_think = ignore_empty_think;
  const twinkle::Template t(tmpl, opts);

  std::ifstream file;
  std::istream* in = &std::cin;
  const std::string src = input.empty() ? "stdin" : input;
  if (!input.empty()) {
    file.open(input);
    if (!file) throw twinkle::Error("cannot open " + input);
    in = &file;
  }
  std::ios::sync_with_stdio(false);
  std::string line, out;
  size_t lineno = 0;
  while (std::getline(*in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string row_name = src + ":" + std::to_string(lineno);
    const std::vector<twinkle::Message> msgs = twinkle::messages_from_json(line, row_name);
    out.clear();
    if (render) {
      std::string text;
      try {
        text = t.render(msgs, gen_prompt);
      } catch (const twinkle::Error& e) {
        throw twinkle::Error("row " + row_name + ": " + e.what());
      }
      out = nlohmann::json(text).dump() + "\n";
    } else if (prompt) {
      std::vector<int32_t> ids;
      try {
        ids = t.encode_prompt(msgs);
      } catch (const twinkle::Error& e) {
        throw twinkle::Error("row " + row_name + ": " + e.what());
      }
      append_array(out, ids);
      out += "\n";
    } else {
      for (const twinkle::EncodedRow& r : t.encode(msgs, row_name)) {
        out += "{\"input_ids\":";
        append_array(out, r.input_ids);
        out += ",\"labels\":";
        append_array(out, r.labels);
        out += ",\"attention_mask\":";
        append_array(out, r.attention_mask);
        out += ",\"position_ids\":";
        append_array(out, r.position_ids);
        out += ",\"length\":" + std::to_string(r.length) + "}\n";
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

TWINKLE_REGISTER_COMMAND("encode", "encode chat JSONL rows into input_ids/labels with a chat template (qwen3)",
                         cmd_encode);
