#include "twinkle/parallel/pipeline_layout.h"

#include <cctype>

#include "twinkle/core/error.h"

namespace twinkle::parallel {

namespace {

// "*N" at s[i..]: returns N and moves i past it.
int64_t repeat_count(const std::string& s, size_t& i, const std::string& layout) {
  check(i < s.size() && s[i] == '*', "pipeline layout '" + layout + "': a repetition needs '*N'");
  ++i;
  size_t j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  check(j > i && j - i <= 6, "pipeline layout '" + layout + "': '*' must be followed by a count");
  const int64_t n = std::stoll(s.substr(i, j - i));
  check(n >= 1, "pipeline layout '" + layout + "': a repetition count must be >= 1");
  i = j;
  return n;
}

// Expands "(X)*N" groups (innermost first) and "t*N".
std::string expand(std::string s, const std::string& layout) {
  for (size_t close; (close = s.find(')')) != std::string::npos;) {
    const size_t open = s.rfind('(', close);
    check(open != std::string::npos, "pipeline layout '" + layout + "': ')' without '('");
    size_t i = close + 1;
    const int64_t n = repeat_count(s, i, layout);
    std::string body = s.substr(open + 1, close - open - 1), rep;
    for (int64_t k = 0; k < n; ++k) rep += body;
    s = s.substr(0, open) + rep + s.substr(i);
  }
  check(s.find('(') == std::string::npos, "pipeline layout '" + layout + "': '(' without ')'");
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i++];
    if (i < s.size() && s[i] == '*') {
      check(c == 't', "pipeline layout '" + layout + "': only 't' (a decoder layer) repeats with '*'");
      const int64_t n = repeat_count(s, i, layout);
      out.append(static_cast<size_t>(n), 't');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::vector<int64_t> parse_pipeline_layout(const std::string& layout, int stages) {
  std::string s;
  for (char c : layout)
    if (!std::isspace(static_cast<unsigned char>(c))) s.push_back(c);
  check(!s.empty(), "pipeline layout is empty");
  s = expand(s, layout);
  std::vector<std::string> parts;
  size_t a = 0;
  for (size_t b; (b = s.find('|', a)) != std::string::npos; a = b + 1) parts.push_back(s.substr(a, b - a));
  parts.push_back(s.substr(a));
  std::vector<int64_t> counts;
  for (size_t k = 0; k < parts.size(); ++k) {
    const std::string& p = parts[k];
    int64_t n = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      const char c = p[i];
      if (c == 't') {
        ++n;
      } else if (c == 'E') {
        check(k == 0 && i == 0, "pipeline layout '" + layout + "': the embedding 'E' must open the first stage");
      } else if (c == 'L') {
        check(k + 1 == parts.size() && i + 1 == p.size(),
              "pipeline layout '" + layout + "': the loss 'L' must close the last stage");
      } else if (c == 'm') {
        throw Error("pipeline layout '" + layout + "': multi-token prediction layers ('m') are not supported");
      } else {
        throw Error("pipeline layout '" + layout + "': unknown character '" + std::string(1, c) +
                    "' (E embedding, t decoder layer, L loss, | stage boundary, t*N, (...)*N)");
      }
    }
    check(n >= 1, "pipeline layout '" + layout + "': stage " + std::to_string(k) + " ('" + p +
                      "') holds no decoder layer; twinkle needs at least one per stage");
    counts.push_back(n);
  }
  check(parts.front().rfind('E', 0) == 0, "pipeline layout '" + layout + "': the first stage must start with 'E'");
  check(!parts.back().empty() && parts.back().back() == 'L', "pipeline layout '" + layout + "': the last stage must end with 'L'");
  if (stages > 0)
    check(static_cast<int>(counts.size()) == stages, "pipeline layout '" + layout + "' has " +
                                                         std::to_string(counts.size()) + " stages; pp x vpp is " +
                                                         std::to_string(stages));
  return counts;
}

}  // namespace twinkle::parallel
