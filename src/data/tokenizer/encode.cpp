// src/data/tokenizer/encode.cpp — the encode pipeline of Tokenizer::Impl up to the
// pre-tokenizer: added tokens split out of the raw text, the normalizer, added tokens split out
// of the normalized pieces (then pre_tokenizer.cpp, bpe.cpp).
// Facts followed (Rust `tokenizers` 0.22, read for behaviour, not copied):
//  - tokenizer/added_vocabulary.rs: added tokens split first, leftmost-longest, non-normalized
//    ones on the raw text, normalized ones on the normalized pieces; lstrip/rstrip/single_word.
#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "added_tokens.h"
#include "impl.h"
#include "twinkle/core/error.h"
#include "unicode.h"
#include "utf8.h"

namespace twinkle {

using tok::AddedMatcher;
using tok::AddedToken;
using tok::is_white_space;
using tok::is_word_char;
using tok::lowercase;
using tok::nfc_regions;
using tok::NormKind;
using tok::thread_cache;
using tok::tl_current_cache;
using tok::utf8_next;
using tok::utf8proc_apply_v9;

std::string Tokenizer::Impl::normalize(std::string_view s) const {
  std::string cur(s);
  for (NormKind k : norms) {
    switch (k) {
      case NormKind::NFC: {
        std::string tmp;
        if (nfc_regions(cur, tmp)) cur.swap(tmp);
        break;
      }
      case NormKind::NFD:
        cur = utf8proc_apply_v9(cur, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, name + ": NFD");
        break;
      case NormKind::NFKC:
        cur = utf8proc_apply_v9(cur, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, name + ": NFKC");
        break;
      case NormKind::NFKD:
        cur = utf8proc_apply_v9(cur, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, name + ": NFKD");
        break;
      case NormKind::Lowercase:
        cur = lowercase(cur);
        break;
    }
  }
  return cur;
}

// Splits `s` on the added tokens of matcher `m` (added_vocabulary.rs find_matches) and calls
// emit(piece, -1) for text and emit({}, id) for an added token.
template <class Emit>
void Tokenizer::Impl::split_added(std::string_view s, const AddedMatcher& m, const std::vector<int>& index,
                                  Emit&& emit) const {
  if (m.empty()) {
    emit(s, -1);
    return;
  }
  size_t start_offset = 0, from = 0, mb, me;
  int pi;
  while (from < s.size() && m.find(s, from, mb, me, pi)) {
    from = me;
    const AddedToken& t = added[index[pi]];
    size_t start = mb, stop = me;
    if (t.single_word) {
      bool start_space = true, stop_space = true;
      if (start > 0) {
        size_t k = tok::utf8_prev(s, start);
        start_space = !is_word_char(utf8_next(s, k));
      }
      if (stop < s.size()) {
        size_t k = stop;
        stop_space = !is_word_char(utf8_next(s, k));
      }
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t p = tok::utf8_prev(s, ns), k = p;
        if (!is_white_space(utf8_next(s, k))) break;
        ns = p;
      }
      start = std::max(ns, start_offset);
    }
    if (t.rstrip) {
      size_t k = stop;
      while (k < s.size()) {
        size_t j = k;
        if (!is_white_space(utf8_next(s, j))) break;
        k = j;
      }
      stop = k;
      from = std::max(from, stop);
    }
    if (start_offset < start) emit(s.substr(start_offset, start - start_offset), -1);
    emit(std::string_view{}, t.id);
    start_offset = stop;
  }
  if (start_offset < s.size()) emit(s.substr(start_offset), -1);
}

void Tokenizer::Impl::normalized_piece(std::string_view raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  if (norms.size() == 1 && norms[0] == NormKind::NFC) {
    thread_local std::string buf;
    const bool changed = nfc_regions(raw, buf);
    const std::string_view v = changed ? std::string_view(buf) : raw;
    split_added(v, norm_matcher, norm_index, [&](std::string_view p, int32_t id) {
      if (id >= 0) out.push_back(id);
      else pretokenize_and_model(p, out);
    });
    return;
  }
  if (norms.empty()) {
    split_added(raw, norm_matcher, norm_index, [&](std::string_view p, int32_t id) {
      if (id >= 0) out.push_back(id);
      else pretokenize_and_model(p, out);
    });
    return;
  }
  const std::string n = normalize(raw);
  split_added(n, norm_matcher, norm_index, [&](std::string_view p, int32_t id) {
    if (id >= 0) out.push_back(id);
    else pretokenize_and_model(p, out);
  });
}

void Tokenizer::Impl::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  const size_t bad = tok::utf8_invalid_offset(text);
  if (bad != tok::kValidUtf8) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned char>(text[bad]));
    throw Error("tokenizer encode: invalid UTF-8 at byte offset " + std::to_string(bad) + " (byte " + buf +
                ") of a " + std::to_string(text.size()) + "-byte input");
  }
  tl_current_cache = &thread_cache(uid);
  split_added(text, raw_matcher, raw_index, [&](std::string_view p, int32_t id) {
    if (id >= 0) out.push_back(id);
    else normalized_piece(p, out);
  });
}

}  // namespace twinkle
