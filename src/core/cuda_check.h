// src/core/cuda_check.h — how a CUDA runtime status becomes a twinkle::Error, for every file built
// against the CUDA runtime (src/kernels/cuda, src/dist/cuda): one message format, in one place.
// Internal (not installed). Include it after the CUDA runtime API header (or the host emulation's
// tests/cuda/emu/cuda_shim.h), whose cudaError_t, cudaGetLastError, cudaGetErrorName and
// cudaGetErrorString it uses (CUDA Runtime API, "Error Handling").
#pragma once
#include <cstring>
#include <string>
#include <string_view>

#include "twinkle/core/error.h"

namespace twinkle::cuda_check {

/// "file.cpp:123": `file` without its directories, then `line`.
inline std::string where(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line);
}

/// "<error name>: <description>" of `e`, e.g. "cudaErrorInvalidValue: invalid argument".
inline std::string describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

/// Throws twinkle::Error "<what>[ '<name>']: <call> failed: <describe(e)> (<where(file, line)>)" unless
/// `e` is cudaSuccess (the message is built only then: the process groups check every copy of a
/// collective). Clears a non-sticky error first (cudaGetLastError), so that the next call is not blamed
/// for this one.
inline void check(cudaError_t e, const char* what, std::string_view name, const char* call, const char* file,
                  int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  std::string context = what;
  if (!name.empty()) context += " '" + std::string(name) + "'";
  throw Error(context + ": " + call + " failed: " + describe(e) + " (" + where(file, line) + ")");
}

}  // namespace twinkle::cuda_check

/// CALL's status checked by twinkle::cuda_check::check, the message starting "CUDA error: ".
#define TWINKLE_CUDA_CHECK(call) ::twinkle::cuda_check::check((call), "CUDA error", {}, #call, __FILE__, __LINE__)
/// CALL's status checked by twinkle::cuda_check::check, the message starting "process group 'GROUP': ".
#define TWINKLE_CUDA_CHECK_GROUP(call, group) \
  ::twinkle::cuda_check::check((call), "process group", (group), #call, __FILE__, __LINE__)
