// NcclProcessGroup: device buffers through one NCCL communicator per group (twinkle/dist/nccl_process_group.h).
// libnccl is dlopen'ed at the first NCCL group (like the CUDA backend's cuBLAS), so binaries built here
// load on a machine without NCCL and single-GPU runs never need it; only nccl.h is needed to build.
#include <dlfcn.h>

#include <cstring>

#include "cuda_group_base.h"

#ifdef TWINKLE_HAVE_NCCL
#include <nccl.h>
#endif

namespace twinkle::dist {

#ifdef TWINKLE_HAVE_NCCL
namespace {

using cuda_detail::CudaGroupBase;

// The NCCL entry points twinkle uses, resolved from libnccl.so.2.
struct NcclApi {
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclGetLastError) GetLastError;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclAllGather) AllGather;
  decltype(&ncclReduceScatter) ReduceScatter;
  decltype(&ncclBroadcast) Broadcast;
  decltype(&ncclSend) Send;
  decltype(&ncclRecv) Recv;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
};

// Null when libnccl cannot be loaded; `err` then says why.
const NcclApi* nccl_api(std::string* err) {
  static std::string why;
  static const NcclApi* api = [] () -> const NcclApi* {
    void* h = nullptr;
    for (const char* n : {"libnccl.so.2", "libnccl.so"})
      if ((h = dlopen(n, RTLD_NOW | RTLD_GLOBAL))) break;
    if (!h) {
      const char* e = dlerror();
      why = std::string("cannot load libnccl.so.2: ") + (e ? e : "?");
      return nullptr;
    }
    static NcclApi a;
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn) {
        ok = false;
        why += std::string(why.empty() ? "" : ", ") + "libnccl lacks " + name;
      }
    };
    sym(a.GetUniqueId, "ncclGetUniqueId");
    sym(a.CommInitRank, "ncclCommInitRank");
    sym(a.CommDestroy, "ncclCommDestroy");
    sym(a.GetErrorString, "ncclGetErrorString");
    a.GetLastError = reinterpret_cast<decltype(a.GetLastError)>(dlsym(h, "ncclGetLastError"));  // NCCL >= 2.13
    sym(a.AllReduce, "ncclAllReduce");
    sym(a.AllGather, "ncclAllGather");
    sym(a.ReduceScatter, "ncclReduceScatter");
    sym(a.Broadcast, "ncclBroadcast");
    sym(a.Send, "ncclSend");
    sym(a.Recv, "ncclRecv");
    sym(a.GroupStart, "ncclGroupStart");
    sym(a.GroupEnd, "ncclGroupEnd");
    return ok ? &a : nullptr;
  }();
  if (!api && err) *err = why;
  return api;
}

const NcclApi& nccl() {
  std::string err;
  const NcclApi* a = nccl_api(&err);
  check(a != nullptr, "NCCL process group: " + err + " (set TWINKLE_CUDA_COMM=staged to use MPI through host memory)");
  return *a;
}

void nccl_ok(ncclResult_t r, const std::string& group, const char* call, const char* file, int line) {
  if (r == ncclSuccess) return;
  const char* last = nccl().GetLastError ? nccl().GetLastError(nullptr) : nullptr;
  throw Error("process group '" + group + "': " + call + " failed: " + nccl().GetErrorString(r) + " (" +
              (last ? last : "") + ") at " + file + ":" + std::to_string(line) +
              (r == ncclInvalidUsage ? " [two ranks of one communicator on the same GPU? set TWINKLE_CUDA_COMM=staged]"
                                     : ""));
}
#define TWINKLE_NCCL(call) nccl_ok((call), name(), #call, __FILE__, __LINE__)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::F64: return ncclFloat64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

