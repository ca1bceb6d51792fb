// The CUDA groups of a ParallelState: NCCL, or host-staged when ranks share a GPU
// (twinkle/dist/nccl_process_group.h).
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <set>

#include "cuda_group_base.h"
#include "twinkle/dist/runtime.h"

namespace twinkle::dist {

namespace {
// The device the CUDA runtime picks for this rank: local rank modulo the visible devices.
int picked_device(int* count_out) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) (void)cudaGetLastError();
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  check(e == cudaSuccess && n > 0, "device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES=" +
                                       std::string(vis ? vis : "<unset>") + "; cudaGetDeviceCount: " +
                                       (e == cudaSuccess ? std::string("0 devices") : cuda_check::describe(e)) + ")");
  if (count_out) *count_out = n;
  return local_rank() % n;
}
}  // namespace

DeviceComm choose_device_comm(ProcessGroup& world, std::string* reason) {
  const char* force = std::getenv("TWINKLE_CUDA_COMM");
  int count = 0;
  const int dev = picked_device(&count);
  TWINKLE_CUDA_CHECK_GROUP(cudaSetDevice(dev), world.name());
  char bus[64] = {0};
  TWINKLE_CUDA_CHECK_GROUP(cudaDeviceGetPCIBusId(bus, sizeof bus, dev), world.name());
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  // One 63-bit key per (host, GPU); equal keys on two ranks = a shared GPU.
  const int64_t key =
      static_cast<int64_t>(std::hash<std::string>{}(std::string(host) + "|" + bus) & 0x7fffffffffffffffull);
  std::vector<int64_t> keys(static_cast<size_t>(world.size()));
  world.all_gather(&key, keys.data(), 1, DType::I64);
  const bool shared = std::set<int64_t>(keys.begin(), keys.end()).size() < keys.size();
  DeviceComm mode = shared ? DeviceComm::HostStaged : DeviceComm::Nccl;
  std::string why = shared ? std::to_string(world.size()) + " ranks share " +
                                 std::to_string(std::set<int64_t>(keys.begin(), keys.end()).size()) +
                                 " GPU(s) (NCCL refuses two ranks on one GPU)"
                           : "every rank has its own GPU";
  if (force && *force) {
    const std::string f = force;
    check(f == "nccl" || f == "staged", "TWINKLE_CUDA_COMM='" + f + "': use nccl or staged");
    mode = f == "nccl" ? DeviceComm::Nccl : DeviceComm::HostStaged;
    why = "TWINKLE_CUDA_COMM=" + f;
  }
  std::string no_nccl;
  if (mode == DeviceComm::Nccl && world.size() > 1 && !nccl_available(&no_nccl)) {
    mode = DeviceComm::HostStaged;
    why = no_nccl;
  }
  if (reason)
    *reason = "cuda collectives: " + device_comm_name(mode) + " (" + why + "; rank 0 on GPU " + std::to_string(dev) +
              " of " + std::to_string(count) + ", bus " + bus + ")";
  return mode;
}

DeviceComm attach_cuda_groups(ParallelState& ps) {
  std::string reason;
  const DeviceComm mode = choose_device_comm(*ps.world, &reason);
  get_logger().info(reason);
  // Pointer checks and NCCL communicators use the current device: make it the one the CUDA runtime
  // picks (local rank modulo visible devices), so no rank opens a context on device 0 by accident.
  TWINKLE_CUDA_CHECK_GROUP(cudaSetDevice(picked_device(nullptr)), "world");
  auto wrap = [&](std::shared_ptr<ProcessGroup>& g) {
    if (!g) return;  // e.g. the embedding group on a middle pipeline stage
    g = mode == DeviceComm::Nccl ? make_nccl_group(g) : make_staged_group(g);
  };
  for (auto* g : {&ps.world, &ps.tp, &ps.cp, &ps.dp, &ps.pp, &ps.dp_cp, &ps.tp_pp, &ps.embedding, &ps.etp, &ps.ep,
                  &ps.edp})
    wrap(*g);
  if (mode == DeviceComm::Nccl) {
    // Create every communicator now, in the same group order on every rank (a lazily created one
    // could wait on members that are busy elsewhere): one tiny device all-reduce per group.
    void* probe = nullptr;
    TWINKLE_CUDA_CHECK_GROUP(cudaMalloc(&probe, 8), "world");
    TWINKLE_CUDA_CHECK_GROUP(cudaMemset(probe, 0, 8), "world");
    for (auto* g : {&ps.world, &ps.tp, &ps.cp, &ps.dp, &ps.pp, &ps.dp_cp, &ps.tp_pp, &ps.embedding, &ps.etp, &ps.ep,
                    &ps.edp})
      if (*g && (*g)->size() > 1) {
        (*g)->all_reduce(probe, 1, DType::I32, ReduceOp::Sum);
        (*g)->reset_bytes_sent();
      }
    cudaFree(probe);
  }
  return mode;
}

}  // namespace twinkle::dist
