// src/data/tokenizer/regex.cpp — compiling the pre-tokenizer regexes (regex.h) and the
// Unicode-version alignment of PCRE2 with the Rust library's regex engine, tabulated below.
#include "regex.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "utf8.h"

namespace twinkle::tok {

namespace {

// Unicode-version alignment of PCRE2 with the Rust library's regex engine (Oniguruma).
// Debian 12's PCRE2 10.42 has Unicode 14.0 tables; Oniguruma in `tokenizers` 0.22 has newer
// ones, and PCRE2's \s also matches U+180E (not White_Space since Unicode 6.3). So before
// compiling, \s / \S become explicit White_Space classes and \p{L} / \p{N} (also
// \p{Letter} / \p{Number}) gain the letters / numbers assigned by Unicode 15.0-16.0 (the
// ranges below: Unicode 16.0 L / N minus Unicode 14.0, the version of Oniguruma in the
// reference library; checked code point by code point against it). \S and \P{..} inside a
// character class are left to PCRE2.
const char* kWhiteSpaceItems = "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr uint32_t kNewLetterRanges[][2] = {
    {0x1C89, 0x1C8A}, {0xA7CB, 0xA7CD}, {0xA7DA, 0xA7DC}, {0x105C0, 0x105F3}, {0x10D4A, 0x10D65},
    {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240}, {0x11380, 0x11389}, {0x1138B, 0x1138B},
    {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3},
    {0x11BC0, 0x11BE0}, {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C}, {0x18CFF, 0x18CFF},
    {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB},
    {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF},
};
constexpr uint32_t kNewNumberRanges[][2] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59}, {0x16130, 0x16139},
    {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA},
};

template <size_t N>
std::string class_items(const uint32_t (&ranges)[N][2]) {
  std::string s;
  char buf[48];
  for (auto& r : ranges) {
    if (r[0] == r[1]) std::snprintf(buf, sizeof buf, "\\x{%X}", r[0]);
    else std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", r[0], r[1]);
    s += buf;
  }
  return s;
}

// Code points on which the aligned pattern can differ from the original one.
class AlignmentTable {
 public:
  AlignmentTable() : bits_(0x110000 / 64, 0) {
    for (auto& r : kNewLetterRanges) set(r[0], r[1]);
    for (auto& r : kNewNumberRanges) set(r[0], r[1]);
    set(0x180E, 0x180E);
  }
  bool affected(char32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  void set(uint32_t lo, uint32_t hi) {
    for (uint32_t cp = lo; cp <= hi; ++cp) bits_[cp >> 6] |= 1ull << (cp & 63);
  }
  std::vector<uint64_t> bits_;
};
const AlignmentTable& alignment_table() {
  static const AlignmentTable t;
  return t;
}

}  // namespace

bool has_alignment_sensitive(std::string_view s) {
  const AlignmentTable& t = alignment_table();
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (!(w & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    if (t.affected(utf8_next(s, i))) return true;
  }
  return false;
}

namespace {

std::string align_unicode_pattern(const std::string& pat) {
  std::string out;
  out.reserve(pat.size() * 2);
  bool in_class = false;
  size_t i = 0;
  const size_t n = pat.size();
  while (i < n) {
    const char c = pat[i];
    if (c == '\\' && i + 1 < n) {
      const char e = pat[i + 1];
      if ((e == 'p' || e == 'P') && i + 2 < n && pat[i + 2] == '{') {
        const size_t close = pat.find('}', i + 3);
        if (close != std::string::npos) {
          const std::string prop = pat.substr(i + 3, close - i - 3);
          static const std::string letters = class_items(kNewLetterRanges), numbers = class_items(kNewNumberRanges);
          const std::string* extra = (prop == "L" || prop == "Letter") ? &letters
                                     : (prop == "N" || prop == "Number") ? &numbers : nullptr;
          const std::string orig = pat.substr(i, close + 1 - i);
          if (extra && e == 'p') {
            out += in_class ? orig + *extra : "[" + orig + *extra + "]";
          } else if (extra && !in_class) {  // \P{L} outside a class
            out += "[^\\p{" + prop + "}" + *extra + "]";
          } else {
            out += orig;
          }
          i = close + 1;
          continue;
        }
      }
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceItems) : "[" + std::string(kWhiteSpaceItems) + "]";
        i += 2;
        continue;
      }
      if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceItems) + "]";
        i += 2;
        continue;
      }
      out += pat.substr(i, 2);
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < n && pat[i] == '^') out += pat[i++];
      if (i < n && pat[i] == ']') out += pat[i++];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {  // POSIX class [:name:]
      const size_t close = pat.find(":]", i + 2);
      if (close != std::string::npos) {
        out += pat.substr(i, close + 2 - i);
        i = close + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, const std::string& where) {
  if (literal) {
    aligned_ = compile(pattern, PCRE2_UTF | PCRE2_LITERAL | PCRE2_NO_UTF_CHECK, pattern, where);
    return;
  }
  const std::string pat = align_unicode_pattern(pattern);
  aligned_ = compile(pat, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, pattern, where);
  if (pat != pattern) fast_ = compile(pattern, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, pattern, where);
}

Regex::~Regex() {
  for (Prog* p : {&aligned_, &fast_})
    if (p->code) pcre2_code_free(p->code);
}

Regex::Prog Regex::compile(const std::string& pat, uint32_t opts, const std::string& shown, const std::string& where) {
  int err = 0;
  PCRE2_SIZE eoff = 0;
  Prog p;
  p.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), opts, &err, &eoff, nullptr);
  if (!p.code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw Error(where + ": cannot compile regex /" + shown + "/: " + reinterpret_cast<char*>(buf) +
                (pat == shown ? " at offset " + std::to_string(eoff) : std::string()));
  }
  p.jit = pcre2_jit_compile(p.code, PCRE2_JIT_COMPLETE) == 0;
  return p;
}

}  // namespace twinkle::tok
