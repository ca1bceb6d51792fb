// src/data/tokenizer/load.cpp — Tokenizer::from_json / from_file / from_dir: tokenizer.json
// (model, normalizer, pre_tokenizer, added_tokens, post_processor, decoder) into a
// Tokenizer::Impl, and tokenizer_config.json (chat template, eos / pad tokens).
// Facts followed (Rust `tokenizers` 0.22, read for behaviour, not copied): models/bpe/model.rs:
// merges, rank = line index, later duplicates win; tokenizer/serialization.rs +
// added_vocabulary.rs: the ids of the added tokens (see the comment in from_json).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "byte_table.h"
#include "impl.h"
#include "pre_tokenizer.h"
#include "regex.h"
#include "twinkle/core/error.h"
#include "unicode.h"
#include "utf8.h"

namespace twinkle {

using json = nlohmann::json;
using tok::AddedToken;
using tok::Behavior;
using tok::byte_table;
using tok::bytelevel_to_bytes;
using tok::kGpt2Pattern;
using tok::nfc_table;
using tok::NormKind;
using tok::PreStep;
using tok::Regex;

namespace {

// Tokenizer::Impl::uid: tells the per-thread word caches (bpe.cpp) which tokenizer filled them.
std::atomic<uint64_t> g_next_uid{1};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string type_of(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error(where + ": expected an object with a string \"type\"");
  return j["type"].get<std::string>();
}

bool get_bool(const json& j, const char* key, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  return j[key].get<bool>();
}

void parse_normalizer(const json& j, std::vector<NormKind>& out, const std::string& where) {
  if (j.is_null()) return;
  const std::string t = type_of(j, where);
  if (t == "NFC") {
    out.push_back(NormKind::NFC);
    (void)nfc_table();  // build the quick-check table at load time
  }
  else if (t == "NFD") out.push_back(NormKind::NFD);
  else if (t == "NFKC") out.push_back(NormKind::NFKC);
  else if (t == "NFKD") out.push_back(NormKind::NFKD);
  else if (t == "Lowercase") out.push_back(NormKind::Lowercase);
  else if (t == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      throw Error(where + ": Sequence without a \"normalizers\" array");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      parse_normalizer(j["normalizers"][i], out, where + ".normalizers[" + std::to_string(i) + "]");
  } else {
    throw Error(where + ": unsupported normalizer type \"" + t +
                "\" (supported: NFC, NFD, NFKC, NFKD, Lowercase, Sequence)");
  }
}

void parse_pre_tokenizer(const json& j, std::vector<PreStep>& out, const std::string& where) {
  if (j.is_null()) return;
  const std::string t = type_of(j, where);
  if (t == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw Error(where + ": Sequence without a \"pretokenizers\" array");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      parse_pre_tokenizer(j["pretokenizers"][i], out, where + ".pretokenizers[" + std::to_string(i) + "]");
  } else if (t == "Split") {
    PreStep st;
    st.kind = PreStep::Split;
    if (!j.contains("pattern") || !j["pattern"].is_object()) throw Error(where + ": Split without \"pattern\"");
    const json& pat = j["pattern"];
    if (pat.contains("Regex")) st.re = std::make_unique<Regex>(pat["Regex"].get<std::string>(), false, where + ".pattern");
    else if (pat.contains("String"))
      st.re = std::make_unique<Regex>(pat["String"].get<std::string>(), true, where + ".pattern");
    else throw Error(where + ".pattern: expected \"Regex\" or \"String\"");
    const std::string b = j.value("behavior", std::string("Isolated"));
    if (b == "Removed") st.behavior = Behavior::Removed;
    else if (b == "Isolated") st.behavior = Behavior::Isolated;
    else if (b == "MergedWithPrevious") st.behavior = Behavior::MergedWithPrevious;
    else if (b == "MergedWithNext") st.behavior = Behavior::MergedWithNext;
    else if (b == "Contiguous") st.behavior = Behavior::Contiguous;
    else throw Error(where + ".behavior: unsupported \"" + b + "\"");
    st.invert = get_bool(j, "invert", false);
    out.push_back(std::move(st));
  } else if (t == "ByteLevel") {
    PreStep st;
    st.kind = PreStep::ByteLevel;
    st.add_prefix_space = get_bool(j, "add_prefix_space", true);
    if (get_bool(j, "use_regex", true)) st.re = std::make_unique<Regex>(kGpt2Pattern, false, where + " (GPT-2 regex)");
    out.push_back(std::move(st));
  } else {
    throw Error(where + ": unsupported pre_tokenizer type \"" + t + "\" (supported: Split, ByteLevel, Sequence)");
  }
}

std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

}  // namespace

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& name) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const std::exception& e) {
    throw Error(name + ": not valid JSON: " + e.what());
  }
  auto impl = std::make_shared<Impl>();
  Impl& I = *impl;
  I.uid = g_next_uid.fetch_add(1);
  I.name = name;
  try {
    if (!j.is_object()) throw Error(name + ": top level is not an object");
    // ---- model ----
    if (!j.contains("model") || !j["model"].is_object()) throw Error(name + ": missing \"model\"");
    const json& m = j["model"];
    const std::string mtype = m.value("type", std::string("BPE"));
    if (mtype != "BPE") throw Error(name + ": model.type \"" + mtype + "\" unsupported (only BPE)");
    if (m.contains("dropout") && !m["dropout"].is_null())
      throw Error(name + ": model.dropout must be null (BPE dropout is unsupported)");
    if (!m.contains("vocab") || !m["vocab"].is_object()) throw Error(name + ": model.vocab missing or not an object");
    int64_t max_id = -1;
    I.vocab.reserve(m["vocab"].size() * 2);
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      if (!it.value().is_number_integer())
        throw Error(name + ": model.vocab[\"" + it.key() + "\"] is not an integer id");
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id > INT32_MAX) throw Error(name + ": model.vocab[\"" + it.key() + "\"] id out of range");
      I.vocab[it.key()] = static_cast<int32_t>(id);
      max_id = std::max(max_id, id);
    }
    I.ignore_merges = get_bool(m, "ignore_merges", false);
    I.fuse_unk = get_bool(m, "fuse_unk", false);
    I.byte_fallback = get_bool(m, "byte_fallback", false);
    if (m.contains("continuing_subword_prefix") && m["continuing_subword_prefix"].is_string())
      I.cont_prefix = m["continuing_subword_prefix"].get<std::string>();
    if (m.contains("end_of_word_suffix") && m["end_of_word_suffix"].is_string())
      I.end_suffix = m["end_of_word_suffix"].get<std::string>();
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      auto it = I.vocab.find(m["unk_token"].get<std::string>());
      if (it == I.vocab.end()) throw Error(name + ": model.unk_token \"" + m["unk_token"].get<std::string>() + "\" not in vocab");
      I.unk_id = it->second;
    }
    // merges
    if (!m.contains("merges") || !m["merges"].is_array()) throw Error(name + ": model.merges missing or not an array");
    const json& mg = m["merges"];
    I.merges.init(mg.size());
    for (size_t r = 0; r < mg.size(); ++r) {
      std::string a, b;
      const json& e = mg[r];
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw Error(name + ": model.merges[" + std::to_string(r) + "] \"" + s + "\" is not two tokens separated by one space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        throw Error(name + ": model.merges[" + std::to_string(r) + "] is neither \"a b\" nor [\"a\", \"b\"]");
      }
      auto ia = I.vocab.find(a), ib = I.vocab.find(b);
      if (ia == I.vocab.end() || ib == I.vocab.end())
        throw Error(name + ": model.merges[" + std::to_string(r) + "]: token \"" + (ia == I.vocab.end() ? a : b) +
                    "\" not in vocab");
      std::string merged = a + (I.cont_prefix.empty() || b.rfind(I.cont_prefix, 0) != 0 ? b : b.substr(I.cont_prefix.size()));
      auto im = I.vocab.find(merged);
      if (im == I.vocab.end())
        throw Error(name + ": model.merges[" + std::to_string(r) + "]: merged token \"" + merged + "\" not in vocab");
      I.merges.put(ia->second, ib->second, static_cast<uint32_t>(r), im->second);
    }

    // ---- normalizer / pre_tokenizer ----
    if (j.contains("normalizer")) parse_normalizer(j["normalizer"], I.norms, name + ": normalizer");
    if (j.contains("pre_tokenizer")) parse_pre_tokenizer(j["pre_tokenizer"], I.steps, name + ": pre_tokenizer");
    for (size_t i = 0; i < I.steps.size(); ++i) {
      if (I.steps[i].kind == PreStep::ByteLevel) {
        if (i + 1 != I.steps.size())
          throw Error(name + ": pre_tokenizer: ByteLevel must be the last pre-tokenizer (unsupported order)");
        I.byte_level = true;
      }
    }
    if (I.byte_level && (!I.cont_prefix.empty() || !I.end_suffix.empty() || I.byte_fallback))
      throw Error(name + ": model: continuing_subword_prefix / end_of_word_suffix / byte_fallback are unsupported with ByteLevel");
    if (I.steps.size() == 2 && I.steps[0].kind == PreStep::Split && I.steps[0].behavior == Behavior::Isolated &&
        !I.steps[0].invert && I.steps[1].kind == PreStep::ByteLevel && !I.steps[1].re && !I.steps[1].add_prefix_space)
      I.single_split = I.steps[0].re.get();
    if (I.byte_level) {
      const auto& bt = byte_table();
      for (int b = 0; b < 256; ++b) {
        auto it = I.vocab.find(bt.byte_to_str[b]);
        I.byte_id[b] = it == I.vocab.end() ? -1 : it->second;
      }
      if (I.ignore_merges) {
        for (auto& [t, id] : I.vocab) {
          std::string raw = bytelevel_to_bytes(t);
          I.vocab_raw.emplace(raw, id);
        }
      }
    } else {
      std::fill(std::begin(I.byte_id), std::end(I.byte_id), -1);
    }

    // ---- added tokens ----
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      const json& at = j["added_tokens"];
      if (!at.is_array()) throw Error(name + ": added_tokens is not an array");
      int64_t max_added = -1;
      for (size_t i = 0; i < at.size(); ++i) {
        const json& t = at[i];
        const std::string w = name + ": added_tokens[" + std::to_string(i) + "]";
        if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
            !t["content"].is_string())
          throw Error(w + ": needs an integer \"id\" and a string \"content\"");
        AddedToken a;
        if (t["id"].get<int64_t>() < 0) throw Error(w + ": negative id");
        a.content = t["content"].get<std::string>();
        a.special = get_bool(t, "special", false);
        a.lstrip = get_bool(t, "lstrip", false);
        a.rstrip = get_bool(t, "rstrip", false);
        a.normalized = get_bool(t, "normalized", !a.special);
        a.single_word = get_bool(t, "single_word", false);
        if (tok::utf8_invalid_offset(a.content) != tok::kValidUtf8) throw Error(w + ": content is not valid UTF-8");
        if (a.content.empty()) continue;  // ignored by the Rust library
        // The id is the one the Rust library assigns (tokenizer/serialization.rs re-adds the
        // tokens through AddedVocabulary::add_tokens and only warns when it differs from the
        // file): an existing added token or vocab entry keeps its id, a new one gets
        // vocab.len() or (largest added id + 1).
        auto same = I.added_by_content.find(a.content);
        auto in_vocab = I.vocab.find(a.content);
        if (same != I.added_by_content.end()) {
          a.id = same->second;
        } else if (in_vocab != I.vocab.end()) {
          a.id = in_vocab->second;
        } else if (max_added < 0) {
          a.id = static_cast<int32_t>(I.vocab.size());
        } else {
          a.id = (max_added >= static_cast<int64_t>(I.vocab.size()) || I.vocab.empty())
                     ? static_cast<int32_t>(max_added + 1)
                     : static_cast<int32_t>(I.vocab.size());
        }
        max_added = std::max<int64_t>(max_added, a.id);
        max_id = std::max<int64_t>(max_id, a.id);
        if (a.special) I.special_ids.insert(a.id);
        if (same != I.added_by_content.end()) {  // same content again: the later flags win
          for (AddedToken& old : I.added)
            if (old.content == a.content) old = a;
          continue;
        }
        I.added_by_content[a.content] = a.id;
        I.added.push_back(std::move(a));
      }
      // Matching order of the Rust library: special tokens first, then the others.
      std::vector<int> order;
      for (int pass = 0; pass < 2; ++pass)
        for (size_t i = 0; i < I.added.size(); ++i)
          if (I.added[i].special == (pass == 0)) order.push_back(static_cast<int>(i));
      for (int i : order) {
        const AddedToken& a = I.added[i];
        if (a.content.empty()) continue;
        if (!a.normalized) {
          I.raw_index.push_back(i);
          I.raw_matcher.add(a.content, static_cast<int>(I.raw_index.size()) - 1);
        } else {
          I.norm_index.push_back(i);
          I.norm_matcher.add(I.norms.empty() ? a.content : I.normalize(a.content),
                             static_cast<int>(I.norm_index.size()) - 1);
        }
      }
    }

    I.vocab_size = max_id + 1;
    I.id_to_tok.assign(static_cast<size_t>(I.vocab_size), std::string());
    I.id_assigned.assign(static_cast<size_t>(I.vocab_size), 0);
    for (auto& [t, id] : I.vocab) {
      I.id_to_tok[id] = t;
      I.id_assigned[id] = 1;
    }
    for (auto& a : I.added) {
      I.id_to_tok[a.id] = a.content;
      I.id_assigned[a.id] = 1;
    }

    // ---- post-processor ----
    if (j.contains("post_processor") && !j["post_processor"].is_null()) {
      const json& pp = j["post_processor"];
      const std::string t = type_of(pp, name + ": post_processor");
      if (t == "TemplateProcessing") {
        if (!pp.contains("single") || !pp["single"].is_array())
          throw Error(name + ": post_processor.single missing");
        bool seen_seq = false;
        for (const json& piece : pp["single"]) {
          if (piece.contains("Sequence")) {
            seen_seq = true;
          } else if (piece.contains("SpecialToken")) {
            const std::string sid = piece["SpecialToken"].value("id", std::string());
            const json& st = pp.value("special_tokens", json::object());
            if (!st.contains(sid) || !st[sid].contains("ids"))
              throw Error(name + ": post_processor.special_tokens has no \"" + sid + "\"");
            for (const json& x : st[sid]["ids"]) (seen_seq ? I.post_suffix : I.post_prefix).push_back(x.get<int32_t>());
          } else {
            throw Error(name + ": post_processor.single: unknown piece " + piece.dump());
          }
        }
      } else if (t != "ByteLevel") {
        throw Error(name + ": unsupported post_processor type \"" + t + "\" (supported: ByteLevel, TemplateProcessing)");
      }
    }

    // ---- decoder ----
    if (j.contains("decoder") && !j["decoder"].is_null()) {
      const std::string t = type_of(j["decoder"], name + ": decoder");
      if (t == "ByteLevel") I.decoder = Impl::Decoder::ByteLevel;
      else throw Error(name + ": unsupported decoder type \"" + t + "\" (supported: ByteLevel)");
    }
    I.id_bytes.assign(static_cast<size_t>(I.vocab_size), std::string());
    for (size_t id = 0; id < I.id_to_tok.size(); ++id)
      I.id_bytes[id] = I.decoder == Impl::Decoder::ByteLevel ? bytelevel_to_bytes(I.id_to_tok[id]) : I.id_to_tok[id];
  } catch (const json::exception& e) {
    throw Error(name + ": malformed field: " + e.what());
  }
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json) {
  return from_json(read_file(tokenizer_json), tokenizer_json);
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  Tokenizer t = from_file(dir + "/tokenizer.json");
  auto impl = std::const_pointer_cast<Impl>(t.impl_);
  const std::string cfg_path = dir + "/tokenizer_config.json";
  std::ifstream probe(cfg_path);
  if (probe) {
    probe.close();
    json c;
    try {
      c = json::parse(read_file(cfg_path));
    } catch (const json::exception& e) {
      throw Error(cfg_path + ": not valid JSON: " + e.what());
    }
    if (!c.is_object()) throw Error(cfg_path + ": top level is not an object");
    if (c.contains("chat_template")) {
      const json& ct = c["chat_template"];
      if (ct.is_string()) {
        impl->chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {
        for (const json& e : ct)
          if (e.is_object() && e.value("name", std::string()) == "default")
            impl->chat_template = e.value("template", std::string());
      } else if (!ct.is_null()) {
        throw Error(cfg_path + ": chat_template is neither a string nor a list");
      }
    }
    auto id_of = [&](const char* key) -> int32_t {
      if (!c.contains(key) || c[key].is_null()) return -1;
      const std::string s = token_content(c[key]);
      if (s.empty()) throw Error(cfg_path + ": " + key + " is not a token string");
      auto id = t.token_to_id(s);
      if (!id) throw Error(cfg_path + ": " + key + " \"" + s + "\" is not in the vocabulary");
      return *id;
    };
    impl->eos_id = id_of("eos_token");
    const int32_t pad = id_of("pad_token");
    impl->pad_id = pad >= 0 ? pad : (impl->eos_id >= 0 ? impl->eos_id : 0);
  }
  return t;
}

}  // namespace twinkle
