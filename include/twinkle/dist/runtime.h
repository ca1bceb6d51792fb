// twinkle/dist/runtime.h — process start-up: initialize(), the global ParallelState,
// failure handling (run_main), the logger and the device placement table.
//
// Counterpart of the Python twinkle.initialize(mode=..., global_device_mesh=...)
// and of torch.distributed's init_process_group. MPI is the engine:
//
//   Launch                          How initialize() sees it
//   twinkle-run --nproc_per_node=N  mpirun env (OMPI_COMM_WORLD_SIZE) -> MPI_Init_thread
//   mpirun -np N prog               same (pass the options twinkle-run adds by hand:
//                                   --bind-to none --mca mpi_yield_when_idle 1 ...;
//                                   `twinkle-run --dry-run ...` prints them)
//   srun --mpi=pmix -n N prog       PMIX_RANK / PMI_SIZE -> MPI_Init_thread
//   ./prog (no launcher)            no MPI call at all; size-1 local groups
//
// Device mapping (cuda/npu builds): twinkle-run passes CUDA_VISIBLE_DEVICES /
// ASCEND_RT_VISIBLE_DEVICES through unchanged; local rank i (OMPI_COMM_WORLD_LOCAL_RANK,
// else SLURM_LOCALID, else MPI_LOCALRANKID) uses the i-th entry of that list (or device
// i when the variable is unset), see local_device_id().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "twinkle/dist/device_mesh.h"
#include "twinkle/dist/parallel_state.h"

