// Hugging Face tokenizer.json (byte-level BPE) — see twinkle/data/tokenizer.h.
//
// Facts followed (Rust `tokenizers` 0.22, read for behaviour, not copied):
//  - tokenizer/added_vocabulary.rs: added tokens split first, leftmost-longest, non-normalized
//    ones on the raw text, normalized ones on the normalized pieces; lstrip/rstrip/single_word.
//  - pre_tokenizers/split.rs + tokenizer/pattern.rs: regex matches and the gaps between them
//    become pieces; SplitDelimiterBehavior decides how matches are kept.
//  - pre_tokenizers/byte_level.rs: GPT-2 bytes_to_unicode table, add_prefix_space per piece.
//  - models/bpe/{model,word}.rs: merges (rank = line index, later duplicates win), merge loop
//    with a priority queue ordered by (rank, position) and the same stale-entry check.
//  - decoders/byte_level.rs: chars -> bytes (a token with a char outside the table keeps its
//    own UTF-8 bytes), then String::from_utf8_lossy.
#include "twinkle/data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer_unicode.h"
#include "twinkle/core/error.h"

namespace twinkle {

using json = nlohmann::json;
using tok::utf8_next;

namespace tok {

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  static const char kRepl[] = "\xEF\xBF\xBD";
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      out.append(kRepl, 3);
      ++i;
      continue;
    }
    size_t k = 1;
    bool ok = true;
    for (; k <= need; ++k) {
      if (i + k >= n) {
        ok = false;
        break;
      }
      const unsigned b = p[i + k];
      const unsigned l = (k == 1) ? lo : 0x80, h = (k == 1) ? hi : 0xBF;
      if (b < l || b > h) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append(s.substr(i, need + 1));
      i += need + 1;
    } else {
      out.append(kRepl, 3);
      i += k;  // the maximal subpart: lead byte plus the valid continuation bytes seen
    }
  }
  return out;
}

}  // namespace tok

namespace {

// ------------------------------------------------------------------------------------------
// Hashing and small open-addressing tables
// ------------------------------------------------------------------------------------------
inline uint64_t mix64(uint64_t a, uint64_t b) {
  __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w, 0xbf58476d1ce4e5b9ull);
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    h = mix64(h ^ w, 0x94d049bb133111ebull);
  }
  return mix64(h, 0x2545F4914F6CDD1Dull);
}

