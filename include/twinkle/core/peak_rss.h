// twinkle/core/peak_rss.h — the peak resident set of a stretch of the run (Linux VmHWM), for
// `twinkle train --report-memory` and the benches (bench/peak_rss.h): what `twinkle plan`
// predicts is the training steps' memory, not the transient buffers of the model's init.
#pragma once

#include <cstdint>
#include <cstdio>

namespace twinkle {

/// Resets the process's peak resident set (VmHWM) to its current resident set by writing "5" to
/// /proc/self/clear_refs (Linux >= 4.0), so that a later step_peak_rss_bytes() covers only what
/// follows. No-op where /proc is unavailable. Memory freed earlier but kept by malloc (as
/// twinkle-run's MALLOC_TRIM_THRESHOLD_ makes it) stays resident and counted.
inline void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

/// A "Vm...: N kB" field of /proc/self/status in bytes (0 where /proc is unavailable).
inline int64_t proc_status_bytes(const char* format) {
  long kb = 0;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, format, &kb) == 1) break;
    std::fclose(f);
  }
  return static_cast<int64_t>(kb) * 1024;
}

/// Peak resident set in bytes since the last reset_peak_rss() (or the process start): VmHWM of
/// /proc/self/status. 0 where /proc is unavailable.
inline int64_t step_peak_rss_bytes() { return proc_status_bytes("VmHWM: %ld kB"); }

/// The current resident set in bytes (VmRSS). 0 where /proc is unavailable.
inline int64_t current_rss_bytes() { return proc_status_bytes("VmRSS: %ld kB"); }

}  // namespace twinkle
