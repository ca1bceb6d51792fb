// tests/support/error_of.h — the message of the twinkle::Error a callable throws, for tests that check
// what a user is told (the brief's rule: bad input gets a clear error naming the file, row or field).
#pragma once
#include <string>
#include <utility>

#include "twinkle/core/error.h"

namespace twinkle::test_support {

/// What f() throws as twinkle::Error (its what()), or "" when it returns normally. Other exceptions pass
/// through (the test fails on them).
template <class F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const twinkle::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace twinkle::test_support