/// (left id, right id) -> (rank, merged id); linear probing, power-of-two capacity.
class MergeTable {
 public:
  void init(size_t n) {
    size_t cap = 16;
    while (cap < n * 2 + 16) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, 0);
    mask_ = cap - 1;
  }
  // Inserts or overwrites.
  void put(int32_t a, int32_t b, uint32_t rank, int32_t id) {
    const uint64_t key = pack(a, b);
    size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    keys_[i] = key;
    vals_[i] = (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(id);
  }
  // true when found; rank/id out.
  inline bool get(int32_t a, int32_t b, uint32_t& rank, int32_t& id) const {
    const uint64_t key = pack(a, b);
    size_t i = slot(key);
    for (;;) {
      const uint64_t k = keys_[i];
      if (k == key) {
        rank = static_cast<uint32_t>(vals_[i] >> 32);
        id = static_cast<int32_t>(static_cast<uint32_t>(vals_[i]));
        return true;
      }
      if (k == kEmpty) return false;
      i = (i + 1) & mask_;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const { return mix64(key, 0x9E3779B97F4A7C15ull) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<uint64_t> vals_;
  size_t mask_ = 0;
};

/// Per-thread cache: pre-token bytes -> ids. Cleared when full; keyed by Impl uid.
class WordCache {
 public:
  static constexpr size_t kMaxWord = 256;  // like the Rust BPE cache: only short words
  static constexpr size_t kCap = 1u << 17;
  static constexpr size_t kMaxEntries = kCap / 2;

  void reset(uint64_t owner) {
    owner_ = owner;
    if (slots_.size() != kCap) slots_.assign(kCap, Slot{});
    else std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    count_ = 0;
  }
  uint64_t owner() const { return owner_; }
  size_t size() const { return count_; }

  // Appends the cached ids to out and returns true when present.
  inline bool lookup(const char* p, size_t n, uint64_t h, std::vector<int32_t>& out) const {
    size_t i = h & (kCap - 1);
    for (;;) {
      const Slot& s = slots_[i];
      if (s.len_plus1 == 0) return false;
      if (s.hash == h && s.len_plus1 - 1 == n && std::memcmp(keys_.data() + s.key_off, p, n) == 0) {
        out.insert(out.end(), ids_.begin() + s.val_off, ids_.begin() + s.val_off + s.val_len);
        return true;
      }
      i = (i + 1) & (kCap - 1);
    }
  }
  void insert(const char* p, size_t n, uint64_t h, const int32_t* ids, size_t m) {
    if (count_ >= kMaxEntries || keys_.size() > (64u << 20)) reset(owner_);
    size_t i = h & (kCap - 1);
    while (slots_[i].len_plus1 != 0) i = (i + 1) & (kCap - 1);
    Slot& s = slots_[i];
    s.hash = h;
    s.key_off = static_cast<uint32_t>(keys_.size());
    s.len_plus1 = static_cast<uint32_t>(n + 1);
    s.val_off = static_cast<uint32_t>(ids_.size());
    s.val_len = static_cast<uint32_t>(m);
    keys_.insert(keys_.end(), p, p + n);
    ids_.insert(ids_.end(), ids, ids + m);
    ++count_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0;
    uint32_t len_plus1 = 0;  // 0 = empty
    uint32_t val_off = 0;
    uint32_t val_len = 0;
  };
  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  std::vector<char> keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

// ------------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode table (pre_tokenizers/byte_level.rs bytes_char)
// ------------------------------------------------------------------------------------------
struct ByteTable {
  char32_t byte_to_cp[256];
  std::string byte_to_str[256];
  std::unordered_map<char32_t, uint8_t> cp_to_byte;
  ByteTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      tok::utf8_append(byte_to_str[b], byte_to_cp[b]);
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

std::string bytes_to_bytelevel(std::string_view raw) {
  const auto& t = byte_table();
  std::string s;
  s.reserve(raw.size() * 2);
  for (unsigned char c : raw) s += t.byte_to_str[c];
  return s;
}

// ByteLevel decoder for one token: chars -> bytes, or the token's own bytes when a char is
// outside the table.
std::string bytelevel_to_bytes(std::string_view tokstr) {
  const auto& t = byte_table();
  std::string out;
  size_t i = 0;
  while (i < tokstr.size()) {
    char32_t cp = utf8_next(tokstr, i);
    auto it = t.cp_to_byte.find(cp);
    if (it == t.cp_to_byte.end()) return std::string(tokstr);
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

// ------------------------------------------------------------------------------------------
// PCRE2 regex (JIT, UTF + UCP)
// ------------------------------------------------------------------------------------------
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
MatchScratch& match_scratch() {
  thread_local MatchScratch s;
  return s;
}

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

class Regex {
 public:
  Regex() = default;
  /// Compiles `pattern` (PCRE2, UTF + UCP, JIT). Non-literal patterns are compiled twice: as
  /// written (fast) and Unicode-aligned (align_unicode_pattern, with large explicit classes);
  /// the aligned program only runs on subjects holding a code point where the two differ.
  Regex(const std::string& pattern, bool literal, const std::string& where) {
    if (literal) {
      aligned_ = compile(pattern, PCRE2_UTF | PCRE2_LITERAL | PCRE2_NO_UTF_CHECK, pattern, where);
      return;
    }
    const std::string pat = align_unicode_pattern(pattern);
    aligned_ = compile(pat, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, pattern, where);
    if (pat != pattern) fast_ = compile(pattern, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, pattern, where);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() {
    for (Prog* p : {&aligned_, &fast_})
      if (p->code) pcre2_code_free(p->code);
  }

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
  static Prog compile(const std::string& pat, uint32_t opts, const std::string& shown, const std::string& where) {
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
  Prog aligned_, fast_;
};

// ------------------------------------------------------------------------------------------
// Unicode helpers (normalizers, \s / \w for added-token flags)
// ------------------------------------------------------------------------------------------
enum class NormKind { NFC, NFD, NFKC, NFKD, Lowercase };

// NFC quick check (UAX #15 "NFC_Quick_Check" with a stricter ccc rule), from utf8proc's
// tables: a code point is "unsafe" when it has a non-zero combining class, can be the second
// character of a canonical composition (Hangul V/T jamo included), or is changed by NFC on
// its own (NFC_QC=No: singletons, exclusions). A string without unsafe code points is NFC.
//
// Version alignment: the Rust library normalizes with the unicode-normalization-alignments
// crate, whose tables are Unicode 9.0; code points assigned later are unknown there, i.e.
// inert starters (no decomposition, combining class 0, no composition), while utf8proc 2.8
// knows Unicode 15.0. kUnicode9Ranges lists the code points assigned in Unicode 9.0
// (Perl's \p{Present_In=9.0}); every other code point is treated as inert: never unsafe,
// never inside a region handed to utf8proc (checked code point by code point against the
// reference library).
constexpr uint32_t kUnicode9Ranges[][2] = {
    {0x0, 0x377}, {0x37A, 0x37F}, {0x384, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x52F},
    {0x531, 0x556}, {0x559, 0x55F}, {0x561, 0x587}, {0x589, 0x58A}, {0x58D, 0x58F}, {0x591, 0x5C7},
    {0x5D0, 0x5EA}, {0x5F0, 0x5F4}, {0x600, 0x61C}, {0x61E, 0x70D}, {0x70F, 0x74A}, {0x74D, 0x7B1},
    {0x7C0, 0x7FA}, {0x800, 0x82D}, {0x830, 0x83E}, {0x840, 0x85B}, {0x85E, 0x85E}, {0x8A0, 0x8B4},
    {0x8B6, 0x8BD}, {0x8D4, 0x983}, {0x985, 0x98C}, {0x98F, 0x990}, {0x993, 0x9A8}, {0x9AA, 0x9B0},
    {0x9B2, 0x9B2}, {0x9B6, 0x9B9}, {0x9BC, 0x9C4}, {0x9C7, 0x9C8}, {0x9CB, 0x9CE}, {0x9D7, 0x9D7},
    {0x9DC, 0x9DD}, {0x9DF, 0x9E3}, {0x9E6, 0x9FB}, {0xA01, 0xA03}, {0xA05, 0xA0A}, {0xA0F, 0xA10},
    {0xA13, 0xA28}, {0xA2A, 0xA30}, {0xA32, 0xA33}, {0xA35, 0xA36}, {0xA38, 0xA39}, {0xA3C, 0xA3C},
    {0xA3E, 0xA42}, {0xA47, 0xA48}, {0xA4B, 0xA4D}, {0xA51, 0xA51}, {0xA59, 0xA5C}, {0xA5E, 0xA5E},
    {0xA66, 0xA75}, {0xA81, 0xA83}, {0xA85, 0xA8D}, {0xA8F, 0xA91}, {0xA93, 0xAA8}, {0xAAA, 0xAB0},
    {0xAB2, 0xAB3}, {0xAB5, 0xAB9}, {0xABC, 0xAC5}, {0xAC7, 0xAC9}, {0xACB, 0xACD}, {0xAD0, 0xAD0},
    {0xAE0, 0xAE3}, {0xAE6, 0xAF1}, {0xAF9, 0xAF9}, {0xB01, 0xB03}, {0xB05, 0xB0C}, {0xB0F, 0xB10},
    {0xB13, 0xB28}, {0xB2A, 0xB30}, {0xB32, 0xB33}, {0xB35, 0xB39}, {0xB3C, 0xB44}, {0xB47, 0xB48},
    {0xB4B, 0xB4D}, {0xB56, 0xB57}, {0xB5C, 0xB5D}, {0xB5F, 0xB63}, {0xB66, 0xB77}, {0xB82, 0xB83},
    {0xB85, 0xB8A}, {0xB8E, 0xB90}, {0xB92, 0xB95}, {0xB99, 0xB9A}, {0xB9C, 0xB9C}, {0xB9E, 0xB9F},
    {0xBA3, 0xBA4}, {0xBA8, 0xBAA}, {0xBAE, 0xBB9}, {0xBBE, 0xBC2}, {0xBC6, 0xBC8}, {0xBCA, 0xBCD},
    {0xBD0, 0xBD0}, {0xBD7, 0xBD7}, {0xBE6, 0xBFA}, {0xC00, 0xC03}, {0xC05, 0xC0C}, {0xC0E, 0xC10},
    {0xC12, 0xC28}, {0xC2A, 0xC39}, {0xC3D, 0xC44}, {0xC46, 0xC48}, {0xC4A, 0xC4D}, {0xC55, 0xC56},
    {0xC58, 0xC5A}, {0xC60, 0xC63}, {0xC66, 0xC6F}, {0xC78, 0xC83}, {0xC85, 0xC8C}, {0xC8E, 0xC90},
    {0xC92, 0xCA8}, {0xCAA, 0xCB3}, {0xCB5, 0xCB9}, {0xCBC, 0xCC4}, {0xCC6, 0xCC8}, {0xCCA, 0xCCD},
    {0xCD5, 0xCD6}, {0xCDE, 0xCDE}, {0xCE0, 0xCE3}, {0xCE6, 0xCEF}, {0xCF1, 0xCF2}, {0xD01, 0xD03},
    {0xD05, 0xD0C}, {0xD0E, 0xD10}, {0xD12, 0xD3A}, {0xD3D, 0xD44}, {0xD46, 0xD48}, {0xD4A, 0xD4F},
    {0xD54, 0xD63}, {0xD66, 0xD7F}, {0xD82, 0xD83}, {0xD85, 0xD96}, {0xD9A, 0xDB1}, {0xDB3, 0xDBB},
    {0xDBD, 0xDBD}, {0xDC0, 0xDC6}, {0xDCA, 0xDCA}, {0xDCF, 0xDD4}, {0xDD6, 0xDD6}, {0xDD8, 0xDDF},
    {0xDE6, 0xDEF}, {0xDF2, 0xDF4}, {0xE01, 0xE3A}, {0xE3F, 0xE5B}, {0xE81, 0xE82}, {0xE84, 0xE84},
    {0xE87, 0xE88}, {0xE8A, 0xE8A}, {0xE8D, 0xE8D}, {0xE94, 0xE97}, {0xE99, 0xE9F}, {0xEA1, 0xEA3},
    {0xEA5, 0xEA5}, {0xEA7, 0xEA7}, {0xEAA, 0xEAB}, {0xEAD, 0xEB9}, {0xEBB, 0xEBD}, {0xEC0, 0xEC4},
    {0xEC6, 0xEC6}, {0xEC8, 0xECD}, {0xED0, 0xED9}, {0xEDC, 0xEDF}, {0xF00, 0xF47}, {0xF49, 0xF6C},
    {0xF71, 0xF97}, {0xF99, 0xFBC}, {0xFBE, 0xFCC}, {0xFCE, 0xFDA}, {0x1000, 0x10C5}, {0x10C7, 0x10C7},
    {0x10CD, 0x10CD}, {0x10D0, 0x1248}, {0x124A, 0x124D}, {0x1250, 0x1256}, {0x1258, 0x1258},
    {0x125A, 0x125D}, {0x1260, 0x1288}, {0x128A, 0x128D}, {0x1290, 0x12B0}, {0x12B2, 0x12B5},
    {0x12B8, 0x12BE}, {0x12C0, 0x12C0}, {0x12C2, 0x12C5}, {0x12C8, 0x12D6}, {0x12D8, 0x1310},
    {0x1312, 0x1315}, {0x1318, 0x135A}, {0x135D, 0x137C}, {0x1380, 0x1399}, {0x13A0, 0x13F5},
    {0x13F8, 0x13FD}, {0x1400, 0x169C}, {0x16A0, 0x16F8}, {0x1700, 0x170C}, {0x170E, 0x1714},
    {0x1720, 0x1736}, {0x1740, 0x1753}, {0x1760, 0x176C}, {0x176E, 0x1770}, {0x1772, 0x1773},
    {0x1780, 0x17DD}, {0x17E0, 0x17E9}, {0x17F0, 0x17F9}, {0x1800, 0x180E}, {0x1810, 0x1819},
    {0x1820, 0x1877}, {0x1880, 0x18AA}, {0x18B0, 0x18F5}, {0x1900, 0x191E}, {0x1920, 0x192B},
    {0x1930, 0x193B}, {0x1940, 0x1940}, {0x1944, 0x196D}, {0x1970, 0x1974}, {0x1980, 0x19AB},
    {0x19B0, 0x19C9}, {0x19D0, 0x19DA}, {0x19DE, 0x1A1B}, {0x1A1E, 0x1A5E}, {0x1A60, 0x1A7C},
    {0x1A7F, 0x1A89}, {0x1A90, 0x1A99}, {0x1AA0, 0x1AAD}, {0x1AB0, 0x1ABE}, {0x1B00, 0x1B4B},
    {0x1B50, 0x1B7C}, {0x1B80, 0x1BF3}, {0x1BFC, 0x1C37}, {0x1C3B, 0x1C49}, {0x1C4D, 0x1C88},
    {0x1CC0, 0x1CC7}, {0x1CD0, 0x1CF6}, {0x1CF8, 0x1CF9}, {0x1D00, 0x1DF5}, {0x1DFB, 0x1F15},
    {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FC4},
    {0x1FC6, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FDD, 0x1FEF}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFE},
    {0x2000, 0x2064}, {0x2066, 0x2071}, {0x2074, 0x208E}, {0x2090, 0x209C}, {0x20A0, 0x20BE},
    {0x20D0, 0x20F0}, {0x2100, 0x218B}, {0x2190, 0x23FE}, {0x2400, 0x2426}, {0x2440, 0x244A},
    {0x2460, 0x2B73}, {0x2B76, 0x2B95}, {0x2B98, 0x2BB9}, {0x2BBD, 0x2BC8}, {0x2BCA, 0x2BD1},
    {0x2BEC, 0x2BEF}, {0x2C00, 0x2C2E}, {0x2C30, 0x2C5E}, {0x2C60, 0x2CF3}, {0x2CF9, 0x2D25},
    {0x2D27, 0x2D27}, {0x2D2D, 0x2D2D}, {0x2D30, 0x2D67}, {0x2D6F, 0x2D70}, {0x2D7F, 0x2D96},
    {0x2DA0, 0x2DA6}, {0x2DA8, 0x2DAE}, {0x2DB0, 0x2DB6}, {0x2DB8, 0x2DBE}, {0x2DC0, 0x2DC6},
    {0x2DC8, 0x2DCE}, {0x2DD0, 0x2DD6}, {0x2DD8, 0x2DDE}, {0x2DE0, 0x2E44}, {0x2E80, 0x2E99},
    {0x2E9B, 0x2EF3}, {0x2F00, 0x2FD5}, {0x2FF0, 0x2FFB}, {0x3000, 0x303F}, {0x3041, 0x3096},
    {0x3099, 0x30FF}, {0x3105, 0x312D}, {0x3131, 0x318E}, {0x3190, 0x31BA}, {0x31C0, 0x31E3},
    {0x31F0, 0x321E}, {0x3220, 0x32FE}, {0x3300, 0x4DB5}, {0x4DC0, 0x9FD5}, {0xA000, 0xA48C},
    {0xA490, 0xA4C6}, {0xA4D0, 0xA62B}, {0xA640, 0xA6F7}, {0xA700, 0xA7AE}, {0xA7B0, 0xA7B7},
    {0xA7F7, 0xA82B}, {0xA830, 0xA839}, {0xA840, 0xA877}, {0xA880, 0xA8C5}, {0xA8CE, 0xA8D9},
    {0xA8E0, 0xA8FD}, {0xA900, 0xA953}, {0xA95F, 0xA97C}, {0xA980, 0xA9CD}, {0xA9CF, 0xA9D9},
    {0xA9DE, 0xA9FE}, {0xAA00, 0xAA36}, {0xAA40, 0xAA4D}, {0xAA50, 0xAA59}, {0xAA5C, 0xAAC2},
    {0xAADB, 0xAAF6}, {0xAB01, 0xAB06}, {0xAB09, 0xAB0E}, {0xAB11, 0xAB16}, {0xAB20, 0xAB26},
    {0xAB28, 0xAB2E}, {0xAB30, 0xAB65}, {0xAB70, 0xABED}, {0xABF0, 0xABF9}, {0xAC00, 0xD7A3},
    {0xD7B0, 0xD7C6}, {0xD7CB, 0xD7FB}, {0xE000, 0xFA6D}, {0xFA70, 0xFAD9}, {0xFB00, 0xFB06},
    {0xFB13, 0xFB17}, {0xFB1D, 0xFB36}, {0xFB38, 0xFB3C}, {0xFB3E, 0xFB3E}, {0xFB40, 0xFB41},
    {0xFB43, 0xFB44}, {0xFB46, 0xFBC1}, {0xFBD3, 0xFD3F}, {0xFD50, 0xFD8F}, {0xFD92, 0xFDC7},
    {0xFDD0, 0xFDFD}, {0xFE00, 0xFE19}, {0xFE20, 0xFE52}, {0xFE54, 0xFE66}, {0xFE68, 0xFE6B},
    {0xFE70, 0xFE74}, {0xFE76, 0xFEFC}, {0xFEFF, 0xFEFF}, {0xFF01, 0xFFBE}, {0xFFC2, 0xFFC7},
    {0xFFCA, 0xFFCF}, {0xFFD2, 0xFFD7}, {0xFFDA, 0xFFDC}, {0xFFE0, 0xFFE6}, {0xFFE8, 0xFFEE},
    {0xFFF9, 0x1000B}, {0x1000D, 0x10026}, {0x10028, 0x1003A}, {0x1003C, 0x1003D}, {0x1003F, 0x1004D},
    {0x10050, 0x1005D}, {0x10080, 0x100FA}, {0x10100, 0x10102}, {0x10107, 0x10133}, {0x10137, 0x1018E},
    {0x10190, 0x1019B}, {0x101A0, 0x101A0}, {0x101D0, 0x101FD}, {0x10280, 0x1029C}, {0x102A0, 0x102D0},
    {0x102E0, 0x102FB}, {0x10300, 0x10323}, {0x10330, 0x1034A}, {0x10350, 0x1037A}, {0x10380, 0x1039D},
    {0x1039F, 0x103C3}, {0x103C8, 0x103D5}, {0x10400, 0x1049D}, {0x104A0, 0x104A9}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10500, 0x10527}, {0x10530, 0x10563}, {0x1056F, 0x1056F}, {0x10600, 0x10736},
    {0x10740, 0x10755}, {0x10760, 0x10767}, {0x10800, 0x10805}, {0x10808, 0x10808}, {0x1080A, 0x10835},
    {0x10837, 0x10838}, {0x1083C, 0x1083C}, {0x1083F, 0x10855}, {0x10857, 0x1089E}, {0x108A7, 0x108AF},
    {0x108E0, 0x108F2}, {0x108F4, 0x108F5}, {0x108FB, 0x1091B}, {0x1091F, 0x10939}, {0x1093F, 0x1093F},
    {0x10980, 0x109B7}, {0x109BC, 0x109CF}, {0x109D2, 0x10A03}, {0x10A05, 0x10A06}, {0x10A0C, 0x10A13},
    {0x10A15, 0x10A17}, {0x10A19, 0x10A33}, {0x10A38, 0x10A3A}, {0x10A3F, 0x10A47}, {0x10A50, 0x10A58},
    {0x10A60, 0x10A9F}, {0x10AC0, 0x10AE6}, {0x10AEB, 0x10AF6}, {0x10B00, 0x10B35}, {0x10B39, 0x10B55},
    {0x10B58, 0x10B72}, {0x10B78, 0x10B91}, {0x10B99, 0x10B9C}, {0x10BA9, 0x10BAF}, {0x10C00, 0x10C48},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x10CFA, 0x10CFF}, {0x10E60, 0x10E7E}, {0x11000, 0x1104D},
    {0x11052, 0x1106F}, {0x1107F, 0x110C1}, {0x110D0, 0x110E8}, {0x110F0, 0x110F9}, {0x11100, 0x11134},
    {0x11136, 0x11143}, {0x11150, 0x11176}, {0x11180, 0x111CD}, {0x111D0, 0x111DF}, {0x111E1, 0x111F4},
    {0x11200, 0x11211}, {0x11213, 0x1123E}, {0x11280, 0x11286}, {0x11288, 0x11288}, {0x1128A, 0x1128D},
    {0x1128F, 0x1129D}, {0x1129F, 0x112A9}, {0x112B0, 0x112EA}, {0x112F0, 0x112F9}, {0x11300, 0x11303},
    {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328}, {0x1132A, 0x11330}, {0x11332, 0x11333},
    {0x11335, 0x11339}, {0x1133C, 0x11344}, {0x11347, 0x11348}, {0x1134B, 0x1134D}, {0x11350, 0x11350},
    {0x11357, 0x11357}, {0x1135D, 0x11363}, {0x11366, 0x1136C}, {0x11370, 0x11374}, {0x11400, 0x11459},
    {0x1145B, 0x1145B}, {0x1145D, 0x1145D}, {0x11480, 0x114C7}, {0x114D0, 0x114D9}, {0x11580, 0x115B5},
    {0x115B8, 0x115DD}, {0x11600, 0x11644}, {0x11650, 0x11659}, {0x11660, 0x1166C}, {0x11680, 0x116B7},
    {0x116C0, 0x116C9}, {0x11700, 0x11719}, {0x1171D, 0x1172B}, {0x11730, 0x1173F}, {0x118A0, 0x118F2},
    {0x118FF, 0x118FF}, {0x11AC0, 0x11AF8}, {0x11C00, 0x11C08}, {0x11C0A, 0x11C36}, {0x11C38, 0x11C45},
    {0x11C50, 0x11C6C}, {0x11C70, 0x11C8F}, {0x11C92, 0x11CA7}, {0x11CA9, 0x11CB6}, {0x12000, 0x12399},
    {0x12400, 0x1246E}, {0x12470, 0x12474}, {0x12480, 0x12543}, {0x13000, 0x1342E}, {0x14400, 0x14646},
    {0x16800, 0x16A38}, {0x16A40, 0x16A5E}, {0x16A60, 0x16A69}, {0x16A6E, 0x16A6F}, {0x16AD0, 0x16AED},
    {0x16AF0, 0x16AF5}, {0x16B00, 0x16B45}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61}, {0x16B63, 0x16B77},
    {0x16B7D, 0x16B8F}, {0x16F00, 0x16F44}, {0x16F50, 0x16F7E}, {0x16F8F, 0x16F9F}, {0x16FE0, 0x16FE0},
    {0x17000, 0x187EC}, {0x18800, 0x18AF2}, {0x1B000, 0x1B001}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C},
    {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99}, {0x1BC9C, 0x1BCA3}, {0x1D000, 0x1D0F5}, {0x1D100, 0x1D126},
    {0x1D129, 0x1D1E8}, {0x1D200, 0x1D245}, {0x1D300, 0x1D356}, {0x1D360, 0x1D371}, {0x1D400, 0x1D454},
    {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F}, {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC},
    {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB}, {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A},
    {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C}, {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544},
    {0x1D546, 0x1D546}, {0x1D54A, 0x1D550}, {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D7CB}, {0x1D7CE, 0x1DA8B},
    {0x1DA9B, 0x1DA9F}, {0x1DAA1, 0x1DAAF}, {0x1E000, 0x1E006}, {0x1E008, 0x1E018}, {0x1E01B, 0x1E021},
    {0x1E023, 0x1E024}, {0x1E026, 0x1E02A}, {0x1E800, 0x1E8C4}, {0x1E8C7, 0x1E8D6}, {0x1E900, 0x1E94A},
    {0x1E950, 0x1E959}, {0x1E95E, 0x1E95F}, {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22},
    {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27}, {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39},
    {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42}, {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B},
    {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52}, {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59},
    {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D}, {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64},
    {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72}, {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E},
    {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B}, {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB},
    {0x1EEF0, 0x1EEF1}, {0x1F000, 0x1F02B}, {0x1F030, 0x1F093}, {0x1F0A0, 0x1F0AE}, {0x1F0B1, 0x1F0BF},
    {0x1F0C1, 0x1F0CF}, {0x1F0D1, 0x1F0F5}, {0x1F100, 0x1F10C}, {0x1F110, 0x1F12E}, {0x1F130, 0x1F16B},
    {0x1F170, 0x1F1AC}, {0x1F1E6, 0x1F202}, {0x1F210, 0x1F23B}, {0x1F240, 0x1F248}, {0x1F250, 0x1F251},
    {0x1F300, 0x1F6D2}, {0x1F6E0, 0x1F6EC}, {0x1F6F0, 0x1F6F6}, {0x1F700, 0x1F773}, {0x1F780, 0x1F7D4},
    {0x1F800, 0x1F80B}, {0x1F810, 0x1F847}, {0x1F850, 0x1F859}, {0x1F860, 0x1F887}, {0x1F890, 0x1F8AD},
    {0x1F910, 0x1F91E}, {0x1F920, 0x1F927}, {0x1F930, 0x1F930}, {0x1F933, 0x1F93E}, {0x1F940, 0x1F94B},
    {0x1F950, 0x1F95E}, {0x1F980, 0x1F991}, {0x1F9C0, 0x1F9C0}, {0x1FFFE, 0x2A6D6}, {0x2A700, 0x2B734},
    {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1}, {0x2F800, 0x2FA1D}, {0x2FFFE, 0x2FFFF}, {0x3FFFE, 0x3FFFF},
    {0x4FFFE, 0x4FFFF}, {0x5FFFE, 0x5FFFF}, {0x6FFFE, 0x6FFFF}, {0x7FFFE, 0x7FFFF}, {0x8FFFE, 0x8FFFF},
    {0x9FFFE, 0x9FFFF}, {0xAFFFE, 0xAFFFF}, {0xBFFFE, 0xBFFFF}, {0xCFFFE, 0xCFFFF}, {0xDFFFE, 0xDFFFF},
    {0xE0001, 0xE0001}, {0xE0020, 0xE007F}, {0xE0100, 0xE01EF}, {0xEFFFE, 0x10FFFF},
};

class Unicode9Table {
 public:
  Unicode9Table() : bits_(0x110000 / 64, 0) {
    for (auto& r : kUnicode9Ranges)
      for (uint32_t cp = r[0]; cp <= r[1]; ++cp) bits_[cp >> 6] |= 1ull << (cp & 63);
  }
  bool known(char32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  std::vector<uint64_t> bits_;
};
const Unicode9Table& unicode9() {
  static const Unicode9Table t;
  return t;
}

class NfcUnsafeTable {
 public:
  NfcUnsafeTable() : bits_(0x110000 / 64, 0), inert_(0x110000 / 64, 0) {
    const Unicode9Table& u9 = unicode9();
    for (char32_t cp = 0x80; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      if (!u9.known(cp)) {
        inert_[cp >> 6] |= 1ull << (cp & 63);
        continue;
      }
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
      bool unsafe = p->combining_class != 0 || (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) ||
                    (cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2);
      if (!unsafe && p->decomp_type == 0 && p->decomp_seqindex != UINT16_MAX) {
        std::string one;
        tok::utf8_append(one, cp);
        utf8proc_uint8_t* out = nullptr;
        const utf8proc_ssize_t r = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(one.data()),
                                                static_cast<utf8proc_ssize_t>(one.size()), &out,
                                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        unsafe = r < 0 || std::string_view(reinterpret_cast<char*>(out), static_cast<size_t>(std::max<utf8proc_ssize_t>(r, 0))) != one;
        std::free(out);
      }
      if (unsafe) bits_[cp >> 6] |= 1ull << (cp & 63);
    }
  }
  bool unsafe(char32_t cp) const { return (bits_[cp >> 6] >> (cp & 63)) & 1; }
  bool inert(char32_t cp) const { return (inert_[cp >> 6] >> (cp & 63)) & 1; }

 private:
  std::vector<uint64_t> bits_;
  std::vector<uint64_t> inert_;
};

const NfcUnsafeTable& nfc_table() {
  static const NfcUnsafeTable t;
  return t;
}

std::string utf8proc_apply(std::string_view s, int options, const std::string& what);
std::string utf8proc_apply_v9(std::string_view s, int options, const std::string& what);

// NFC of `s` into `out`, normalizing only the regions around unsafe code points (a region
// runs from the last safe code point before an unsafe run to the next safe one; a safe code
// point has ccc 0, is never the second of a composition and is NFC itself, so nothing
// composes or reorders across it). Returns false (out untouched) when `s` is already NFC.
bool nfc_regions(std::string_view s, std::string& out) {
  const NfcUnsafeTable& t = nfc_table();
  const size_t n = s.size();
  size_t i = 0, copied = 0, last_safe = 0;
  bool changed = false;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (!(w & 0x8080808080808080ull)) {
        last_safe = i + 7;
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      last_safe = i++;
      continue;
    }
    const size_t st = i;
    const char32_t cp = utf8_next(s, i);
    if (!t.unsafe(cp)) {
      last_safe = t.inert(cp) ? i : st;  // a region may start at a safe starter, never at an inert mark
      continue;
    }
    const size_t rb = std::max(last_safe, copied);
    while (i < n) {
      if (static_cast<unsigned char>(s[i]) < 0x80) break;
      size_t k = i;
      if (!t.unsafe(utf8_next(s, k))) break;
      i = k;
    }
    if (!changed) {
      out.clear();
      changed = true;
    }
    out.append(s.substr(copied, rb - copied));
    out += utf8proc_apply(s.substr(rb, i - rb), UTF8PROC_STABLE | UTF8PROC_COMPOSE, "NFC");
    copied = i;
    last_safe = i;
  }
  if (changed) out.append(s.substr(copied));
  return changed;
}

// utf8proc normalization (NFD / NFKC / NFKD) of the runs of code points known to Unicode 9.0;
// later code points are copied through as inert boundaries (see kUnicode9Ranges).
std::string utf8proc_apply_v9(std::string_view s, int options, const std::string& what) {
  const Unicode9Table& u9 = unicode9();
  std::string out;
  out.reserve(s.size() + 16);
  size_t run = 0, i = 0;
  while (i < s.size()) {
    const size_t st = i;
    const char32_t cp = utf8_next(s, i);
    if (cp < 0x80 || u9.known(cp)) continue;
    if (st > run) out += utf8proc_apply(s.substr(run, st - run), options, what);
    out.append(s.substr(st, i - st));
    run = i;
  }
  if (s.size() > run) out += utf8proc_apply(s.substr(run), options, what);
  return out;
}

std::string utf8proc_apply(std::string_view s, int options, const std::string& what) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t r = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (r < 0) throw Error(what + ": utf8proc failed: " + utf8proc_errmsg(r));
  std::string res(reinterpret_cast<char*>(out), static_cast<size_t>(r));
  std::free(out);
  return res;
}

// Lowercase mappings of Unicode 16.0 / 17.0 (Rust's std tables) that utf8proc 2.8 (Unicode
// 15.0) lacks: {first, last, delta}.
constexpr int32_t kNewLowercase[][3] = {
    {0x1C89, 0x1C89, 1},     {0xA7CB, 0xA7CB, -42343}, {0xA7CC, 0xA7CC, 1}, {0xA7CE, 0xA7CE, 1},
    {0xA7D2, 0xA7D2, 1},     {0xA7D4, 0xA7D4, 1},      {0xA7DA, 0xA7DA, 1}, {0xA7DC, 0xA7DC, -42561},
    {0x10D50, 0x10D65, 32}, {0x16EA0, 0x16EB8, 27},
};

// Rust char::to_lowercase per code point, as HF's Lowercase normalizer applies it (no final
// sigma context): simple lowercase mappings plus U+0130 -> "i\u0307" (checked code point by
// code point against the reference library).
std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char32_t cp = utf8_next(s, i);
    if (cp == 0x130) {
      out += "i\xCC\x87";
      continue;
    }
    char32_t lc = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
    if (cp >= 0x1C89)
      for (auto& r : kNewLowercase)
        if (static_cast<int32_t>(cp) >= r[0] && static_cast<int32_t>(cp) <= r[1]) lc = static_cast<char32_t>(static_cast<int32_t>(cp) + r[2]);
    tok::utf8_append(out, lc);
  }
  return out;
}

bool is_white_space(char32_t c) {  // Unicode White_Space (Rust regex \s, char::is_whitespace)
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return true;
  if (c < 0x80) return false;
  if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
      c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000)
    return true;
  return false;
}

