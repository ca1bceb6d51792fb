// twinkle/core/error.h — the one exception type twinkle throws for bad input or bad state.
#pragma once
#include <stdexcept>
#include <string>

namespace twinkle {

/// Thrown for every user-facing error (bad file, bad config, bad shape, bad mesh).
/// The message always names the file / field / tensor / row concerned.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Throws twinkle::Error(msg) when `cond` is false.
inline void check(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

}  // namespace twinkle
