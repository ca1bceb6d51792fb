// src/data/tokenizer/added_tokens.h — the added vocabulary's tokens and their leftmost-longest
// byte trie (Rust `tokenizers` 0.22, tokenizer/added_vocabulary.rs, read for behaviour, not
// copied). Header-only: find() runs per text piece and inlines into Impl::split_added
// (encode.cpp), which applies lstrip / rstrip / single_word. Internal header (not installed).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace twinkle::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, normalized = true, single_word = false;
};

class AddedMatcher {
 public:
  bool empty() const { return patterns_.empty(); }
  void add(const std::string& pattern, int token_index) {
    if (pattern.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    int node = 0;
    for (unsigned char c : pattern) {
      auto& ch = nodes_[node].next;
      auto it = std::find_if(ch.begin(), ch.end(), [c](auto& p) { return p.first == c; });
      if (it == ch.end()) {
        nodes_.emplace_back();
        nodes_[node].next.emplace_back(c, static_cast<int>(nodes_.size()) - 1);
        node = static_cast<int>(nodes_.size()) - 1;
      } else {
        node = it->second;
      }
    }
    if (nodes_[node].term < 0) nodes_[node].term = token_index;  // first pattern wins on duplicates
    first_[static_cast<unsigned char>(pattern[0])] = true;
    patterns_.push_back(pattern);
  }
  /// Leftmost-longest match at or after `from`: true with [b, e) and the token index.
  bool find(std::string_view s, size_t from, size_t& b, size_t& e, int& idx) const {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    for (size_t i = from; i < n; ++i) {
      if (!first_[p[i]]) continue;
      int node = 0, best = -1;
      size_t best_end = 0;
      for (size_t j = i; j < n; ++j) {
        int nx = -1;
        for (auto& [c, child] : nodes_[node].next)
          if (c == p[j]) {
            nx = child;
            break;
          }
        if (nx < 0) break;
        node = nx;
        if (nodes_[node].term >= 0) {
          best = nodes_[node].term;
          best_end = j + 1;
        }
      }
      if (best >= 0) {
        b = i;
        e = best_end;
        idx = best;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> next;
    int term = -1;
  };
  std::vector<Node> nodes_;
  bool first_[256] = {};
  std::vector<std::string> patterns_;
};

}  // namespace twinkle::tok
