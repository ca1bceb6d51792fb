// twinkle/data/template.h — chat templates: messages -> input_ids / labels.
//
// Qwen3 ("qwen3"): renders exactly what the model's own Jinja chat_template in
// tokenizer_config.json renders (enable_thinking=true as the recipes use it) and
// labels each assistant turn from the end of its header "<|im_start|>assistant\n"
// up to and including its "<|im_end|>" and the newline after it; everything else
// is -100. Labels are NOT shifted (see twinkle/data/batch.h for the convention).
//
// Rendering (Qwen3 chat_template, tokenizer_config.json of Qwen/Qwen3-*; no tools):
//  - a first "system" message -> "<|im_start|>system\n{content}<|im_end|>\n";
//  - "user" (and a "system" message that is not first) -> "<|im_start|>{role}\n{content}<|im_end|>\n";
//  - "assistant": reasoning = reasoning_content when set, else split out of content around
//    "</think>" / "<think>" as the template does; turns after the last real user query get
//    "<think>\n{reasoning stripped of \n}\n</think>\n\n{content without leading \n}" when
//    they are the last message or have non-empty reasoning; other turns render
//    "{content}" only (their reasoning is dropped); then "<|im_end|>\n";
//  - "tool": consecutive tool messages are wrapped in one "<|im_start|>user" block as
//    "\n<tool_response>\n{content}\n</tool_response>";
//  - add_generation_prompt appends "<|im_start|>assistant\n" (plus "<think>\n\n</think>\n\n"
//    when enable_thinking is false).
// Tested against Debian's python3-jinja2 rendering the real template string
// (tests/reference/template_ref.py).
//
// Labels: the conversation is rendered once; the text is cut at every assistant turn's
// label boundaries and the pieces are tokenized separately. Their concatenation must equal
// the tokenization of the whole text (else twinkle::Error: a boundary falls inside a
// token, e.g. an earlier assistant turn whose content starts with "\n"). This equals
// Twinkle's prefix rule (start = len(ids(render(messages[:i], add_generation_prompt))),
// end = len(ids(render(messages[:i+1])))) wherever the Qwen3 template renders prefixes
// consistently (single-turn, the final turn), and unlike it also holds for earlier turns of
// multi-turn conversations, whose reasoning block the full rendering drops.
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
/// (or a bare array of messages). "content" null reads as ""; "reasoning_content" present
/// and non-null sets has_reasoning_content. Throws twinkle::Error naming `row_name` (e.g.
/// "file:12") and the field for malformed rows: not JSON, no "messages", a message without
/// a string "role" / string-or-null "content", an unknown role (allowed: system, user,
/// assistant, tool), "tool_calls" (unsupported).
std::vector<Message> messages_from_json(std::string_view json_text, const std::string& row_name = "");

struct TemplateOptions {
  std::string model_id;             ///< model dir or hub id whose tokenizer files are used
  int64_t max_length = 8192;
  std::string truncation = "raise"; ///< "raise", "left", "right", "delete", "split"
  bool enable_thinking = true;
  std::string default_system;       ///< added when the first message is a user message (if non-empty)
  /// ms-swift's `--loss_scale ignore_empty_think` (swift/loss_scale/config/
  /// ignore_empty_think.json): an assistant turn whose rendered text starts with an empty
  /// reasoning block (regex ^<think>\s*</think>\s* with Python's semantics on a str: `\s`
  /// is any Unicode whitespace of str.isspace(), e.g. U+3000, `*` greedy; the
  /// "<think>\n\n</think>\n\n" the Qwen3 template inserts into turns without reasoning)
  /// gets -100 labels on the tokens lying wholly inside the match; the rest of the turn stays
  /// labelled. Off by default (Twinkle labels every assistant token). The ids stay those of the
  /// whole conversation: when the match's trailing whitespace and the
  /// content's first characters form one token (content " Hello": tokens "\n\n", " Hello"),
  /// that token is the content's and stays labelled (ms-swift would tokenize the two pieces
  /// apart, " " and "Hello", and change the ids). Never throws for this boundary.
  bool ignore_empty_think = false;
};

/// The one place the template options are checked (Template, Dataset::set_template, `twinkle
/// train` / `encode` and the recipes). Throws twinkle::Error naming the field: max_length < 1,
/// truncation not one of raise, left, right, delete, split.
void validate(const TemplateOptions& opts);

class Template {
 public:
  /// `name`: "Template"/"qwen3" (the only one for now). Resolves options.model_id to a
  /// directory (see twinkle/data/hub.h) and loads its tokenizer. Throws twinkle::Error:
  /// unknown name, what validate(opts) throws, tokenizer files missing, a tokenizer
  /// without <|im_start|> / <|im_end|>, or a chat_template that is not Qwen3's (it must
  /// contain "last_query_index"; an absent chat_template is accepted).
  Template(const std::string& name, const TemplateOptions& opts);
  /// Same with an already loaded tokenizer (options.model_id is then only informative).
  Template(const std::string& name, const TemplateOptions& opts, Tokenizer tokenizer);

  /// The chat text the model's Jinja template renders for `messages` (with
  /// options().enable_thinking and options().default_system). Throws twinkle::Error for an
  /// empty list or an unknown role.
  std::string render(const std::vector<Message>& messages, bool add_generation_prompt = false) const;
  /// Encodes one conversation. Returns 1 row normally, 0 rows when truncation is
  /// "delete" and the row is too long, several for "split". With "raise" a too-long
  /// row throws twinkle::Error("... length N exceeds max_length M"); `row_name` (file:line)
  /// is put in that message.
  ///   left:  keeps the last max_length tokens;  right: keeps the first max_length;
  ///   split: consecutive chunks of max_length (the last one shorter), each its own row
  ///          with position_ids restarting at 0.
  /// Every row has attention_mask = 1s, position_ids = 0..L-1, length = L. Also throws
  /// (naming row_name) when an assistant label boundary falls inside a token (see above).
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
