// src/data/tokenizer/pre_tokenizer.cpp — Impl::pretokenize_and_model: the pre-tokenizer steps
// (pre_tokenizer.h) over a normalized piece, each resulting pre-token handed to the BPE model.
// Facts followed (Rust `tokenizers` 0.22, read for behaviour, not copied):
//  - pre_tokenizers/split.rs + tokenizer/pattern.rs: regex matches and the gaps between them
//    become pieces; SplitDelimiterBehavior decides how matches are kept.
//  - pre_tokenizers/byte_level.rs: add_prefix_space per piece.
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "impl.h"
#include "pre_tokenizer.h"

namespace twinkle {

using tok::Behavior;
using tok::PreStep;

void Tokenizer::Impl::pretokenize_and_model(std::string_view s, std::vector<int32_t>& out) const {
  if (s.empty()) return;
  if (single_split) {  // Qwen / GPT-4 style: one Split (Isolated) + ByteLevel without regex
    size_t prev = 0;
    single_split->for_each_match(s, [&](size_t b, size_t e) {
      if (b > prev) model_word(s.substr(prev, b - prev), out);
      model_word(s.substr(b, e - b), out);
      prev = e;
    });
    if (prev < s.size()) model_word(s.substr(prev), out);
    return;
  }
  // Generic: pieces are owned strings (ByteLevel add_prefix_space may prepend a space).
  std::vector<std::string> pieces{std::string(s)}, next;
  for (const PreStep& st : steps) {
    next.clear();
    for (std::string& p : pieces) {
      if (st.kind == PreStep::ByteLevel) {
        if (st.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
        if (!st.re) {
          next.push_back(std::move(p));
          continue;
        }
      }
      // (start, end, is_match) covering p
      std::vector<std::tuple<size_t, size_t, bool>> parts;
      size_t prev = 0;
      st.re->for_each_match(p, [&](size_t b, size_t e) {
        if (b > prev) parts.emplace_back(prev, b, false);
        parts.emplace_back(b, e, true);
        prev = e;
      });
      if (prev < p.size()) parts.emplace_back(prev, p.size(), false);
      if (st.kind == PreStep::Split && st.invert)
        for (auto& t : parts) std::get<2>(t) = !std::get<2>(t);
      const Behavior beh = st.kind == PreStep::ByteLevel ? Behavior::Isolated : st.behavior;
      std::vector<std::pair<size_t, size_t>> keep;
      switch (beh) {
        case Behavior::Isolated:
          for (auto& [b, e, m] : parts) keep.emplace_back(b, e);
          break;
        case Behavior::Removed:
          for (auto& [b, e, m] : parts)
            if (!m) keep.emplace_back(b, e);
          break;
        case Behavior::MergedWithPrevious: {
          bool prev_match = false;
          for (auto& [b, e, m] : parts) {
            if (m && !prev_match && !keep.empty()) keep.back().second = e;
            else keep.emplace_back(b, e);
            prev_match = m;
          }
          break;
        }
        case Behavior::MergedWithNext: {
          bool prev_match = false;
          std::vector<std::pair<size_t, size_t>> rev;
          for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            auto& [b, e, m] = *it;
            if (m && !prev_match && !rev.empty()) rev.back().first = b;
            else rev.emplace_back(b, e);
            prev_match = m;
          }
          keep.assign(rev.rbegin(), rev.rend());
          break;
        }
        case Behavior::Contiguous: {
          bool prev_match = false;
          for (auto& [b, e, m] : parts) {
            if (m && prev_match && !keep.empty()) keep.back().second = e;
            else keep.emplace_back(b, e);
            prev_match = m;
          }
          break;
        }
      }
      for (auto& [b, e] : keep)
        if (e > b) next.push_back(p.substr(b, e - b));
    }
    pieces.swap(next);
  }
  for (const std::string& p : pieces) model_word(p, out);
}

}  // namespace twinkle
