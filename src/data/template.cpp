// Qwen3 chat template and label construction — see twinkle/data/template.h.
// The rendering mirrors the Jinja chat_template shipped in Qwen3's tokenizer_config.json
// (tools / tool_calls are not supported), statement by statement.
#include "twinkle/data/template.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "twinkle/core/error.h"
#include "twinkle/core/option_check.h"
#include "twinkle/data/hub.h"

namespace twinkle {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
// Python str.lstrip('\n'), rstrip('\n'), strip('\n')
std::string_view lstrip_nl(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && s[i] == '\n') ++i;
  return s.substr(i);
}
std::string_view rstrip_nl(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && s[n - 1] == '\n') --n;
  return s.substr(0, n);
}
std::string_view strip_nl(std::string_view s) { return rstrip_nl(lstrip_nl(s)); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Byte length of the whitespace character at s[0] as Python's re `\s` on a str matches it
// (str.isspace(): U+0009-000D, U+001C-001F, U+0020, U+0085, U+00A0, U+1680, U+2000-200A,
// U+2028, U+2029, U+202F, U+205F, U+3000), 0 when s does not start with one. The text is
// valid UTF-8 (the tokenizer rejects anything else before labels are built).
size_t py_space_len(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned c0 = b(0);
  if ((c0 >= 0x09 && c0 <= 0x0D) || (c0 >= 0x1C && c0 <= 0x20)) return 1;
  if (c0 == 0xC2 && s.size() >= 2 && (b(1) == 0x85 || b(1) == 0xA0)) return 2;
  if (s.size() < 3) return 0;
  const unsigned cp = ((c0 & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
  if ((c0 & 0xF0u) != 0xE0u) return 0;
  const bool ws = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
                  cp == 0x205F || cp == 0x3000;
  return ws ? 3 : 0;
}

size_t skip_py_spaces(std::string_view s, size_t i) {
  while (i < s.size()) {
    const size_t n = py_space_len(s.substr(i));
    if (n == 0) break;
    i += n;
  }
  return i;
}

// Length of the match of ms-swift's ignore_empty_think regex ^<think>\s*</think>\s*
// (swift/loss_scale/config/ignore_empty_think.json, Python re on a str: `\s` is Unicode
// whitespace, `*` greedy) at text[pos]; 0 when it does not match.
size_t empty_think_prefix(std::string_view text, size_t pos) {
  std::string_view s = text.substr(pos);
  if (!starts_with(s, "<think>")) return 0;
  const size_t i = skip_py_spaces(s, 7);
  if (!starts_with(s.substr(i), "</think>")) return 0;
  return skip_py_spaces(s, i + 8);
}

std::string row_prefix(const std::string& row_name) { return row_name.empty() ? "row" : "row " + row_name; }

struct Span {
  size_t begin, end;  // byte range of an assistant turn's text (trained unless masked below)
  size_t masked_end;  // ignore_empty_think: the regex match is [begin, masked_end); = begin if none
};

struct Rendered {
  std::string text;
  std::vector<Span> spans;  // in order
};

// Where the untrained empty think block of a turn ends in token terms: the largest byte
// position p <= sp.masked_end at a character boundary where the turn's ids split into the ids
// of [begin, p) and [p, end) (every token of the first part lies inside the regex match). The
// ids stay those of the whole conversation; a token holding both matched
// whitespace and the content (" Hello" after "</think>\n\n") is the content's and trained.
// ms-swift tokenizes the matched text and the rest apart instead, which changes the ids.
size_t masked_boundary(const Tokenizer& tok, std::string_view text, const Span& sp) {
  if (sp.masked_end == sp.begin) return sp.begin;
  const std::string_view turn = text.substr(sp.begin, sp.end - sp.begin);
  const std::vector<int32_t> whole = tok.encode(turn);
  for (size_t p = sp.masked_end - sp.begin; p > 0; --p) {
    if (p < turn.size() && (static_cast<unsigned char>(turn[p]) & 0xC0u) == 0x80u) continue;  // inside a character
    std::vector<int32_t> split = tok.encode(turn.substr(0, p));
    const std::vector<int32_t> rest = tok.encode(turn.substr(p));
    split.insert(split.end(), rest.begin(), rest.end());
    if (split == whole) return sp.begin + p;
  }
  return sp.begin;
}

}  // namespace

struct Template::Impl {
  TemplateOptions opts;
  Tokenizer tok;

  Rendered render(const std::vector<Message>& in, bool add_generation_prompt) const;
};

Rendered Template::Impl::render(const std::vector<Message>& in, bool add_generation_prompt) const {
  std::vector<Message> with_system;
  const std::vector<Message>* msgs = &in;
  if (!opts.default_system.empty() && !in.empty() && in[0].role == "user") {
    with_system.reserve(in.size() + 1);
    with_system.push_back(Message{"system", opts.default_system, "", false});
    with_system.insert(with_system.end(), in.begin(), in.end());
    msgs = &with_system;
  }
  const std::vector<Message>& m = *msgs;
  if (m.empty()) throw Error("chat template: no messages");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& r = m[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw Error("chat template: messages[" + std::to_string(i) + "].role \"" + r +
                  "\" is not system, user, assistant or tool");
  }
  Rendered out;
  std::string& o = out.text;
  size_t total = 64;
  for (auto& x : m) total += x.content.size() + x.reasoning_content.size() + 48;
  o.reserve(total);

  if (m[0].role == "system") o += "<|im_start|>system\n" + m[0].content + "<|im_end|>\n";

  // ns.last_query_index: the last user message that is not a wrapped tool response.
  const int64_t n = static_cast<int64_t>(m.size());
  int64_t last_query = n - 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    const Message& x = m[i];
    if (x.role == "user" && !(starts_with(x.content, "<tool_response>") && ends_with(x.content, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }

  for (int64_t i = 0; i < n; ++i) {
    const Message& x = m[i];
    const bool first = i == 0, last = i == n - 1;
    if (x.role == "user" || (x.role == "system" && !first)) {
      o += "<|im_start|>";
      o += x.role;
      o += '\n';
      o += x.content;
      o += "<|im_end|>\n";
    } else if (x.role == "assistant") {
      std::string_view content = x.content;
      std::string_view reasoning;
      if (x.has_reasoning_content || !x.reasoning_content.empty()) {
        reasoning = x.reasoning_content;
      } else {
        const size_t close = content.find("</think>");
        if (close != std::string_view::npos) {
          // content.split('</think>')[-1].lstrip('\n')
          const size_t last_close = x.content.rfind("</think>");
          std::string_view after = std::string_view(x.content).substr(last_close + 8);
          // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
          std::string_view before = rstrip_nl(std::string_view(x.content).substr(0, close));
          const size_t open = before.rfind("<think>");
          if (open != std::string_view::npos) before = before.substr(open + 7);
          reasoning = lstrip_nl(before);
          content = lstrip_nl(after);
        }
      }
      o += "<|im_start|>assistant\n";
      const size_t span_begin = o.size();
      if (i > last_query && (last || !reasoning.empty())) {
        o += "<think>\n";
        o += strip_nl(reasoning);
        o += "\n</think>\n\n";
        o += lstrip_nl(content);
      } else {
        o += content;
      }
      o += "<|im_end|>\n";
      out.spans.push_back({span_begin, o.size(), span_begin + (opts.ignore_empty_think ? empty_think_prefix(o, span_begin) : 0)});
    } else if (x.role == "tool") {
      if (first || m[i - 1].role != "tool") o += "<|im_start|>user";
      o += "\n<tool_response>\n";
      o += x.content;
      o += "\n</tool_response>";
      if (last || m[i + 1].role != "tool") o += "<|im_end|>\n";
    }
  }
  if (add_generation_prompt) {
    o += "<|im_start|>assistant\n";
    if (!opts.enable_thinking) o += "<think>\n\n</think>\n\n";
  }
  return out;
}

void validate(const TemplateOptions& o) {
  static const char* kTrunc[] = {"raise", "left", "right", "delete", "split"};
  check_option(std::find(std::begin(kTrunc), std::end(kTrunc), o.truncation) != std::end(kTrunc), "template",
               "truncation", "one of raise, left, right, delete, split", o.truncation);
  check_option(o.max_length >= 1, "template", "max_length", ">= 1", o.max_length);
}

Template::Template(const std::string& name, const TemplateOptions& opts)
    : Template(name, opts, Tokenizer::from_dir(resolve_model_dir(opts.model_id))) {}

Template::Template(const std::string& name, const TemplateOptions& opts, Tokenizer tokenizer) {
  const std::string n = lower(name);
  if (n != "template" && n != "qwen3")
    throw Error("chat template \"" + name + "\" is unknown (supported: \"qwen3\", \"Template\")");
  validate(opts);
  const std::string where = opts.model_id.empty() ? std::string("the tokenizer") : "model '" + opts.model_id + "'";
  for (const char* t : {"<|im_start|>", "<|im_end|>"})
    if (!tokenizer.token_to_id(t)) throw Error(where + " has no token " + t + " (not a Qwen chat tokenizer)");
  const std::string& ct = tokenizer.chat_template();
  if (!ct.empty() && ct.find("last_query_index") == std::string::npos)
    throw Error(where + ": its chat_template is not the Qwen3 template (no last_query_index); only qwen3 is implemented");
  auto impl = std::make_shared<Impl>();
  impl->opts = opts;
  impl->tok = std::move(tokenizer);
  impl_ = std::move(impl);
}

std::string Template::render(const std::vector<Message>& messages, bool add_generation_prompt) const {
  return impl_->render(messages, add_generation_prompt).text;
}

std::vector<EncodedRow> Template::encode(const std::vector<Message>& messages, const std::string& row_name) const {
  const Impl& I = *impl_;
  Rendered r;
  std::vector<int32_t> full;
  try {
    r = I.render(messages, false);
    full = I.tok.encode(r.text);
  } catch (const Error& e) {
    throw Error(row_prefix(row_name) + ": " + e.what());
  }
  // Piecewise tokenization at the label boundaries.
  std::vector<int32_t> ids, labels;
  ids.reserve(full.size());
  labels.reserve(full.size());
  size_t pos = 0;
  auto piece = [&](size_t b, size_t e, bool trained) {
    if (e <= b) return;
    const std::vector<int32_t> p = I.tok.encode(std::string_view(r.text).substr(b, e - b));
    ids.insert(ids.end(), p.begin(), p.end());
    if (trained) labels.insert(labels.end(), p.begin(), p.end());
    else labels.insert(labels.end(), p.size(), kIgnoreIndex);
  };
  for (const Span& sp : r.spans) {
    piece(pos, sp.begin, false);
    const size_t mid = masked_boundary(I.tok, r.text, sp);
    piece(sp.begin, mid, false);
    piece(mid, sp.end, true);
    pos = sp.end;
  }
  piece(pos, r.text.size(), false);
  if (ids != full) {
    size_t k = 0;
    while (k < ids.size() && k < full.size() && ids[k] == full[k]) ++k;
    // Which boundary: the first span whose start lies at or after the first differing token.
    size_t turn = 0, acc = 0;
    std::string where = "an assistant turn";
    for (size_t t = 0; t < r.spans.size(); ++t) {
      acc = I.tok.encode(std::string_view(r.text).substr(0, r.spans[t].begin)).size();
      turn = t;
      if (acc >= k) break;
    }
    if (!r.spans.empty()) where = "assistant turn " + std::to_string(turn);
    throw Error(row_prefix(row_name) + ": the label boundary of " + where +
                " falls inside a token (tokenizing the turn separately differs from the whole "
                "conversation at token " + std::to_string(k) +
                "; e.g. content starting with a newline in an earlier assistant turn)");
  }

  const int64_t L = static_cast<int64_t>(ids.size());
  const int64_t M = I.opts.max_length;
  auto make = [](std::vector<int32_t> a, std::vector<int32_t> l) {
    EncodedRow row;
    row.length = static_cast<int64_t>(a.size());
    row.attention_mask.assign(a.size(), 1);
    row.position_ids.resize(a.size());
    for (size_t i = 0; i < a.size(); ++i) row.position_ids[i] = static_cast<int32_t>(i);
    row.input_ids = std::move(a);
    row.labels = std::move(l);
    return row;
  };
  std::vector<EncodedRow> rows;
  if (L <= M) {
    rows.push_back(make(std::move(ids), std::move(labels)));
    return rows;
  }
  const std::string& t = I.opts.truncation;
  if (t == "raise")
    throw Error(row_prefix(row_name) + ": length " + std::to_string(L) + " exceeds max_length " + std::to_string(M));
  if (t == "delete") return rows;
  if (t == "left") {
    rows.push_back(make(std::vector<int32_t>(ids.end() - M, ids.end()), std::vector<int32_t>(labels.end() - M, labels.end())));
  } else if (t == "right") {
    rows.push_back(make(std::vector<int32_t>(ids.begin(), ids.begin() + M),
                        std::vector<int32_t>(labels.begin(), labels.begin() + M)));
  } else {  // split
    for (int64_t s = 0; s < L; s += M) {
      const int64_t e = std::min(L, s + M);
      rows.push_back(make(std::vector<int32_t>(ids.begin() + s, ids.begin() + e),
                          std::vector<int32_t>(labels.begin() + s, labels.begin() + e)));
    }
  }
  return rows;
}

std::vector<int32_t> Template::encode_prompt(const std::vector<Message>& messages) const {
  return impl_->tok.encode(impl_->render(messages, true).text);
}

const Tokenizer& Template::tokenizer() const { return impl_->tok; }
const TemplateOptions& Template::options() const { return impl_->opts; }

std::vector<Message> messages_from_json(std::string_view json_text, const std::string& row_name) {
  using nlohmann::json;
  const std::string where = row_prefix(row_name);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const std::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  }
  const json* arr = &j;
  if (j.is_object()) {
    if (!j.contains("messages")) throw Error(where + ": no \"messages\" field");
    arr = &j["messages"];
  }
  if (!arr->is_array()) throw Error(where + ": \"messages\" is not an array");
  std::vector<Message> out;
  out.reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    const json& m = (*arr)[i];
    const std::string f = where + ": messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw Error(f + " is not an object");
    if (!m.contains("role") || !m["role"].is_string()) throw Error(f + ".role missing or not a string");
    Message msg;
    msg.role = m["role"].get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      throw Error(f + ".role \"" + msg.role + "\" is not system, user, assistant or tool");
    if (!m.contains("content")) throw Error(f + ".content missing");
    if (m["content"].is_string()) msg.content = m["content"].get<std::string>();
    else if (!m["content"].is_null()) throw Error(f + ".content is not a string");
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      if (!m["reasoning_content"].is_string()) throw Error(f + ".reasoning_content is not a string");
      msg.reasoning_content = m["reasoning_content"].get<std::string>();
      msg.has_reasoning_content = true;
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null())
      throw Error(f + ".tool_calls: tool calls are not supported by the qwen3 template implementation");
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace twinkle
