// Runtime: initialize / finalize, the global ParallelState, failure handling.
#include "twinkle/dist/runtime.h"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>

#include "twinkle/core/error.h"
#include "twinkle/dist/comm_watchdog.h"
#include "twinkle/dist/mpi_process_group.h"
#include "twinkle/dist/nccl_process_group.h"

namespace twinkle {
namespace {

std::shared_ptr<dist::ParallelState> g_state;
bool g_initialized = false;
bool g_we_started_mpi = false;
bool g_atexit_registered = false;
uint64_t g_seed = 42;
bool g_full_determinism = false;
std::atomic<bool> g_handlers_installed{false};
std::atomic<bool> g_terminate_installed{false};
std::atomic<bool> g_aborting{false};
char g_signal_prefix[64] = "[rank 0] ";

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int env_int(const char* name, int dflt) {
  const char* v = env(name);
  if (!v) return dflt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && *end == '\0') ? static_cast<int>(x) : dflt;
}

bool under_launcher() {
  if (env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_SIZE")) return true;
  bool pmi = env("PMI_RANK") || env("PMI_FD") || env("PMIX_NAMESPACE");
  return env_int("SLURM_NTASKS", 1) > 1 && pmi;
}

void update_signal_prefix() {
  std::snprintf(g_signal_prefix, sizeof g_signal_prefix, "[rank %d] ", world_rank());
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (segmentation fault)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic exception)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGABRT: return "SIGABRT (abort)";
  }
  return "signal";
}

void write_str(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// One write per message so lines of different ranks do not interleave mid-line.
void print_err(const std::string& line) {
  std::string s = line + "\n";
  write_str(s.c_str());
}

extern "C" void twinkle_fatal_signal(int sig) {
  // Async-signal-safe: write(2), then re-raise with the default action so the process
  // ends abnormally; mpirun then tears the job down.
  if (!g_aborting.exchange(true)) {
    write_str(g_signal_prefix);
    write_str("fatal signal ");
    write_str(signal_name(sig));
    write_str("\n");
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void terminate_handler() {
  std::string what = "unknown exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an active exception";
  }
  g_aborting = true;
  print_err("[rank " + std::to_string(world_rank()) + "] terminate: " + what);
  abort_job(1);
}

void install_terminate() {
  if (!g_terminate_installed.exchange(true)) std::set_terminate(terminate_handler);
}

void atexit_finalize() { finalize(); }


}  // namespace

void abort_job(int code, const std::string& message) {
  g_aborting = true;
  if (!message.empty())
    print_err((world_size() > 1 ? "[rank " + std::to_string(world_rank()) + "] error: " : std::string("error: ")) + message);
  std::fflush(stdout);
  std::fflush(stderr);
  if (dist::mpi_active()) MPI_Abort(MPI_COMM_WORLD, code);
  ::signal(SIGABRT, SIG_DFL);
  std::_Exit(code);
}

int world_rank() {
  if (dist::mpi_active()) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (env(v)) return env_int(v, 0);
  return 0;
}

int world_size() {
  if (dist::mpi_active()) {
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
  }
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (env(v)) return env_int(v, 1);
  return 1;
}

int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (env(v)) return env_int(v, 0);
  return 0;
}

bool cuda_backend_built() {
#ifdef TWINKLE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int local_device_id(const std::string& device_type) {
  if (device_type == "cpu") return -1;
  const char* var = device_type == "npu" ? "ASCEND_RT_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
  int lr = local_rank();
  const char* list = env(var);
  if (!list) return lr;
  std::vector<int> ids;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    check(!item.empty() && end && *end == '\0', std::string(var) + "='" + list + "': entry '" + item +
                                                    "' is not a device number");
    ids.push_back(static_cast<int>(v));
  }
  check(lr < static_cast<int>(ids.size()), std::string(var) + "='" + list + "' lists " + std::to_string(ids.size()) +
                                               " devices but this is local rank " + std::to_string(lr) +
                                               ": launch at most " + std::to_string(ids.size()) + " ranks per node");
  return ids[lr];
}

