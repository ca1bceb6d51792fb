// Data file readers: JSON Lines, JSON array, CSV (RFC 4180). Every row keeps the
// 1-based line where its record starts so errors can name "<file>:<line>".
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/parquet.h"

namespace twinkle {
namespace {

// Offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no
// overlongs, no surrogates, <= U+10FFFF), or npos.
size_t invalid_utf8_at(const char* p, size_t n) {
  const auto* s = reinterpret_cast<const unsigned char*>(p);
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return i;
    i += len;
  }
  return std::string::npos;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open dataset file");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() >= 3 && static_cast<unsigned char>(s[0]) == 0xEF && static_cast<unsigned char>(s[1]) == 0xBB &&
      static_cast<unsigned char>(s[2]) == 0xBF)
    s.erase(0, 3);
  return s;
}

// nlohmann messages start with "[json.exception.parse_error.101] "; drop that prefix.
std::string clean_json_error(const std::string& what) {
  if (!what.empty() && what[0] == '[') {
    auto p = what.find("] ");
    if (p != std::string::npos) return what.substr(p + 2);
  }
  return what;
}

std::string utf8_error(size_t col) { return "invalid UTF-8 at byte column " + std::to_string(col + 1); }

struct Sink {
  const std::string& path;
  bool skip;
  LoadedRows& out;
  void bad(int64_t line, const std::string& msg) {
    std::string full = path + ":" + std::to_string(line) + ": " + msg;
    if (!skip) throw Error(full);
    if (out.bad < 5) std::fprintf(stderr, "[twinkle] warning: skipping bad row: %s\n", full.c_str());
    if (out.bad == 5) std::fprintf(stderr, "[twinkle] warning: further bad rows in %s are skipped silently\n", path.c_str());
    ++out.bad;
  }
  void row(json&& j, int64_t line) {
    if (!j.is_object()) {
      bad(line, "row is " + json_type_name(j) + ", expected a JSON object");
      return;
    }
    out.rows.push_back(std::move(j));
    out.lines.push_back(line);
  }
};

bool blank(const char* b, const char* e) {
  for (; b < e; ++b)
    if (!(*b == ' ' || *b == '\t' || *b == '\r' || *b == '\n')) return false;
  return true;
}

void load_jsonl(const std::string& text, Sink& sink) {
  struct Line {
    size_t begin, end;
    int64_t no;
  };
  std::vector<Line> lines;
  size_t pos = 0;
  int64_t no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    ++no;
    if (!blank(text.data() + pos, text.data() + nl)) lines.push_back({pos, nl, no});
    pos = nl + 1;
  }
  struct Parsed {
    json j;
    std::string err;
  };
  std::vector<Parsed> parsed(lines.size());
  auto work = [&](size_t i) {
    const Line& l = lines[i];
    size_t bad = invalid_utf8_at(text.data() + l.begin, l.end - l.begin);
    if (bad != std::string::npos) {
      parsed[i].err = utf8_error(bad);
      return;
    }
    try {
      parsed[i].j = json::parse(text.begin() + static_cast<std::ptrdiff_t>(l.begin),
                                text.begin() + static_cast<std::ptrdiff_t>(l.end));
    } catch (const json::exception& e) {
      parsed[i].err = "invalid JSON: " + clean_json_error(e.what());
    }
  };
  // Parse big files on several threads (results are assembled in file order below).
  unsigned nt = std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), 8u);
  if (text.size() < (4u << 20) || lines.size() < 1024) nt = 1;
  if (nt == 1) {
    for (size_t i = 0; i < lines.size(); ++i) work(i);
  } else {
    std::atomic<size_t> next{0};
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < nt; ++t)
      ts.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(256)) < lines.size();)
          for (size_t k = i; k < std::min(lines.size(), i + 256); ++k) work(k);
      });
    for (auto& t : ts) t.join();
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!parsed[i].err.empty())
      sink.bad(lines[i].no, parsed[i].err);
    else
      sink.row(std::move(parsed[i].j), lines[i].no);
  }
}

// Top-level JSON array: find each element's extent with a small scanner (strings,
// escapes, nesting), then parse elements one by one so errors carry the element's line.
void load_json_array(const std::string& text, Sink& sink) {
  const size_t n = text.size();
  size_t i = 0;
  int64_t line = 1;
  auto skip_ws = [&] {
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) {
      if (text[i] == '\n') ++line;
      ++i;
    }
  };
  skip_ws();
  if (i >= n) throw Error(sink.path + ":1: empty JSON file, expected an array of objects");
  if (text[i] != '[')
    throw Error(sink.path + ":" + std::to_string(line) + ": expected a JSON array of objects (or JSON Lines), found '" +
                std::string(1, text[i]) + "'");
  ++i;
  skip_ws();
  if (i < n && text[i] == ']') {
    ++i;
  } else {
    while (true) {
      skip_ws();
      if (i >= n) throw Error(sink.path + ":" + std::to_string(line) + ": unterminated JSON array");
      const size_t start = i;
      const int64_t start_line = line;
      int depth = 0;
      bool in_str = false;
      for (; i < n; ++i) {
        char c = text[i];
        if (c == '\n') ++line;
        if (in_str) {
          if (c == '\\')
            ++i;
          else if (c == '"')
            in_str = false;
          continue;
        }
        if (c == '"')
          in_str = true;
        else if (c == '{' || c == '[')
          ++depth;
        else if (c == '}' || c == ']') {
          if (depth == 0) break;
          --depth;
        } else if (c == ',' && depth == 0)
          break;
      }
      if (i >= n)
        throw Error(sink.path + ":" + std::to_string(start_line) + ": unterminated JSON array (element starting here " +
                    (in_str ? "has an unclosed string" : "is never closed") + ")");
      size_t end = i;
      size_t bad = invalid_utf8_at(text.data() + start, end - start);
      if (bad != std::string::npos) {
        const size_t at = start + bad;
        size_t ls = text.rfind('\n', at);
        ls = (ls == std::string::npos) ? 0 : ls + 1;
        int64_t bl = start_line + std::count(text.begin() + static_cast<std::ptrdiff_t>(start),
                                             text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
        sink.bad(bl, utf8_error(at - ls));
      } else {
        try {
          sink.row(json::parse(text.begin() + static_cast<std::ptrdiff_t>(start),
                               text.begin() + static_cast<std::ptrdiff_t>(end)),
                   start_line);
        } catch (const json::exception& e) {
          sink.bad(start_line, "invalid JSON: " + clean_json_error(e.what()));
        }
      }
      if (text[i] == ']') {
        ++i;
        break;
      }
      ++i;  // ','
    }
  }
  skip_ws();
  if (i < n) throw Error(sink.path + ":" + std::to_string(line) + ": unexpected text after the JSON array");
}

