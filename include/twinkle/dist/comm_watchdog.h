// twinkle/dist/comm_watchdog.h — the collective watchdog: a communication call (collective,
// point-to-point, or the wait of a non-blocking collective) that has not completed within the
// timeout ends the job with a message naming the rank, the process group and the operation,
// instead of leaving it hanging on a dead, stuck or unreachable peer. Modelled on PyTorch's
// ProcessGroupNCCL watchdog (torch.distributed.init_process_group(timeout=...), default 10 min;
// NCCL's own timeouts): a thread per process polls the call in flight.
//
// The timeout comes from TWINKLE_COMM_TIMEOUT (seconds; `twinkle-run --comm-timeout S` sets and
// forwards it), default 600; 0 switches the watchdog off. initialize() starts it in every MPI
// job of more than one rank; MpiProcessGroup marks each of its MPI calls with a CommWatch.
// On a timeout the rank prints
//   [rank R] comm watchdog: MPI_Recv on process group 'pp' (2 ranks) has not completed after S s ...
// to stderr and exits with status 1; the launcher (mpirun's orte_abort_on_non_zero_status,
// which twinkle-run sets) then ends the other ranks, which under srun time out on their own.
// Not watched: the NCCL calls of device "cuda"'s process groups (dist/nccl_process_group.h; their
// host-buffer calls go to the MPI group and are).
#pragma once
#include <string>

namespace twinkle::dist {

/// The watchdog's timeout in seconds: TWINKLE_COMM_TIMEOUT when it is set (a number >= 0; 0 =
/// off), else 600. Throws twinkle::Error naming the variable when it is not a number >= 0.
double comm_timeout_from_env();

/// Starts this process's watchdog thread with `timeout_s` (> 0; <= 0 starts nothing); `world_rank`
/// is the rank its message names. Later calls change nothing (one watchdog per process).
void start_comm_watchdog(int world_rank, double timeout_s);

/// Whether the watchdog runs, and its timeout in seconds (0 when it does not run).
double comm_watchdog_timeout();

/// Marks one communication call in flight for the lifetime of the object: `op` (the MPI call's
/// name, a string literal) on the process group `group` of `group_size` ranks. Nested marks (a call
/// made inside another) keep the outermost. Cheap when no watchdog runs (one relaxed load).
class CommWatch {
 public:
  CommWatch(const char* op, const std::string& group, int group_size);
  ~CommWatch();
  CommWatch(const CommWatch&) = delete;
  CommWatch& operator=(const CommWatch&) = delete;

 private:
  bool armed_ = false;
};

}  // namespace twinkle::dist
