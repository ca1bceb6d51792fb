// src/data/tokenizer/regex.h — the pre-tokenizer's regex: PCRE2 (JIT, UTF + UCP) with the
// Unicode-version alignment to the Rust library's engine (regex.cpp). for_each_match runs once
// per text piece and is defined here, with its per-thread match scratch, so it inlines into the
// pre-tokenizer (pre_tokenizer.cpp). Internal header (not installed).
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "twinkle/core/error.h"
#include "utf8.h"

namespace twinkle::tok {

struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mc = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    md = pcre2_match_data_create(4, nullptr);
    mc = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (mc && stack) pcre2_jit_stack_assign(mc, nullptr, stack);
  }
  ~MatchScratch() {
    if (md) pcre2_match_data_free(md);
    if (mc) pcre2_match_context_free(mc);
    if (stack) pcre2_jit_stack_free(stack);
  }
};
inline MatchScratch& match_scratch() {
  thread_local MatchScratch s;
  return s;
}

// True when `s` holds a code point on which the Unicode-aligned pattern can differ from the one
// as written (the ranges of regex.cpp).
bool has_alignment_sensitive(std::string_view s);

class Regex {
 public:
  Regex() = default;
  /// Compiles `pattern` (PCRE2, UTF + UCP, JIT). Non-literal patterns are compiled twice: as
  /// written (fast) and Unicode-aligned (align_unicode_pattern, with large explicit classes);
  /// the aligned program only runs on subjects holding a code point where the two differ.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex();

  /// Calls fn(start, end) for every non-overlapping match of the subject (valid UTF-8),
  /// left to right; an empty match advances one character and is not reported.
  template <class Fn>
  void for_each_match(std::string_view s, Fn&& fn) const {
    const Prog& p = (fast_.code && !has_alignment_sensitive(s)) ? fast_ : aligned_;
    auto& sc = match_scratch();
    const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t off = 0;
    const size_t n = s.size();
    while (off <= n) {
      int rc = p.jit ? pcre2_jit_match(p.code, subj, n, off, PCRE2_NO_UTF_CHECK, sc.md, sc.mc)
                     : pcre2_match(p.code, subj, n, off, PCRE2_NO_UTF_CHECK, sc.md, sc.mc);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(rc, buf, sizeof buf);
        throw Error(std::string("tokenizer regex match failed: ") + reinterpret_cast<char*>(buf));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(sc.md);
      const size_t b = ov[0], e = ov[1];
      if (e > b) {
        fn(b, e);
        off = e;
      } else {
        if (b >= n) return;
        size_t j = b;
        utf8_next(s, j);
        off = j;
      }
    }
  }

 private:
  struct Prog {
    pcre2_code* code = nullptr;
    bool jit = false;
  };
  static Prog compile(const std::string& pat, uint32_t opts, const std::string& shown, const std::string& where);
  Prog aligned_, fast_;
};

}  // namespace twinkle::tok