void load_csv(const std::string& text, Sink& sink) {
  const size_t n = text.size();
  size_t i = 0;
  int64_t line = 1;
  std::vector<std::string> header;
  bool have_header = false;
  while (i < n) {
    // One record.
    const int64_t rec_line = line;
    const size_t rec_begin = i;
    std::vector<std::string> fields;
    std::string field;
    bool end_of_record = false;
    while (!end_of_record) {
      field.clear();
      if (i < n && text[i] == '"') {
        ++i;
        while (true) {
          if (i >= n)
            throw Error(sink.path + ":" + std::to_string(rec_line) +
                        ": unbalanced quotes: a quoted field starting in this record is never closed");
          char c = text[i];
          if (c == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (c == '\n') ++line;
          field += c;
          ++i;
        }
        if (i < n && !(text[i] == ',' || text[i] == '\n' || (text[i] == '\r' && (i + 1 == n || text[i + 1] == '\n'))))
          throw Error(sink.path + ":" + std::to_string(line) + ": unexpected character '" + std::string(1, text[i]) +
                      "' after a closing quote (quotes inside a quoted field must be doubled)");
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n') {
          if (text[i] == '\r' && (i + 1 == n || text[i + 1] == '\n')) break;
          field += text[i++];
        }
      }
      fields.push_back(field);
      if (i >= n) {
        end_of_record = true;
      } else if (text[i] == ',') {
        ++i;
      } else {  // \r\n or \n
        if (text[i] == '\r') ++i;
        ++i;
        ++line;
        end_of_record = true;
      }
    }
    if (fields.size() == 1 && fields[0].empty() && blank(text.data() + rec_begin, text.data() + i)) continue;
    size_t bad = invalid_utf8_at(text.data() + rec_begin, i - rec_begin);
    if (!have_header) {
      if (bad != std::string::npos) throw Error(sink.path + ":" + std::to_string(rec_line) + ": header: " + utf8_error(bad));
      header = fields;
      for (size_t a = 0; a < header.size(); ++a)
        for (size_t b = a + 1; b < header.size(); ++b)
          if (header[a] == header[b])
            throw Error(sink.path + ":" + std::to_string(rec_line) + ": duplicate column '" + header[a] + "' in header");
      have_header = true;
      continue;
    }
    if (bad != std::string::npos) {
      sink.bad(rec_line, utf8_error(bad));
      continue;
    }
    if (fields.size() != header.size()) {
      sink.bad(rec_line, "record has " + std::to_string(fields.size()) + " fields, the header has " +
                             std::to_string(header.size()));
      continue;
    }
    json row = json::object();
    for (size_t k = 0; k < fields.size(); ++k) row[header[k]] = std::move(fields[k]);
    sink.row(std::move(row), rec_line);
  }
  if (!have_header) throw Error(sink.path + ":1: empty CSV file (no header row)");
}

std::string lower_ext(const std::string& path) {
  auto dot = path.rfind('.');
  auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string e = path.substr(dot);
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

}  // namespace

LoadedRows load_rows(const std::string& path, bool skip_bad) {
  LoadedRows out;
  Sink sink{path, skip_bad, out};
  const std::string ext = lower_ext(path);
  if (ext == ".parquet") {
    read_parquet_rows(
        path, [&](json&& j, int64_t n) { sink.row(std::move(j), n); }, [&](int64_t n, const std::string& m) { sink.bad(n, m); });
    return out;
  }
  if (ext != ".jsonl" && ext != ".json" && ext != ".csv")
    throw Error(path + ": unsupported dataset file type '" + ext + "' (expected .jsonl, .json, .csv or .parquet)");
  const std::string text = read_file(path);
  if (ext == ".csv") {
    load_csv(text, sink);
  } else if (ext == ".jsonl") {
    load_jsonl(text, sink);
  } else {
    // .json: an array of objects, or (as the datasets json loader also accepts) JSON Lines.
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{')
      load_jsonl(text, sink);
    else
      load_json_array(text, sink);
  }
  return out;
}

}  // namespace twinkle