namespace twinkle {

struct InitOptions {
  std::string mode = "local";     ///< only "local" (one process per rank, MPI); "ray" is Python-only
  DeviceMesh global_device_mesh;  ///< default: a 1-rank cpu mesh
  uint64_t seed = 42;             ///< stored for the model / data layers (global_seed())
  bool full_determinism = false;  ///< stored (full_determinism()); layers pick deterministic paths
};

/// Starts the runtime. Order of checks (each throws twinkle::Error):
///  1. mode != "local" -> "InitOptions.mode 'x' is not supported ...".
///  2. device_type "npu" (or ASCEND_RT_VISIBLE_DEVICES set with device_type npu) ->
///     "device_type 'npu' requested but this build has no NPU backend: it needs Huawei
///     Ascend's CANN toolkit (not available in this build)"; "cuda" -> "this build has no
///     CUDA backend: the CUDA kernels and NCCL process groups are not implemented yet ..."
///     in a build without it (cuda_backend_built() false).
///  3. Under a launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, or SLURM_NTASKS > 1
///     together with a PMI variable): MPI_Init_thread(MPI_THREAD_FUNNELED) unless MPI is
///     already initialised; the MPI world size must equal the mesh's, else "world size 4
///     does not match the device mesh pp=2 x dp=2 x tp=2 (8 ranks): launch with
///     twinkle-run --nproc_per_node=8 or change the mesh". Without a launcher MPI is not
///     touched and the mesh must have 1 rank (same message with world size 1).
///  4. Builds the global ParallelState (dist::make_mpi_state / make_single_process_state);
///     device_type "cuda" then wraps every group for device buffers (dist::attach_cuda_groups:
///     NCCL, or host-staged when ranks share a GPU; "device 'cuda': no GPU visible ..." without one),
///     installs the failure handlers (see run_main) and registers finalize() with atexit.
/// Calling initialize twice throws.
void initialize(const InitOptions& opts = {});

/// True between initialize() and finalize().
bool is_initialized();
/// The global state; throws twinkle::Error when initialize() has not run.
dist::ParallelState& parallel_state();
/// Frees every communicator and calls MPI_Finalize when initialize() started MPI.
/// Idempotent; also runs at exit.
void finalize();

/// InitOptions::seed / full_determinism of the last initialize() (42 / false before).
uint64_t global_seed();
bool full_determinism();

/// This process's world rank / size: from MPI once initialised, else from the launcher's
/// environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID), else 0 / 1.
int world_rank();
int world_size();
/// Rank among the processes on this node (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
/// MPI_LOCALRANKID; 0 without a launcher).
int local_rank();
/// The accelerator this rank uses: entry local_rank() of CUDA_VISIBLE_DEVICES (cuda) or
/// ASCEND_RT_VISIBLE_DEVICES (npu) when set, else local_rank(); -1 for cpu. Throws
/// twinkle::Error when the list has fewer entries than local_rank()+1.
int local_device_id(const std::string& device_type);
/// True when this build has the CUDA backend (configured with TWINKLE_CUDA where nvcc exists):
/// initialize() then accepts device_type "cuda" and wraps every group for device buffers
/// (dist/nccl_process_group.h).
bool cuda_backend_built();

/// Runs body(argc, argv) so that a failing rank ends the whole job within seconds:
/// an exception is printed as "[rank R] error: <what>" ("error: <what>" in a single process) on stderr and MPI_Abort(MPI_COMM_WORLD,
/// 1) is called when MPI is active (else run_main returns 1); a non-zero return code
/// while MPI is active aborts the job the same way ("[rank R] exited with code C";
/// MPI_Abort with that code). Installs the std::terminate handler at once (the signal
/// handlers come with initialize(), after MPI_Init installed OpenMPI's). Calls
/// finalize() before returning.
/// Usage:  int main(int argc, char** argv) { return twinkle::run_main(argc, argv, real_main); }
int run_main(int argc, char** argv, std::function<int(int, char**)> body);

/// Ends the whole job from this rank at once, for a caller that cannot return through run_main:
/// prints "[rank R] error: <message>" ("error: <message>" in a single process; nothing when
/// `message` is empty) on stderr, flushes stdout / stderr, then MPI_Abort(MPI_COMM_WORLD, code)
/// when MPI is active (mpirun ends every rank), else std::_Exit(code). finalize() is not run:
/// MPI_Finalize would wait for ranks that are blocked in a collective this rank will never join.
/// The Python package calls it from its sys.excepthook (python/twinkle/__init__.py), because an
/// uncaught Python exception otherwise reaches MPI_Finalize at exit and the job hangs.
[[noreturn]] void abort_job(int code, const std::string& message = "");

/// std::set_terminate handler (prints "[rank R] terminate: <what>" then aborts the job:
/// MPI_Abort when MPI is active, else _Exit(1)) and SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT
/// handlers (print "[rank R] fatal signal SIGSEGV ...", then re-raise with the default
/// action; mpirun then kills the other ranks because a process ended abnormally).
/// Called by initialize(); idempotent.
void install_failure_handlers();

/// Minimal leveled logger. Line format: "[YYYY-MM-DD HH:MM:SS][LEVEL:twinkle] msg" (local
/// time), written to stderr (like Python logging's default StreamHandler), one flushed
/// write per line. Rank 0 prints every enabled level; other ranks print only ERROR (with
/// the message prefixed "[rank R] ").
/// Threshold from env LOG_LEVEL (DEBUG, INFO, WARNING, ERROR; default INFO; read at first
/// use and again by initialize()).
class Logger {
 public:
  enum class Level { Debug = 10, Info = 20, Warning = 30, Error = 40 };
  void debug(const std::string& msg) { log(Level::Debug, msg); }
  void info(const std::string& msg) { log(Level::Info, msg); }
  void warning(const std::string& msg) { log(Level::Warning, msg); }
  void error(const std::string& msg) { log(Level::Error, msg); }
  /// INFO on every rank, prefixed "[rank R] ".
  void info_all_ranks(const std::string& msg);
  void log(Level level, const std::string& msg);
  /// Formats one line (no newline) exactly as it would be printed.
  static std::string format_line(Level level, const std::string& msg);

  Level level() const { return level_; }
  void set_level(Level l) { level_ = l; }
  /// Re-reads LOG_LEVEL (unknown values -> INFO with a warning).
  void reload_env();
  /// Redirects output (tests); nullptr restores stderr.
  void set_sink(std::function<void(const std::string& line)> sink) { sink_ = std::move(sink); }

 private:
  void emit(const std::string& line);
  Level level_ = Level::Info;
  std::function<void(const std::string&)> sink_;
};
Logger& get_logger();

/// An 80-column box titled "DEVICE PLACEMENT TOPOLOGY": device type, world size, mesh
/// description, one row per rank (tp, cp, dp, pp, ep, edp and, for cuda/npu, the
/// visible device id it maps to), then the tp, dp, pp, dp-cp, ep and edp groups.
/// Uses the initialised mesh, or a 1-rank cpu mesh before initialize().
std::string get_device_placement();
/// The same table for any mesh (no MPI needed).
std::string format_device_placement(const DeviceMesh& mesh);

}  // namespace twinkle
