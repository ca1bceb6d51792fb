// twinkle/core/option_check.h — range checks for option fields, shared by every option set's
// validate() (optimizer, scheduler, data loader, template, model, training loop), so a bad
// value reads the same from the C++ API, `twinkle train` and the recipes.
//
// Every message has the form
//   "<set> option '<field>' (--<field with '-' for '_'>) must be <rule>, got <value>"
// e.g. "optimizer option 'adam_beta1' (--adam-beta1) must lie in [0, 1), got 1.5"; the
// flag is the command-line spelling of the field (the same name everywhere).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

namespace twinkle {

/// "<set> option 'field' (--field-flag)".
std::string option_name(const std::string& set, const std::string& field);
/// Throws twinkle::Error("<option_name> must be <rule>, got <value>") when `ok` is false.
/// Doubles print with %.17g (nan / inf as such).
void check_option(bool ok, const std::string& set, const std::string& field, const std::string& rule, double value);
void check_option(bool ok, const std::string& set, const std::string& field, const std::string& rule, int64_t value);
void check_option(bool ok, const std::string& set, const std::string& field, const std::string& rule,
                  const std::string& value);

}  // namespace twinkle
