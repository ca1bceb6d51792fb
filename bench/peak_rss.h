// Peak resident set of the training steps, shared by the benches (train_bench, layout_bench).
#pragma once

#include <cstdio>

namespace twinkle::benchutil {

// Resets the peak resident set (VmHWM) to the current resident set by writing "5" to
// /proc/self/clear_refs (Linux >= 4.0), so a later step_peak_rss_bytes() covers the training
// steps, not the transient allocations of the model's construction and init. No-op elsewhere.
inline void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// Peak resident set in bytes since the last reset_peak_rss() (VmHWM of /proc/self/status); 0
// where /proc is unavailable.
inline long step_peak_rss_bytes() {
  long kb = 0;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    std::fclose(f);
  }
  return kb * 1024L;
}

}  // namespace twinkle::benchutil
