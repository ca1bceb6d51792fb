// twinkle/data/template.h — chat templates: messages -> input_ids / labels.
//
// Qwen3 ("qwen3"): renders exactly what the model's own Jinja chat_template in
// tokenizer_config.json renders (enable_thinking=true as the recipes use it) and
// labels each assistant turn from the end of its header "<|im_start|>assistant\n"
// up to and including its "<|im_end|>" and the newline after it; everything else
// is -100. Labels are NOT shifted (see twinkle/data/batch.h for the convention).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "twinkle/data/batch.h"
#include "twinkle/data/tokenizer.h"

namespace twinkle {

struct Message {
  std::string role;     ///< "system", "user", "assistant"
  std::string content;
  std::string reasoning_content;  ///< assistant thinking text (may be empty)
  /// Jinja's `message.reasoning_content is defined and is not none`: when false and
  /// reasoning_content is empty, an assistant content holding "</think>" is split into
  /// reasoning and content as the Qwen3 template does. A non-empty reasoning_content
  /// counts as set whatever this flag says. (messages_from_json sets it when the JSON
  /// message has a non-null "reasoning_content".)
  bool has_reasoning_content = false;
};

/// Parses one JSON row {"messages": [{"role", "content", optional "reasoning_content"}, ...]}
/// (or a bare array of messages). Throws twinkle::Error naming `row_name` (e.g. "file:12")
/// and the field for malformed rows: not JSON, no "messages", a message without a string
/// "role"/"content", an unknown role (allowed: system, user, assistant, tool).
std::vector<Message> messages_from_json(std::string_view json_text, const std::string& row_name = "");

struct TemplateOptions {
  std::string model_id;             ///< model dir or hub id whose tokenizer files are used
  int64_t max_length = 8192;
  std::string truncation = "raise"; ///< "raise", "left", "right", "delete", "split"
  bool enable_thinking = true;
  std::string default_system;       ///< added when the first message is a user message (if non-empty)
};

class Template {
 public:
  /// `name`: "Template"/"qwen3" (the only one for now). Resolves options.model_id to a
  /// directory (see twinkle/data/hub.h) and loads its tokenizer. Throws twinkle::Error.
  Template(const std::string& name, const TemplateOptions& opts);
  /// Same with an already loaded tokenizer (options.model_id is then only informative).
  Template(const std::string& name, const TemplateOptions& opts, Tokenizer tokenizer);

  /// The chat text the model's Jinja template renders for `messages`.
  std::string render(const std::vector<Message>& messages, bool add_generation_prompt = false) const;
  /// Encodes one conversation. Returns 1 row normally, 0 rows when truncation is
  /// "delete" and the row is too long, several for "split". With "raise" a too-long
  /// row throws twinkle::Error("... length N exceeds max_length M"); `row_name` (file:line)
  /// is put in that message.
  std::vector<EncodedRow> encode(const std::vector<Message>& messages, const std::string& row_name = "") const;
  /// Prompt ids for generation (add_generation_prompt=true).
  std::vector<int32_t> encode_prompt(const std::vector<Message>& messages) const;

  const Tokenizer& tokenizer() const;
  const TemplateOptions& options() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace twinkle
