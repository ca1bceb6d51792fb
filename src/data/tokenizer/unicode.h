// src/data/tokenizer/unicode.h — Unicode helpers of the tokenizer: the normalizers (NFC, NFD,
// NFKC, NFKD through utf8proc, aligned to the Rust library's Unicode 9.0 normalization tables;
// Lowercase as Rust's char::to_lowercase) and \s / \w for the added-token flags. The tables
// and their version alignment are in unicode.cpp. Internal header (not installed).
#pragma once
#include <string>
#include <string_view>

namespace twinkle::tok {

enum class NormKind { NFC, NFD, NFKC, NFKD, Lowercase };

class NfcUnsafeTable;
// The NFC quick-check table (built on first use; parse_normalizer builds it at load time).
const NfcUnsafeTable& nfc_table();

// NFC of `s` into `out` (only the regions around unsafe code points); false (out untouched)
// when `s` is already NFC.
bool nfc_regions(std::string_view s, std::string& out);
// utf8proc_map of `s` with `options`; `what` names the normalizer in the error.
std::string utf8proc_apply(std::string_view s, int options, const std::string& what);
// utf8proc_apply of the runs of code points known to Unicode 9.0 (later ones copied through).
std::string utf8proc_apply_v9(std::string_view s, int options, const std::string& what);
// Rust char::to_lowercase per code point (HF's Lowercase normalizer).
std::string lowercase(std::string_view s);

inline bool is_white_space(char32_t c) {  // Unicode White_Space (Rust regex \s, char::is_whitespace)
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return true;
  if (c < 0x80) return false;
  if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
      c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000)
    return true;
  return false;
}

bool is_word_char(char32_t c);  // Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control

}  // namespace twinkle::tok
