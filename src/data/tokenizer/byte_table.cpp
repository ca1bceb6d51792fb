// src/data/tokenizer/byte_table.cpp — GPT-2 byte <-> unicode table (see byte_table.h). The
// decoder direction follows decoders/byte_level.rs (Rust `tokenizers` 0.22): chars -> bytes, a
// token with a char outside the table keeps its own UTF-8 bytes.
#include "byte_table.h"

namespace twinkle::tok {

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

}  // namespace twinkle::tok
