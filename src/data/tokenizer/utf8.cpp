// src/data/tokenizer/utf8.cpp — Rust's String::from_utf8_lossy, the last step of the ByteLevel
// decoder (decoders/byte_level.rs of Rust `tokenizers` 0.22, read for behaviour, not copied:
// chars -> bytes, then String::from_utf8_lossy).
#include "utf8.h"

#include <string>
#include <string_view>

namespace twinkle::tok {

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

}  // namespace twinkle::tok
