// twinkle/dist/nccl_process_group.h — process groups for device "cuda": NCCL, or host-staged MPI.
//
// With device_type "cuda" the model's activations, gradients and parameters are device
// pointers, while the runtime's own small reductions (token counts, the loss, the grad norm)
// stay on the host. A CUDA group therefore WRAPS the host group (MPI, or the size-1 local
// group) of the same mesh dimension and looks at every buffer (cudaPointerGetAttributes):
//   * host buffers go to the wrapped group unchanged (same semantics, same byte counts);
//   * device buffers go through
//       - NCCL (libnccl.so.2 loaded with dlopen at the first NCCL group: binaries load without it) (make_nccl_group): one communicator per group, created at the group's first
//         device collective from an ncclUniqueId broadcast over the wrapped MPI group
//         (NCCL's documented MPI bootstrap: ncclGetUniqueId on rank 0, MPI_Bcast,
//         ncclCommInitRank); all_reduce -> ncclAllReduce, all_gather -> ncclAllGather,
//         reduce_scatter -> ncclReduceScatter, broadcast -> ncclBroadcast, all_to_all_v and
//         send_recv -> ncclSend/ncclRecv inside ncclGroupStart/End, send/recv -> ncclSend/Recv;
//       - the host (make_staged_group): device -> host copy, the wrapped group's collective,
//         host -> device copy. NCCL refuses two ranks of one communicator on the same GPU
//         ("Duplicate GPU detected"), so several processes sharing one lent GPU use this.
//   * a size-1 group copies device buffers on the device (cudaMemcpy), as the local group does.
// Semantics (in-place rules, count checks, byte counters) are those of ProcessGroup
// (process_group.h). Every call is blocking: the device is synchronized before a device
// collective (it reads what the backend's stream produced) and the collective's stream after.
// A buffer pair with one host and one device pointer is a twinkle::Error naming the call.
// CUDA / NCCL failures become twinkle::Error naming the group, the call and file:line.
//
// Defined only in a TWINKLE_CUDA build (src/dist/cuda/); twinkle::initialize with
// device_type "cuda" calls attach_cuda_groups.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "twinkle/dist/parallel_state.h"
#include "twinkle/dist/process_group.h"

namespace twinkle::dist {

/// How collectives on device buffers travel.
enum class DeviceComm { Nccl, HostStaged };
std::string device_comm_name(DeviceComm m);  ///< "nccl" / "host-staged"

/// NCCL over `host`'s ranks (host: the MPI group of this mesh dimension, or a size-1 group).
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<ProcessGroup> host);
/// Device buffers staged through host memory and `host`'s collectives.
std::shared_ptr<ProcessGroup> make_staged_group(std::shared_ptr<ProcessGroup> host);

/// Collective over `world` (host buffers only): Nccl unless two ranks use the same GPU (same
/// host name and PCI bus id of the device local_rank() % visible devices picks, the CUDA
/// runtime's rule), then HostStaged. Env TWINKLE_CUDA_COMM=nccl|staged forces a mode (any other
/// value: twinkle::Error); a build without NCCL always stages. `reason` (may be null) receives
/// the sentence logged by attach_cuda_groups.
DeviceComm choose_device_comm(ProcessGroup& world, std::string* reason = nullptr);

/// Replaces every group of `ps` by its CUDA wrapper with the mode choose_device_comm picks and
/// logs the choice once (rank 0, INFO: "cuda collectives: nccl ..." / "host-staged ...").
/// Collective over ps.world. Returns the mode.
DeviceComm attach_cuda_groups(ParallelState& ps);

/// True when libnccl.so.2 can be loaded (dlopen at first use, as the CUDA backend loads cuBLAS);
/// otherwise `why` (may be null) says why. A build without nccl.h: always false.
bool nccl_available(std::string* why = nullptr);

/// True when `p` is device memory of the CUDA runtime (cudaPointerGetAttributes; host and
/// unregistered pointers: false).
bool is_cuda_pointer(const void* p);

}  // namespace twinkle::dist
