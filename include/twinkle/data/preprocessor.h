// twinkle/data/preprocessor.h — row preprocessors: raw dataset columns -> "messages".
//
// A Preprocessor maps one row (a JSON object) to one row. Dataset::map merges the
// returned object into the original row (columns are kept, new ones added or
// overwritten, as datasets.Dataset.map does in Twinkle) and, on a twinkle::Error or a
// JSON type error, prefixes the message with the row's "<file>:<line>".
//
// The "messages" column every preprocessor produces is an array of objects
// {"role": "system"|"user"|"assistant"|"tool", "content": string,
//  "reasoning_content": string (optional)} — what Dataset::encode hands to the Template.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "twinkle/data/template.h"

namespace twinkle {

using json = nlohmann::json;

class Preprocessor {
 public:
  virtual ~Preprocessor() = default;
  /// Returns the new columns for `row` (an object), or null to drop the row.
  /// Throws twinkle::Error naming the offending column.
  virtual json operator()(const json& row) const = 0;
  /// Short name for log/error messages.
  virtual std::string name() const = 0;
};

/// Twinkle's SelfCognitionProcessor (src/twinkle/preprocessor/llm.py): literal
/// replacement of every "{{NAME}}" by `model_name` and "{{AUTHOR}}" by `model_author` in
/// the string columns "query" and "response" (same names for "zh" and "en" rows; the
/// "tag" column is ignored, unlike ms-swift), then adds
///   "messages": [{"role":"system","content":"You are a helpful assistant."},
///                {"role":"user","content":query}, {"role":"assistant","content":response}].
/// Other columns are kept. A missing or non-string "query"/"response" throws
/// twinkle::Error("SelfCognitionProcessor: column 'query' is missing" / "... is a number,
/// expected a string").
class SelfCognitionProcessor : public Preprocessor {
 public:
  explicit SelfCognitionProcessor(std::string model_name = "twinkle robot", std::string model_author = "twinkle lab",
                                  std::string system = "You are a helpful assistant.");
  json operator()(const json& row) const override;
  std::string name() const override { return "SelfCognitionProcessor"; }

 private:
  std::string name_, author_, system_;
};

/// Rows already in chat form. Accepts "messages" (OpenAI style: role/content, optional
/// reasoning_content) or "conversations" (ShareGPT style: from/value with from in
/// human/user, gpt/assistant, system, tool); validates them with parse_messages and
/// outputs a normalised "messages" column (content null -> ""). When `default_system`
/// is non-empty and the first message is not a system message, it is prepended.
class MessagesPreprocessor : public Preprocessor {
 public:
  explicit MessagesPreprocessor(std::string default_system = "");
  json operator()(const json& row) const override;
  std::string name() const override { return "MessagesPreprocessor"; }

 private:
  std::string default_system_;
};

/// Alpaca rows {"instruction", "input" (optional), "output", "system" (optional)}:
/// user content = instruction, or instruction + "\n" + input when input is non-empty
/// (the ms-swift AlpacaPreprocessor convention); assistant content = output.
/// Missing/non-string instruction or output -> twinkle::Error naming the column.
class AlpacaPreprocessor : public Preprocessor {
 public:
  explicit AlpacaPreprocessor(std::string default_system = "");
  json operator()(const json& row) const override;
  std::string name() const override { return "AlpacaPreprocessor"; }

 private:
  std::string default_system_;
};

/// Converts an already parsed "messages" JSON value to Template messages (the text
/// parser messages_from_json in template.h does the same from JSON text). Requirements:
/// an array of objects, each with a string "role" in {system, user, assistant, tool} and
/// a string (or null -> "") "content"; optional string (or null) "reasoning_content",
/// which sets Message::has_reasoning_content when present and non-null. Throws
/// twinkle::Error naming the element, e.g. "messages[2].content is a number, expected a string".
std::vector<Message> parse_messages(const json& messages);

/// Inverse of parse_messages (reasoning_content written when non-empty or
/// has_reasoning_content is set).
json messages_to_json(const std::vector<Message>& messages);

/// "a string", "a number", "an array", ... — the JSON type of `v` for messages.
std::string json_type_name(const json& v);

}  // namespace twinkle
