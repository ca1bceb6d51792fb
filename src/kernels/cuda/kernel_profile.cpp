// Kernel-by-kernel device time with CUPTI's activity API (twinkle/kernels/cuda/kernel_profile.h).
#include "twinkle/kernels/cuda/kernel_profile.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "twinkle/kernels/cuda/runtime.h"

#ifndef TWINKLE_CUDA_SHIM
#include <cupti.h>
#include <dlfcn.h>
#endif

namespace twinkle::cuda {

std::string format_kernel_profile(const std::vector<KernelProfileRow>& rows, double wall_s, int steps,
                                  size_t max_rows, size_t name_width) {
  const double per = static_cast<double>(std::max(steps, 1));
  double total = 0.0;
  for (const auto& r : rows) total += r.total_ms;
  std::vector<KernelProfileRow> sorted = rows;
  std::stable_sort(sorted.begin(), sorted.end(), [](const KernelProfileRow& a, const KernelProfileRow& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  if (sorted.size() > max_rows) {
    KernelProfileRow rest;
    rest.name = "(" + std::to_string(sorted.size() - max_rows) + " other kernels)";
    for (size_t i = max_rows; i < sorted.size(); ++i) {
      rest.calls += sorted[i].calls;
      rest.total_ms += sorted[i].total_ms;
    }
    sorted.resize(max_rows);
    sorted.push_back(rest);
  }
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%6s %11s %10s %9s %10s  %s\n", "share", "total ms", "ms/step", "calls/st",
                "us/call", "kernel");
  out += line;
  for (const auto& r : sorted) {
    std::string name = r.name.size() > name_width ? r.name.substr(0, name_width - 3) + "..." : r.name;
    std::snprintf(line, sizeof(line), "%5.1f%% %11.3f %10.3f %9.1f %10.2f  %s\n",
                  total > 0 ? 100.0 * r.total_ms / total : 0.0, r.total_ms, r.total_ms / per,
                  static_cast<double>(r.calls) / per, r.calls ? 1e3 * r.total_ms / static_cast<double>(r.calls) : 0.0,
                  name.c_str());
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "kernels: %.3f ms per step summed over %zu kernel names; wall %.3f ms per step: the device "
                "ran kernels %.1f%% of the wall time\n",
                total / per, rows.size(), 1e3 * wall_s / per, wall_s > 0 ? 100.0 * total / (1e3 * wall_s) : 0.0);
  out += line;
  return out;
}

#ifdef TWINKLE_CUDA_SHIM

std::string kernel_profile_start() { return "the host emulation of CUDA has no CUPTI"; }
std::vector<KernelProfileRow> kernel_profile_stop() { return {}; }

#else

namespace {

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

struct Cupti {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
};

struct Agg {
  int64_t calls = 0;
  uint64_t ns = 0;
};

std::mutex g_mu;
Cupti g_api;
bool g_loaded = false, g_recording = false;
std::map<std::string, Agg> g_by_mangled;  // CUPTI's (mangled) name -> launches, summed device time

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    while (g_api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      // kind, start, end and name keep their offsets across CUpti_ActivityKernel versions
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel11*>(rec);
      Agg& a = g_by_mangled[k->name ? k->name : "?"];
      a.calls += 1;
      a.ns += k->end > k->start ? k->end - k->start : 0;
    }
  }
  std::free(buffer);
}

std::string load_locked() {
  if (g_loaded) return "";
  void* lib = nullptr;
  for (const char* name : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                           "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL))) break;
  if (!lib) return std::string("libcupti.so.13 not found (") + dlerror() + ")";
  auto sym = [&](const char* n) { return dlsym(lib, n); };
  g_api.register_callbacks = reinterpret_cast<decltype(g_api.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
  g_api.enable = reinterpret_cast<decltype(g_api.enable)>(sym("cuptiActivityEnable"));
  g_api.disable = reinterpret_cast<decltype(g_api.disable)>(sym("cuptiActivityDisable"));
  g_api.flush_all = reinterpret_cast<decltype(g_api.flush_all)>(sym("cuptiActivityFlushAll"));
  g_api.next_record = reinterpret_cast<decltype(g_api.next_record)>(sym("cuptiActivityGetNextRecord"));
  g_api.result_string = reinterpret_cast<decltype(g_api.result_string)>(sym("cuptiGetResultString"));
  if (!g_api.register_callbacks || !g_api.enable || !g_api.disable || !g_api.flush_all || !g_api.next_record)
    return "libcupti lacks the activity API";
  g_loaded = true;
  return "";
}

std::string failed(const char* call, CUptiResult r) {
  const char* s = nullptr;
  if (g_api.result_string) g_api.result_string(r, &s);
  return std::string(call) + " failed: " + (s ? s : "CUPTI error " + std::to_string(static_cast<int>(r)));
}

}  // namespace

std::string kernel_profile_start() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_recording) return "";
  if (std::string why = load_locked(); !why.empty()) return why;
  if (CUptiResult r = g_api.register_callbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS)
    return failed("cuptiActivityRegisterCallbacks", r);
  if (CUptiResult r = g_api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); r != CUPTI_SUCCESS)
    return failed("cuptiActivityEnable(CONCURRENT_KERNEL)", r);
  g_by_mangled.clear();
  g_recording = true;
  return "";
}

std::vector<KernelProfileRow> kernel_profile_stop() {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_recording) return {};
  }
  synchronize();
  g_api.flush_all(1);  // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: deliver the partly filled buffers too (calls back)
  std::lock_guard<std::mutex> lk(g_mu);
  g_api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  g_recording = false;
  std::map<std::string, KernelProfileRow> by_name;  // demangled names can coincide (one row then)
  for (const auto& [mangled, a] : g_by_mangled) {
    KernelProfileRow& r = by_name[demangle(mangled.c_str())];
    r.calls += a.calls;
    r.total_ms += 1e-6 * static_cast<double>(a.ns);
  }
  std::vector<KernelProfileRow> out;
  for (auto& [name, r] : by_name) {
    r.name = name;
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelProfileRow& a, const KernelProfileRow& b) { return a.total_ms > b.total_ms; });
  return out;
}

#endif

}  // namespace twinkle::cuda
