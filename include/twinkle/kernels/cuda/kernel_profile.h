// twinkle/kernels/cuda/kernel_profile.h — where a CUDA step's time goes, kernel by kernel.
//
// Records every kernel the process launches (twinkle's own and cuBLAS's) with NVIDIA's CUPTI activity
// API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: device-side start and end timestamps, the launch order
// untouched), as Nsight Systems' "CUDA GPU kernel summary" does, without Nsight (which the lent GPU
// machines lack). libcupti.so.13 is loaded with dlopen when recording starts, so nothing links it and a
// process that never profiles never loads it. bench/train_bench prints the table for the timed steps with
// TWINKLE_CUDA_PROFILE=1 (bench/README.md, "GPU").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace twinkle::cuda {

/// One kernel (by demangled name, as CUPTI reports it) over the recorded interval.
struct KernelProfileRow {
  std::string name;        ///< demangled kernel name (template arguments included)
  int64_t calls = 0;       ///< launches
  double total_ms = 0.0;   ///< sum of (end - start) over the launches, device clock, milliseconds
};

/// Starts recording (idempotent). Returns "" when recording, else why not: the host emulation
/// (tests/cuda/emu/cuda_shim.h has no CUPTI), libcupti.so.13 not found (searched: the loader path,
/// /usr/local/cuda/extras/CUPTI/lib64), or the CUPTI call that failed with its message. Call after
/// cuda::init() and outside a running kernel profile of another tool (CUPTI admits one subscriber).
std::string kernel_profile_start();

/// Stops recording, flushes CUPTI's buffers and returns the rows recorded since start, largest total first
/// (ties by name). Empty when recording never started. Synchronizes the device first.
std::vector<KernelProfileRow> kernel_profile_stop();

/// The table as text: one line per kernel, `rows` largest first — share of the summed kernel time, total ms,
/// ms per `steps` (>= 1), calls per step, mean µs per call, the name cut to `name_width` characters — then
/// a total line with the summed kernel time against `wall_s` (the host's wall time of the same interval;
/// the difference is device idle time: host work, launch gaps, synchronizations). Rows past `max_rows`
/// are summed into one "(N other kernels)" line. Pure host code (no CUDA).
std::string format_kernel_profile(const std::vector<KernelProfileRow>& rows, double wall_s, int steps,
                                  size_t max_rows = 30, size_t name_width = 90);

}  // namespace twinkle::cuda