void install_failure_handlers() {
  install_terminate();
  update_signal_prefix();
  if (g_handlers_installed.exchange(true)) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = twinkle_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

void initialize(const InitOptions& opts) {
  check(!g_initialized, "twinkle::initialize called twice (call twinkle::finalize first)");
  install_terminate();
  check(opts.mode == "local", "InitOptions.mode '" + opts.mode +
                                  "' is not supported by the C++ runtime (only 'local': one process per rank, "
                                  "launched with twinkle-run / mpirun / srun)");
  const DeviceMesh& mesh = opts.global_device_mesh;
  const std::string& dev = mesh.device_type();
  if (dev == "npu")
    throw Error("device_type 'npu' requested but this build has no NPU backend: it needs Huawei Ascend's CANN "
                "toolkit (not available in this build)" +
                std::string(env("ASCEND_RT_VISIBLE_DEVICES") ? " [ASCEND_RT_VISIBLE_DEVICES is set]" : ""));
#ifndef TWINKLE_WITH_CUDA
  if (dev == "cuda")
    throw Error("device_type 'cuda' requested but this build has no CUDA backend: the CUDA kernels and NCCL "
                "process groups are not implemented yet (this build trains on the cpu backend only)");
#endif
  check(dev == "cpu" || dev == "cuda", "InitOptions.global_device_mesh.device_type '" + dev + "' is unknown");

  auto mismatch = [&](int world) {
    int need = mesh.world_size();
    return "world size " + std::to_string(world) + " does not match the device mesh " + mesh.describe() + " (" +
           std::to_string(need) + (need == 1 ? " rank" : " ranks") + "): launch with twinkle-run --nproc_per_node=" +
           std::to_string(need) + " or change the mesh";
  };

  int already = 0, finalized = 0;
  MPI_Initialized(&already);
  MPI_Finalized(&finalized);
  if (already || under_launcher()) {
    check(!finalized, "twinkle::initialize: MPI was already finalised in this process (MPI cannot restart; "
                      "initialize once per process)");
    if (!already) {
      int provided = 0;
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      check(rc == MPI_SUCCESS, "MPI_Init_thread failed (code " + std::to_string(rc) + ")");
      g_we_started_mpi = true;
      check(provided >= MPI_THREAD_FUNNELED,
            "MPI_Init_thread: the MPI library provides thread level " + std::to_string(provided) +
                " < MPI_THREAD_FUNNELED");
    }
    install_failure_handlers();  // after MPI_Init, which installs OpenMPI's own handlers
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    check(world == mesh.world_size(), mismatch(world));
    const double comm_timeout = dist::comm_timeout_from_env();  // a bad TWINKLE_COMM_TIMEOUT fails here, on every rank
    g_state = dist::make_mpi_state(mesh);
    if (world > 1) {  // the collective watchdog (dist/comm_watchdog.h)
      int me = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &me);
      dist::start_comm_watchdog(me, comm_timeout);
    }
  } else {
    install_failure_handlers();
    check(mesh.world_size() == 1, mismatch(1));
    g_state = dist::make_mpi_state(mesh);  // no MPI: size-1 local groups over this mesh
  }
#ifdef TWINKLE_WITH_CUDA
  // device_type cuda: every group also moves device buffers (NCCL, or host-staged when ranks share a GPU)
  if (dev == "cuda") dist::attach_cuda_groups(*g_state);
#endif
  g_seed = opts.seed;
  g_full_determinism = opts.full_determinism;
  g_initialized = true;
  get_logger().reload_env();
  if (!g_atexit_registered) {
    std::atexit(atexit_finalize);
    g_atexit_registered = true;
  }
}

bool is_initialized() { return g_initialized; }

dist::ParallelState& parallel_state() {
  check(g_initialized && g_state, "twinkle::parallel_state(): call twinkle::initialize first");
  return *g_state;
}

void finalize() {
  g_state.reset();  // frees the communicators while MPI is alive
  g_initialized = false;
  if (g_we_started_mpi && dist::mpi_active()) MPI_Finalize();
  g_we_started_mpi = false;
}

uint64_t global_seed() { return g_seed; }
bool full_determinism() { return g_full_determinism; }

int run_main(int argc, char** argv, std::function<int(int, char**)> body) {
  install_terminate();
  int code = 0;
  std::string error;
  try {
    code = body(argc, argv);
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  if (!error.empty()) {
    if (dist::mpi_active()) abort_job(1, error);  // "[rank R] error: ..." (no rank tag for one process)
    g_aborting = true;
    print_err("error: " + error);
    finalize();
    return 1;
  }
  if (code != 0 && dist::mpi_active()) {
    print_err("[rank " + std::to_string(world_rank()) + "] exited with code " + std::to_string(code) +
              ": aborting the job");
    abort_job(code);
  }
  finalize();
  return code;
}

}  // namespace twinkle