bool is_word_char(char32_t c) {  // Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// ------------------------------------------------------------------------------------------
// Added tokens: leftmost-longest trie
// ------------------------------------------------------------------------------------------
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

// ------------------------------------------------------------------------------------------
// Pre-tokenizer steps
// ------------------------------------------------------------------------------------------
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreStep {
  enum Kind { Split, ByteLevel } kind = Split;
  std::unique_ptr<Regex> re;  // Split pattern, or the GPT-2 regex for ByteLevel(use_regex)
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
};

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::atomic<uint64_t> g_next_uid{1};

}  // namespace

// ==========================================================================================
// Impl
// ==========================================================================================
struct Tokenizer::Impl {
  uint64_t uid = 0;
  std::string name;

  // normalizer
  std::vector<NormKind> norms;
  // pre-tokenizer
  std::vector<PreStep> steps;
  bool byte_level = false;  // a ByteLevel pre-tokenizer maps bytes to chars before the model
  const Regex* single_split = nullptr;  // fast path: exactly [Split Isolated, ByteLevel(no regex)]

  // BPE model
  std::unordered_map<std::string, int32_t> vocab;  // token string as in tokenizer.json
  std::vector<std::string> id_to_tok;              // "" for holes
  std::vector<uint8_t> id_assigned;
  int32_t byte_id[256];
  MergeTable merges;
  bool ignore_merges = false;
  std::unordered_map<std::string, int32_t> vocab_raw;  // byte-level: raw bytes -> id (ignore_merges)
  int32_t unk_id = -1;
  bool fuse_unk = false, byte_fallback = false;
  std::string cont_prefix, end_suffix;