// An event, destroyed with its owner (cudaEventDestroy of a pending event is allowed: it is released once
// the work before it completes).
struct Event {
  cudaEvent_t e = nullptr;
  explicit Event(const std::string& group) {
    TWINKLE_CUDA_CHECK_GROUP(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), group);
  }
  ~Event() {
    if (e) (void)cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// A collective queued on the group's NCCL stream: `done` is recorded after it. Completion makes the
// compute stream wait for `done` (cudaStreamWaitEvent): no host wait. test() asks the event.
class NcclWork final : public CommWork {
 public:
  NcclWork(std::string group, cudaStream_t compute)
      : group_(std::move(group)), done_(group_), compute_(compute) {}
  // Never completed (a teardown after an error): the compute stream still waits for the collective, so
  // memory it writes is not handed to later work while NCCL may still write it (errors ignored).
  ~NcclWork() override {
    if (!handed_) (void)cudaStreamWaitEvent(compute_, done_.e, 0);
  }
  cudaEvent_t done() const { return done_.e; }
  bool test() override {
    if (handed_) return true;
    const cudaError_t q = cudaEventQuery(done_.e);
    if (q == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is also left as the thread's last error: the next launch check would throw
      return false;
    }
    TWINKLE_CUDA_CHECK_GROUP(q, group_);
    hand_over();
    return true;
  }
  void wait() override {
    if (!handed_) hand_over();
  }

 private:
  void hand_over() {
    TWINKLE_CUDA_CHECK_GROUP(cudaStreamWaitEvent(compute_, done_.e, 0), group_);
    handed_ = true;
  }
  std::string group_;
  Event done_;
  cudaStream_t compute_;
  bool handed_ = false;
};

class NcclProcessGroup final : public CudaGroupBase {
 public:
  using CudaGroupBase::CudaGroupBase;
  ~NcclProcessGroup() override {
    if (comm_) nccl().CommDestroy(comm_);  // errors at exit are ignored (the driver may be shutting down)
    if (stream_) cudaStreamDestroy(stream_);
  }

 protected:
  void d_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    ncclComm_t c = comm();
    TWINKLE_NCCL(nccl().AllReduce(buf, buf, static_cast<size_t>(count), nccl_type(dtype), nccl_op(op), c, stream_));
    wait();
  }
  void d_all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    ncclComm_t c = comm();
    // In place when send == recv + rank*count (NCCL's in-place rule is the MPI_IN_PLACE one).
    TWINKLE_NCCL(nccl().AllGather(send, recv, static_cast<size_t>(count), nccl_type(dtype), c, stream_));
    wait();
  }
  void d_reduce_scatter(const float* send, float* recv, int64_t count) override {
    ncclComm_t c = comm();
    if (send == recv) {
      // ProcessGroup's in-place form leaves the result at recv[0:count]; NCCL's in-place form is
      // recvbuff == sendbuff + rank*count: reduce there, then move the block to the front.
      float* mine = recv + rank() * count;
      TWINKLE_NCCL(nccl().ReduceScatter(send, mine, static_cast<size_t>(count), ncclFloat32, ncclSum, c, stream_));
      wait();
      if (rank() != 0) d2d(recv, mine, count * 4);  // disjoint: [r*count, (r+1)*count) vs [0, count)
      return;
    }
    TWINKLE_NCCL(nccl().ReduceScatter(send, recv, static_cast<size_t>(count), ncclFloat32, ncclSum, c, stream_));
    wait();
  }
  void d_all_to_all_v(const void* send, const std::vector<int64_t>& sc, const std::vector<int64_t>& sd, void* recv,
                      const std::vector<int64_t>& rc, const std::vector<int64_t>& rd, DType dtype) override {
    ncclComm_t c = comm();
    const auto es = static_cast<int64_t>(dtype_size(dtype));
    const int me = rank();
    TWINKLE_NCCL(nccl().GroupStart());
    for (int j = 0; j < size(); ++j) {
      if (j == me) continue;
      const auto u = static_cast<size_t>(j);
      if (sc[u] > 0)
        TWINKLE_NCCL(nccl().Send(static_cast<const char*>(send) + sd[u] * es, static_cast<size_t>(sc[u]), nccl_type(dtype),
                              j, c, stream_));
      if (rc[u] > 0)
        TWINKLE_NCCL(nccl().Recv(static_cast<char*>(recv) + rd[u] * es, static_cast<size_t>(rc[u]), nccl_type(dtype), j,
                              c, stream_));
    }
    TWINKLE_NCCL(nccl().GroupEnd());
    wait();
    const auto m = static_cast<size_t>(me);
    d2d(static_cast<char*>(recv) + rd[m] * es, static_cast<const char*>(send) + sd[m] * es, sc[m] * es);
  }
  void d_broadcast(void* buf, int64_t count, DType dtype, int root) override {
    ncclComm_t c = comm();
    TWINKLE_NCCL(nccl().Broadcast(buf, buf, static_cast<size_t>(count), nccl_type(dtype), root, c, stream_));
    wait();
  }
  void d_send(const void* buf, int64_t count, DType dtype, int peer, int) override {
    ncclComm_t c = comm();
    if (count == 0) return;
    TWINKLE_NCCL(nccl().Send(buf, static_cast<size_t>(count), nccl_type(dtype), peer, c, stream_));
    wait();
  }
  void d_recv(void* buf, int64_t count, DType dtype, int peer, int) override {
    ncclComm_t c = comm();
    if (count == 0) return;
    TWINKLE_NCCL(nccl().Recv(buf, static_cast<size_t>(count), nccl_type(dtype), peer, c, stream_));
    wait();
  }
  // The non-blocking forms: the NCCL stream waits (an event) for the compute stream's work so far, runs
  // the collective and records the work's event; the host waits for nothing.
  std::unique_ptr<CommWork> d_iall_reduce(float* buf, int64_t count) override {
    auto w = start();
    TWINKLE_NCCL(nccl().AllReduce(buf, buf, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_, stream_));
    return finish(std::move(w));
  }
  std::unique_ptr<CommWork> d_ireduce_scatter(float* buf, int64_t count) override {
    auto w = start();
    float* mine = buf + rank() * count;  // NCCL's in-place form, then the block to the front (disjoint)
    TWINKLE_NCCL(nccl().ReduceScatter(buf, mine, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_, stream_));
    if (rank() != 0)
      TWINKLE_CUDA_CHECK_GROUP(cudaMemcpyAsync(buf, mine, static_cast<size_t>(count) * 4, cudaMemcpyDeviceToDevice,
                                               stream_),
                               name());
    return finish(std::move(w));
  }
  std::unique_ptr<CommWork> d_iall_gather(float* buf, int64_t count) override {
    auto w = start();
    TWINKLE_NCCL(nccl().AllGather(buf + rank() * count, buf, static_cast<size_t>(count), ncclFloat32, comm_, stream_));
    return finish(std::move(w));
  }

  void d_batch_send_recv(const std::vector<P2pOp>& ops, DType dtype) override {
    ncclComm_t c = comm();
    TWINKLE_NCCL(nccl().GroupStart());
    for (const P2pOp& o : ops) {
      if (o.send)
        TWINKLE_NCCL(nccl().Send(o.buf, static_cast<size_t>(o.count), nccl_type(dtype), o.peer, c, stream_));
      else
        TWINKLE_NCCL(nccl().Recv(o.buf, static_cast<size_t>(o.count), nccl_type(dtype), o.peer, c, stream_));
    }
    TWINKLE_NCCL(nccl().GroupEnd());
    wait();
  }

  // The exchange on the NCCL stream after the compute stream's queued work; the compute stream waits for it
  // at CommWork::wait (ring attention's K/V hop runs while the block's attention kernels run).
  std::unique_ptr<CommWork> d_ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype) override {
    auto w = start();
    TWINKLE_NCCL(nccl().GroupStart());
    for (const P2pOp& o : ops) {
      if (o.send)
        TWINKLE_NCCL(nccl().Send(o.buf, static_cast<size_t>(o.count), nccl_type(dtype), o.peer, comm_, stream_));
      else
        TWINKLE_NCCL(nccl().Recv(o.buf, static_cast<size_t>(o.count), nccl_type(dtype), o.peer, comm_, stream_));
    }
    TWINKLE_NCCL(nccl().GroupEnd());
    return finish(std::move(w));
  }

  void d_send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count, int src,
                   DType dtype, int) override {
    ncclComm_t c = comm();
    TWINKLE_NCCL(nccl().GroupStart());
    if (send_count > 0) TWINKLE_NCCL(nccl().Send(send_buf, static_cast<size_t>(send_count), nccl_type(dtype), dest, c, stream_));
    if (recv_count > 0) TWINKLE_NCCL(nccl().Recv(recv_buf, static_cast<size_t>(recv_count), nccl_type(dtype), src, c, stream_));
    TWINKLE_NCCL(nccl().GroupEnd());
    wait();
  }

 private:
  // Created at the first device collective, which every member calls: rank 0's ncclUniqueId
  // travels over the host (MPI) group, then ncclCommInitRank on the current device.
  ncclComm_t comm() {
    if (comm_) return comm_;
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank() == 0) TWINKLE_NCCL(nccl().GetUniqueId(&id));
    static_assert(sizeof(ncclUniqueId) % 4 == 0, "ncclUniqueId is broadcast as int32 words");
    host_->broadcast(&id, static_cast<int64_t>(sizeof id / 4), DType::I32, 0);
    TWINKLE_CUDA_CHECK_GROUP(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), name());
    TWINKLE_NCCL(nccl().CommInitRank(&comm_, size(), id, rank()));
    return comm_;
  }
  void wait() { TWINKLE_CUDA_CHECK_GROUP(cudaStreamSynchronize(stream_), name()); }
  // The NCCL stream after the compute stream's queued work (an event between them).
  std::unique_ptr<NcclWork> start() {
    comm();
    const cudaStream_t compute = compute_stream();
    auto w = std::make_unique<NcclWork>(name(), compute);
    Event ready(name());
    TWINKLE_CUDA_CHECK_GROUP(cudaEventRecord(ready.e, compute), name());
    TWINKLE_CUDA_CHECK_GROUP(cudaStreamWaitEvent(stream_, ready.e, 0), name());
    return w;
  }
  std::unique_ptr<CommWork> finish(std::unique_ptr<NcclWork> w) {
    TWINKLE_CUDA_CHECK_GROUP(cudaEventRecord(w->done(), stream_), name());
    return w;
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<ProcessGroup> host) {
  return std::make_shared<NcclProcessGroup>(std::move(host));
}

bool nccl_available(std::string* why) { return nccl_api(why) != nullptr; }

#else  // no nccl.h in this build: device buffers are staged through the host group

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<ProcessGroup> host) {
  return make_staged_group(std::move(host));
}

bool nccl_available(std::string* why) {
  if (why) *why = "this build has no nccl.h";
  return false;
}

#endif

}  // namespace twinkle::dist
