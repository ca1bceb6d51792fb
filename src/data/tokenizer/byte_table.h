// src/data/tokenizer/byte_table.h — the GPT-2 byte <-> unicode table of the ByteLevel
// pre-tokenizer / decoder (Rust `tokenizers` 0.22, read for behaviour, not copied:
// pre_tokenizers/byte_level.rs bytes_char, the GPT-2 bytes_to_unicode table).
// Internal header (not installed).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "utf8.h"

namespace twinkle::tok {

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
const ByteTable& byte_table();

// Raw bytes -> their byte-level chars (UTF-8).
std::string bytes_to_bytelevel(std::string_view raw);

// ByteLevel decoder for one token: chars -> bytes, or the token's own bytes when a char is
// outside the table.
std::string bytelevel_to_bytes(std::string_view tokstr);

}  // namespace twinkle::tok