  // added vocabulary
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unordered_set<int32_t> special_ids;
  AddedMatcher raw_matcher, norm_matcher;

  // post-processor (TemplateProcessing single) and decoder
  std::vector<int32_t> post_prefix, post_suffix;
  enum class Decoder { None, ByteLevel } decoder = Decoder::None;
  std::vector<std::string> id_bytes;  // decoded bytes per id (ByteLevel decoder)

  // tokenizer_config.json
  std::string chat_template;
  int32_t pad_id = 0, eos_id = -1;

  int64_t vocab_size = 0;

  // ---- encode pipeline ----
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  void normalized_piece(std::string_view raw, std::vector<int32_t>& out) const;
  void pretokenize_and_model(std::string_view s, std::vector<int32_t>& out) const;
  void model_word(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_bytes(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_chars(std::string_view word, std::vector<int32_t>& out) const;
  void merge_symbols(std::vector<int32_t>& ids, std::vector<int32_t>& out) const;
  template <class Emit>
  void split_added(std::string_view s, const AddedMatcher& m, const std::vector<int>& index, Emit&& emit) const;
  std::vector<int> raw_index, norm_index;  // matcher pattern index -> added token index
  std::string normalize(std::string_view s) const;
};

namespace {

WordCache& tl_cache() {
  thread_local WordCache cache;
  return cache;
}
WordCache& thread_cache(uint64_t uid) {
  WordCache& cache = tl_cache();
  if (cache.owner() != uid) cache.reset(uid);
  return cache;
}
// The cache of the encode() running on this thread (set by encode_into).
thread_local WordCache* tl_current_cache = nullptr;

struct MergeEntry {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
};
struct MergeGreater {  // min-heap on (rank, pos)
  bool operator()(const MergeEntry& a, const MergeEntry& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

struct Sym {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;
};

}  // namespace

// BPE merge loop over initial symbol ids (models/bpe/word.rs merge_all without dropout).
void Tokenizer::Impl::merge_symbols(std::vector<int32_t>& ids, std::vector<int32_t>& out) const {
  const size_t n = ids.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(ids[0]);
    return;
  }
  if (n == 2) {
    uint32_t r;
    int32_t nid;
    if (merges.get(ids[0], ids[1], r, nid)) out.push_back(nid);
    else out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  if (n <= 64) {
    // Lowest rank first, leftmost on ties: the same merges as the priority queue below
    // (its stale-entry check only ever accepts the pair it was pushed for).
    uint32_t rk[64];
    int32_t nw[64];
    int32_t* v = ids.data();
    size_t m = n;
    for (size_t i = 0; i + 1 < m; ++i)
      if (!merges.get(v[i], v[i + 1], rk[i], nw[i])) rk[i] = UINT32_MAX;
    for (;;) {
      uint32_t best = UINT32_MAX;
      size_t bi = 0;
      for (size_t i = 0; i + 1 < m; ++i)
        if (rk[i] < best) {
          best = rk[i];
          bi = i;
        }
      if (best == UINT32_MAX) break;
      v[bi] = nw[bi];
      for (size_t i = bi + 1; i + 1 < m; ++i) {
        v[i] = v[i + 1];
        rk[i] = rk[i + 1];
        nw[i] = nw[i + 1];
      }
      --m;
      if (bi > 0 && !merges.get(v[bi - 1], v[bi], rk[bi - 1], nw[bi - 1])) rk[bi - 1] = UINT32_MAX;
      if (bi + 1 < m && !merges.get(v[bi], v[bi + 1], rk[bi], nw[bi])) rk[bi] = UINT32_MAX;
    }
    out.insert(out.end(), v, v + m);
    return;
  }
  thread_local std::vector<Sym> sy;
  thread_local std::vector<MergeEntry> heap;
  sy.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i)
    sy[i] = Sym{ids[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, 1};
  for (size_t i = 0; i + 1 < n; ++i) {
    uint32_t r;
    int32_t nid;
    if (merges.get(ids[i], ids[i + 1], r, nid)) heap.push_back({r, static_cast<uint32_t>(i), nid});
  }
  std::make_heap(heap.begin(), heap.end(), MergeGreater{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), MergeGreater{});
    const MergeEntry top = heap.back();
    heap.pop_back();
    Sym& cur = sy[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const int32_t next_pos = cur.next;
    const Sym right = sy[next_pos];
    uint32_t r;
    int32_t nid;
    if (!merges.get(cur.id, right.id, r, nid) || nid != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    sy[next_pos].len = 0;
    if (right.next >= 0) sy[right.next].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0) {
      if (merges.get(sy[cur.prev].id, cur.id, r, nid)) {
        heap.push_back({r, static_cast<uint32_t>(cur.prev), nid});
        std::push_heap(heap.begin(), heap.end(), MergeGreater{});
      }
    }
    if (cur.next >= 0) {
      if (merges.get(cur.id, sy[cur.next].id, r, nid)) {
        heap.push_back({r, top.pos, nid});
        std::push_heap(heap.begin(), heap.end(), MergeGreater{});
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (sy[i].len != 0) out.push_back(sy[i].id);
}

// Byte-level word: raw bytes, each byte's char is a vocab token.
void Tokenizer::Impl::bpe_bytes(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    const int32_t id = byte_id[static_cast<unsigned char>(word[0])];
    if (id >= 0) out.push_back(id);
    else if (unk_id >= 0) out.push_back(unk_id);
    return;
  }
  if (ignore_merges) {
    auto it = vocab_raw.find(std::string(word));
    if (it != vocab_raw.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  if (word.size() == 2) {
    ids.assign({byte_id[static_cast<unsigned char>(word[0])], byte_id[static_cast<unsigned char>(word[1])]});
    if (ids[0] >= 0 && ids[1] >= 0) {
      merge_symbols(ids, out);
      return;
    }
  }
  WordCache* cache = nullptr;
  uint64_t h = 0;
  if (word.size() < WordCache::kMaxWord) {
    cache = tl_current_cache;
    h = hash_bytes(word.data(), word.size());
    if (cache->lookup(word.data(), word.size(), h, out)) return;
  }
  ids.clear();
  bool missing = false;
  for (unsigned char c : word) {
    if (byte_id[c] >= 0) ids.push_back(byte_id[c]);
    else missing = true;
  }
  if (missing) {  // rare: a vocab without some byte; fall back to the generic char path
    bpe_chars(bytes_to_bytelevel(word), out);
    return;
  }
  const size_t before = out.size();
  merge_symbols(ids, out);
  if (cache) cache->insert(word.data(), word.size(), h, out.data() + before, out.size() - before);
}

// Generic word (token strings are the vocab's own chars): initial symbols per char with
// continuing_subword_prefix / end_of_word_suffix, byte_fallback, unk (fuse_unk).
void Tokenizer::Impl::bpe_chars(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  ids.clear();
  bool last_unk = false;
  size_t i = 0;
  std::string piece;
  while (i < word.size()) {
    const size_t b = i;
    utf8_next(word, i);
    piece.assign(word.substr(b, i - b));
    if (b > 0) piece = cont_prefix + piece;
    if (i == word.size()) piece += end_suffix;
    auto it = vocab.find(piece);
    if (it != vocab.end()) {
      ids.push_back(it->second);
      last_unk = false;
      continue;
    }
    if (byte_fallback) {
      std::vector<int32_t> fb;
      bool ok = true;
      for (size_t k = b; k < i; ++k) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned char>(word[k]));
        auto f = vocab.find(buf);
        if (f == vocab.end()) {
          ok = false;
          break;
        }
        fb.push_back(f->second);
      }
      if (ok) {
        ids.insert(ids.end(), fb.begin(), fb.end());
        last_unk = false;
        continue;
      }
    }
    if (unk_id >= 0) {
      if (!(fuse_unk && last_unk)) ids.push_back(unk_id);
      last_unk = true;
    }
  }
  merge_symbols(ids, out);
}

void Tokenizer::Impl::model_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (byte_level) bpe_bytes(word, out);
  else bpe_chars(word, out);
}

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

// ==========================================================================================
// Loading
// ==========================================================================================
namespace {

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

// ==========================================================================================
// Public API
// ==========================================================================================
Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;

const Tokenizer::Impl& Tokenizer::checked() const {
  if (!impl_) throw Error("Tokenizer: used before loading (default-constructed)");
  return *impl_;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& I = checked();
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out.insert(out.end(), I.post_prefix.begin(), I.post_prefix.end());
  I.encode_into(text, out);
  if (add_special_tokens) out.insert(out.end(), I.post_suffix.begin(), I.post_suffix.end());
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          bool add_special_tokens) const {
  checked();
  std::vector<std::vector<int32_t>> out(texts.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::string first_error;
  std::mutex mu;
  auto work = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= texts.size() || failed.load()) return;
      try {
        out[i] = encode(texts[i], add_special_tokens);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(mu);
        if (!failed.exchange(true)) first_error = "text " + std::to_string(i) + ": " + e.what();
      }
    }
  };
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t nthreads = std::min(hw, texts.size() / 4 + 1);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (failed) throw Error(first_error);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& I = checked();
  std::string bytes;
  bool first = true;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    if (id < 0 || id >= I.vocab_size || !I.id_assigned[id])
      throw Error("tokenizer decode: id " + std::to_string(id) + " at position " + std::to_string(k) +
                  " is not in the vocabulary (size " + std::to_string(I.vocab_size) + ")");
    if (skip_special_tokens && I.special_ids.count(id)) continue;
    if (I.decoder == Impl::Decoder::None && !first) bytes.push_back(' ');
    bytes += I.id_bytes[id];
    first = false;
  }
  return tok::utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const {
  const Impl& I = checked();
  auto a = I.added_by_content.find(token);
  if (a != I.added_by_content.end()) return a->second;
  auto v = I.vocab.find(token);
  if (v != I.vocab.end()) return v->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const Impl& I = checked();
  if (id < 0 || id >= I.vocab_size || !I.id_assigned[id])
    throw Error("tokenizer id_to_token: id " + std::to_string(id) + " is not in the vocabulary");
  return I.id_to_tok[id];
}

int64_t Tokenizer::vocab_size() const { return checked().vocab_size; }
int32_t Tokenizer::pad_token_id() const { return checked().pad_id; }
int32_t Tokenizer::eos_token_id() const { return checked().eos_id; }
const std::string& Tokenizer::chat_template() const { return checked().chat_template; }
bool Tokenizer::is_special(int32_t id) const { return checked().special_ids.count(id) > 0; }

size_t Tokenizer::thread_cache_size() { return tl_cache().size(); }

}  // namespace twinkle
