// src/data/tokenizer/utf8.h — internal UTF-8 helpers of src/data (not a public header): validation,
// decoding, encoding; inline, as they run per code point in the tokenizer's loops. utf8_lossy is in
// utf8.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace twinkle::tok {

constexpr size_t kValidUtf8 = static_cast<size_t>(-1);

/// Byte offset of the first byte that does not start a well-formed UTF-8 sequence
/// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF), or kValidUtf8.
inline size_t utf8_invalid_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (!(w & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
    }
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
    } else if (c < 0xC2) {
      return i;
    } else if (c < 0xE0) {
      if (i + 1 >= n || (p[i + 1] & 0xC0) != 0x80) return i;
      i += 2;
    } else if (c < 0xF0) {
      if (i + 2 >= n) return i;
      const unsigned c1 = p[i + 1];
      if ((c1 & 0xC0) != 0x80 || (c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) ||
          (p[i + 2] & 0xC0) != 0x80)
        return i;
      i += 3;
    } else if (c < 0xF5) {
      if (i + 3 >= n) return i;
      const unsigned c1 = p[i + 1];
      if ((c1 & 0xC0) != 0x80 || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F) ||
          (p[i + 2] & 0xC0) != 0x80 || (p[i + 3] & 0xC0) != 0x80)
        return i;
      i += 4;
    } else {
      return i;
    }
  }
  return kValidUtf8;
}

/// Decodes the code point at s[i] (s must be valid UTF-8); advances i.
inline char32_t utf8_next(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned c = p[i];
  if (c < 0x80) {
    i += 1;
    return c;
  }
  if (c < 0xE0) {
    char32_t cp = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F);
    i += 2;
    return cp;
  }
  if (c < 0xF0) {
    char32_t cp = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
    i += 3;
    return cp;
  }
  char32_t cp = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
  i += 4;
  return cp;
}

/// Start of the code point that ends at s[end) (s valid UTF-8, end > 0).
inline size_t utf8_prev(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

inline void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

/// Rust's String::from_utf8_lossy: each maximal ill-formed subpart becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace twinkle::tok
