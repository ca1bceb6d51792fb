// `twinkle tokenize` — Hugging Face-exact tokenization of JSON lines (see twinkle/data/tokenizer.h).
//
//   twinkle tokenize --tokenizer DIR            one JSON string per stdin line -> one JSON id array per line
//   twinkle tokenize --tokenizer DIR --decode   one JSON id array per line     -> one JSON string per line
//
// DIR is a model directory or hub id (resolved offline, twinkle/data/hub.h) holding tokenizer.json,
// or a tokenizer.json file. Lines are processed in blocks, encoded in parallel, output in order.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "twinkle/core/error.h"
#include "twinkle/data/hub.h"
#include "twinkle/data/pretokenized.h"
#include "twinkle/data/tokenizer.h"

namespace {

twinkle::Tokenizer load_tokenizer(const std::string& where) {
  if (where.size() > 5 && where.substr(where.size() - 5) == ".json") return twinkle::Tokenizer::from_file(where);
  return twinkle::Tokenizer::from_dir(twinkle::resolve_model_dir(where));
}

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize JSON-string lines from stdin (or decode JSON id arrays with --decode)", "twinkle tokenize"};
  std::string dir;
  bool decode = false, skip_special = false, add_special = false;
  app.add_option("--tokenizer", dir, "model directory / hub id with tokenizer.json, or a tokenizer.json file")
      ->required();
  app.add_flag("--decode", decode, "read JSON arrays of ids, print JSON strings");
  app.add_flag("--skip-special-tokens", skip_special, "with --decode: drop special added tokens");
  app.add_flag("--add-special-tokens", add_special, "add the post-processor's tokens (none for Qwen3)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const twinkle::Tokenizer tok = load_tokenizer(dir);

  std::ios::sync_with_stdio(false);
  std::string line;
  size_t lineno = 0;
  constexpr size_t kBlock = 2048;
  std::vector<std::string> block;
  std::vector<size_t> block_lines;
  std::string out;

  auto flush_encode = [&] {
    std::vector<std::vector<int32_t>> ids;
    try {
      ids = tok.encode_batch(block, add_special);
    } catch (const twinkle::Error&) {
      // Re-run serially to name the line.
      for (size_t i = 0; i < block.size(); ++i) {
        try {
          (void)tok.encode(block[i], add_special);
        } catch (const twinkle::Error& e) {
          throw twinkle::Error("stdin line " + std::to_string(block_lines[i]) + ": " + e.what());
        }
      }
      throw;
    }
    out.clear();
    for (auto& v : ids) {
      out.push_back('[');
      for (size_t k = 0; k < v.size(); ++k) {
        if (k) out.push_back(',');
        out += std::to_string(v[k]);
      }
      out += "]\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    block.clear();
    block_lines.clear();
  };

  while (std::getline(std::cin, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw twinkle::Error("stdin line " + std::to_string(lineno) + ": not JSON: " + e.what());
    }
    if (!decode) {
      if (!j.is_string())
        throw twinkle::Error("stdin line " + std::to_string(lineno) + ": expected a JSON string");
      block.push_back(j.get<std::string>());
      block_lines.push_back(lineno);
      if (block.size() == kBlock) flush_encode();
    } else {
      // a list of integers, each within int32 (4294967297 used to decode as id 1)
      const std::vector<int32_t> ids = twinkle::token_ids_from_json(j, "ids", "stdin line " + std::to_string(lineno));
      std::string text;
      try {
        text = tok.decode(ids, skip_special);
      } catch (const twinkle::Error& e) {
        throw twinkle::Error("stdin line " + std::to_string(lineno) + ": " + e.what());
      }
      out = nlohmann::json(text).dump() + "\n";
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
  }
  if (!block.empty()) flush_encode();
  std::fflush(stdout);
  return 0;
}

}  // namespace

TWINKLE_REGISTER_COMMAND("tokenize", "tokenize JSON-string lines (HF tokenizer.json); --decode for the reverse",
                         cmd_tokenize);
