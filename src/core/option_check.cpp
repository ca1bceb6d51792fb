#include "twinkle/core/option_check.h"

#include <cstdio>

#include "twinkle/core/error.h"

namespace twinkle {

std::string option_name(const std::string& set, const std::string& field) {
  std::string flag = field;
  for (char& c : flag)
    if (c == '_') c = '-';
  return set + " option '" + field + "' (--" + flag + ")";
}

namespace {
[[noreturn]] void fail(const std::string& set, const std::string& field, const std::string& rule, const std::string& v) {
  throw Error(option_name(set, field) + " must be " + rule + ", got " + v);
}
}  // namespace

void check_option(bool ok, const std::string& set, const std::string& field, const std::string& rule, double value) {
  if (ok) return;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  fail(set, field, rule, buf);
}

void check_option(bool ok, const std::string& set, const std::string& field, const std::string& rule, int64_t value) {
  if (!ok) fail(set, field, rule, std::to_string(value));
}

void check_option(bool ok, const std::string& set, const std::string& field, const std::string& rule,
                  const std::string& value) {
  if (!ok) fail(set, field, rule, "\"" + value + "\"");
}

}  // namespace twinkle
