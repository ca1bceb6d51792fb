#include "twinkle/data/preprocessor.h"

#include "twinkle/core/error.h"

namespace twinkle {
namespace {

const std::string& string_column(const json& row, const char* col, const std::string& who) {
  check(row.is_object(), who + ": row is " + json_type_name(row) + ", expected an object");
  auto it = row.find(col);
  if (it == row.end()) throw Error(who + ": column '" + col + "' is missing");
  if (!it->is_string()) throw Error(who + ": column '" + col + "' is " + json_type_name(*it) + ", expected a string");
  return it->get_ref<const std::string&>();
}

// Optional string column: "" when absent or null.
std::string opt_string_column(const json& row, const char* col, const std::string& who) {
  auto it = row.find(col);
  if (it == row.end() || it->is_null()) return "";
  if (!it->is_string()) throw Error(who + ": column '" + col + "' is " + json_type_name(*it) + ", expected a string");
  return it->get<std::string>();
}

// Literal replacement in one pass (no rescanning of inserted text).
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  size_t pos = s.find(from);
  if (pos == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + 8 * to.size());
  size_t last = 0;
  for (; pos != std::string::npos; pos = s.find(from, last)) {
    out.append(s, last, pos - last);
    out += to;
    last = pos + from.size();
  }
  out.append(s, last, std::string::npos);
  s.swap(out);
}

json msg(const std::string& role, const std::string& content) { return json{{"role", role}, {"content", content}}; }

}  // namespace

std::string json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    default: return "a binary value";
  }
}

SelfCognitionProcessor::SelfCognitionProcessor(std::string model_name, std::string model_author, std::string system)
    : name_(std::move(model_name)), author_(std::move(model_author)), system_(std::move(system)) {}

json SelfCognitionProcessor::operator()(const json& row) const {
  std::string query = string_column(row, "query", name());
  std::string response = string_column(row, "response", name());
  for (std::string* s : {&query, &response}) {
    replace_all(*s, "{{NAME}}", name_);
    replace_all(*s, "{{AUTHOR}}", author_);
  }
  json out = json::object();
  out["query"] = query;
  out["response"] = response;
  out["messages"] = json::array({msg("system", system_), msg("user", query), msg("assistant", response)});
  return out;
}

MessagesPreprocessor::MessagesPreprocessor(std::string default_system) : default_system_(std::move(default_system)) {}

json MessagesPreprocessor::operator()(const json& row) const {
  check(row.is_object(), name() + ": row is " + json_type_name(row) + ", expected an object");
  std::vector<Message> msgs;
  auto it = row.find("messages");
  if (it != row.end()) {
    msgs = parse_messages(*it);
  } else {
    auto cv = row.find("conversations");
    if (cv == row.end())
      throw Error(name() + ": neither column 'messages' nor 'conversations' is present" +
                  std::string(row.contains("query") && row.contains("response")
                                  ? " (query/response rows are self-cognition data: use SelfCognitionProcessor, "
                                    "`twinkle train --self-cognition NAME,AUTHOR`)"
                                  : ""));
    if (!cv->is_array()) throw Error(name() + ": column 'conversations' is " + json_type_name(*cv) + ", expected an array");
    for (size_t i = 0; i < cv->size(); ++i) {
      const json& m = (*cv)[i];
      const std::string where = "conversations[" + std::to_string(i) + "]";
      if (!m.is_object()) throw Error(name() + ": " + where + " is " + json_type_name(m) + ", expected an object");
      auto f = m.find("from");
      auto v = m.find("value");
      if (f == m.end() || !f->is_string()) throw Error(name() + ": " + where + ".from is missing or not a string");
      if (v == m.end() || !(v->is_string() || v->is_null()))
        throw Error(name() + ": " + where + ".value is missing or not a string");
      std::string from = f->get<std::string>(), role;
      if (from == "human" || from == "user")
        role = "user";
      else if (from == "gpt" || from == "assistant")
        role = "assistant";
      else if (from == "system")
        role = "system";
      else if (from == "tool" || from == "function" || from == "observation")
        role = "tool";
      else
        throw Error(name() + ": " + where + ".from = '" + from + "' is not one of human, gpt, system, tool");
      Message msg;
      msg.role = role;
      msg.content = v->is_null() ? "" : v->get<std::string>();
      msgs.push_back(std::move(msg));
    }
    check(!msgs.empty(), name() + ": column 'conversations' is empty");
  }
  if (!default_system_.empty() && msgs.front().role != "system") {
    Message sys;
    sys.role = "system";
    sys.content = default_system_;
    msgs.insert(msgs.begin(), std::move(sys));
  }
  json out = json::object();
  out["messages"] = messages_to_json(msgs);
  return out;
}

AlpacaPreprocessor::AlpacaPreprocessor(std::string default_system) : default_system_(std::move(default_system)) {}

json AlpacaPreprocessor::operator()(const json& row) const {
  std::string instruction = string_column(row, "instruction", name());
  std::string input = opt_string_column(row, "input", name());
  const std::string& output = string_column(row, "output", name());
  std::string system = opt_string_column(row, "system", name());
  if (system.empty()) system = default_system_;
  std::string user = input.empty() ? instruction : instruction + "\n" + input;
  json m = json::array();
  if (!system.empty()) m.push_back(msg("system", system));
  m.push_back(msg("user", user));
  m.push_back(msg("assistant", output));
  json out = json::object();
  out["messages"] = std::move(m);
  return out;
}

std::vector<Message> parse_messages(const json& messages) {
  if (!messages.is_array()) throw Error("messages is " + json_type_name(messages) + ", expected an array");
  check(!messages.empty(), "messages is an empty array");
  std::vector<Message> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw Error(where + " is " + json_type_name(m) + ", expected an object");
    Message msg;
    auto r = m.find("role");
    if (r == m.end()) throw Error(where + ".role is missing");
    if (!r->is_string()) throw Error(where + ".role is " + json_type_name(*r) + ", expected a string");
    msg.role = r->get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      throw Error(where + ".role = '" + msg.role + "' is not one of system, user, assistant, tool");
    auto c = m.find("content");
    if (c == m.end()) throw Error(where + ".content is missing");
    if (c->is_string())
      msg.content = c->get<std::string>();
    else if (!c->is_null())
      throw Error(where + ".content is " + json_type_name(*c) + ", expected a string");
    auto rc = m.find("reasoning_content");
    if (rc != m.end() && !rc->is_null()) {
      if (!rc->is_string())
        throw Error(where + ".reasoning_content is " + json_type_name(*rc) + ", expected a string");
      msg.reasoning_content = rc->get<std::string>();
      msg.has_reasoning_content = true;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

json messages_to_json(const std::vector<Message>& messages) {
  json a = json::array();
  for (const auto& m : messages) {
    json o{{"role", m.role}, {"content", m.content}};
    if (!m.reasoning_content.empty() || m.has_reasoning_content) o["reasoning_content"] = m.reasoning_content;
    a.push_back(std::move(o));
  }
  return a;
}

}  // namespace twinkle
