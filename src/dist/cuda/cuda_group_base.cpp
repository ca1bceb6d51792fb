// CudaGroupBase: host fall-through, size-1 device copies, argument checks and byte counts shared by
// the NCCL and the host-staged groups (twinkle/dist/nccl_process_group.h).
#include "cuda_group_base.h"

#include <algorithm>
#include <cstring>

#include "twinkle/core/device_allocator.h"

namespace twinkle::dist {

bool is_cuda_pointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error of a plain host pointer
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

std::string device_comm_name(DeviceComm m) { return m == DeviceComm::Nccl ? "nccl" : "host-staged"; }

namespace cuda_detail {

CudaGroupBase::CudaGroupBase(std::shared_ptr<ProcessGroup> host) : host_(std::move(host)) {
  check(host_ != nullptr, "CUDA process group: no host group to wrap");
}

Where CudaGroupBase::where(const char* call, std::initializer_list<const void*> bufs) const {
  int dev = 0, hostn = 0;
  for (const void* b : bufs) {
    if (b == nullptr) continue;
    if (is_cuda_pointer(b)) ++dev;
    else ++hostn;
  }
  check(dev == 0 || hostn == 0, "process group '" + name() + "': " + call +
                                    " mixes host and device buffers (pass both on the GPU or both in host memory)");
  return dev > 0 ? Where::Device : Where::Host;
}

cudaStream_t CudaGroupBase::compute_stream() {
  return has_device_allocator(Device::CUDA) ? static_cast<cudaStream_t>(device_allocator(Device::CUDA).stream())
                                            : nullptr;
}

void CudaGroupBase::sync_device() const { TWINKLE_CUDA_CHECK_GROUP(cudaDeviceSynchronize(), name()); }

void CudaGroupBase::d2d(void* dst, const void* src, int64_t bytes) const {
  if (bytes <= 0 || dst == src) return;
  TWINKLE_CUDA_CHECK_GROUP(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice), name());
  sync_device();  // a device-to-device cudaMemcpy does not wait on the host
}

namespace {
void check_reducible(const std::string& g, DType dtype) {
  check(dtype == DType::F32 || dtype == DType::I32 || dtype == DType::I64,
        "process group '" + g + "': all_reduce of dtype " + dtype_name(dtype) +
            " is not supported (F32, I32, I64; reduce bf16/f16 in f32)");
}
}  // namespace

void CudaGroupBase::all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
  if (where("all_reduce", {buf}) == Where::Host) return on_host([&](ProcessGroup& h) { h.all_reduce(buf, count, dtype, op); });
  const int64_t bytes = comm_bytes(count, dtype);
  check_reducible(name(), dtype);
  if (size() == 1 || count == 0) return;
  sync_device();
  d_all_reduce(buf, count, dtype, op);
  bytes_sent_ += 2 * (size() - 1) * bytes / size();
}

void CudaGroupBase::all_reduce_f64(double* buf, int64_t count, ReduceOp op) {
  if (where("all_reduce_f64", {buf}) == Where::Host) return on_host([&](ProcessGroup& h) { h.all_reduce_f64(buf, count, op); });
  check(count >= 0, "process group '" + name() + "': all_reduce_f64 negative count");
  if (size() == 1 || count == 0) return;
  // F64 on the device: reduce as raw doubles through the I64 path is wrong; do it on the host.
  std::vector<double> h(static_cast<size_t>(count));
  sync_device();
  TWINKLE_CUDA_CHECK_GROUP(cudaMemcpy(h.data(), buf, static_cast<size_t>(count) * 8, cudaMemcpyDeviceToHost), name());
  on_host([&](ProcessGroup& g) { g.all_reduce_f64(h.data(), count, op); });
  TWINKLE_CUDA_CHECK_GROUP(cudaMemcpy(buf, h.data(), static_cast<size_t>(count) * 8, cudaMemcpyHostToDevice), name());
  sync_device();
}

void CudaGroupBase::all_gather(const void* send, void* recv, int64_t count, DType dtype) {
  if (where("all_gather", {send, recv}) == Where::Host) return on_host([&](ProcessGroup& h) { h.all_gather(send, recv, count, dtype); });
  const int64_t bytes = comm_bytes(count, dtype);
  if (size() == 1) {
    sync_device();
    return d2d(recv, send, bytes);
  }
  sync_device();
  d_all_gather(send, recv, count, dtype);
  bytes_sent_ += (size() - 1) * bytes;
}

void CudaGroupBase::reduce_scatter(const float* send, float* recv, int64_t count) {
  if (where("reduce_scatter", {send, recv}) == Where::Host) return on_host([&](ProcessGroup& h) { h.reduce_scatter(send, recv, count); });
  const int64_t bytes = comm_bytes(count, DType::F32);
  if (size() == 1) {
    sync_device();
    return d2d(recv, send, bytes);
  }
  sync_device();
  d_reduce_scatter(send, recv, count);
  bytes_sent_ += (size() - 1) * bytes;
}

// The three non-blocking collectives: host buffers go to the host group's own (its bytes counted here
// too); device buffers to the d_i* version unless there is nothing to exchange, counting `device_bytes`.
template <class Host, class Dev>
std::unique_ptr<CommWork> CudaGroupBase::start_nonblocking(const char* call, float* buf, int64_t count,
                                                           int64_t device_bytes, Host&& host, Dev&& dev) {
  if (where(call, {buf}) == Where::Host) {
    const int64_t b0 = host_->bytes_sent();
    auto w = host(*host_);
    bytes_sent_ += host_->bytes_sent() - b0;
    return w;
  }
  if (size() == 1 || count == 0) return completed_work();
  auto w = dev();
  bytes_sent_ += device_bytes;
  return w;
}

std::unique_ptr<CommWork> CudaGroupBase::iall_reduce(float* buf, int64_t count) {
  const int64_t bytes = comm_bytes(count, DType::F32);
  return start_nonblocking(
      "iall_reduce", buf, count, 2 * (size() - 1) * bytes / size(),
      [&](ProcessGroup& h) { return h.iall_reduce(buf, count); }, [&] { return d_iall_reduce(buf, count); });
}

std::unique_ptr<CommWork> CudaGroupBase::ireduce_scatter(float* buf, int64_t count) {
  const int64_t bytes = comm_bytes(count, DType::F32);
  return start_nonblocking(
      "ireduce_scatter", buf, count, (size() - 1) * bytes,
      [&](ProcessGroup& h) { return h.ireduce_scatter(buf, count); }, [&] { return d_ireduce_scatter(buf, count); });
}

std::unique_ptr<CommWork> CudaGroupBase::iall_gather(float* buf, int64_t count) {
  const int64_t bytes = comm_bytes(count, DType::F32);
  return start_nonblocking(
      "iall_gather", buf, count, (size() - 1) * bytes,
      [&](ProcessGroup& h) { return h.iall_gather(buf, count); }, [&] { return d_iall_gather(buf, count); });
}

std::unique_ptr<CommWork> CudaGroupBase::d_iall_reduce(float* buf, int64_t count) {
  sync_device();
  d_all_reduce(buf, count, DType::F32, ReduceOp::Sum);
  return completed_work();
}
std::unique_ptr<CommWork> CudaGroupBase::d_ireduce_scatter(float* buf, int64_t count) {
  sync_device();
  d_reduce_scatter(buf, buf, count);
  return completed_work();
}
std::unique_ptr<CommWork> CudaGroupBase::d_iall_gather(float* buf, int64_t count) {
  sync_device();
  d_all_gather(buf + static_cast<int64_t>(rank()) * count, buf, count, DType::F32);
  return completed_work();
}

void CudaGroupBase::all_to_all_v(const void* send, const std::vector<int64_t>& sc, const std::vector<int64_t>& sd,
                                 void* recv, const std::vector<int64_t>& rc, const std::vector<int64_t>& rd,
                                 DType dtype) {
  if (where("all_to_all_v", {send, recv}) == Where::Host)
    return on_host([&](ProcessGroup& h) { h.all_to_all_v(send, sc, sd, recv, rc, rd, dtype); });
  const auto n = static_cast<size_t>(size());
  check(sc.size() == n && sd.size() == n && rc.size() == n && rd.size() == n,
        "process group '" + name() + "': all_to_all_v needs " + std::to_string(n) +
            " counts and displacements per direction");
  int64_t sent = 0;
  for (size_t i = 0; i < n; ++i) {
    check(sc[i] >= 0 && sd[i] >= 0 && rc[i] >= 0 && rd[i] >= 0,
          "process group '" + name() + "': all_to_all_v negative count or displacement for peer " + std::to_string(i));
    if (static_cast<int>(i) != rank()) sent += sc[i];
  }
  const int me = rank();
  check(sc[static_cast<size_t>(me)] == rc[static_cast<size_t>(me)],
        "process group '" + name() + "': all_to_all_v send count " + std::to_string(sc[static_cast<size_t>(me)]) +
            " != recv count " + std::to_string(rc[static_cast<size_t>(me)]) + " for rank " + std::to_string(me));
  sync_device();
  if (size() == 1) {
    const size_t es = dtype_size(dtype);
    return d2d(static_cast<char*>(recv) + rd[0] * static_cast<int64_t>(es),
               static_cast<const char*>(send) + sd[0] * static_cast<int64_t>(es), comm_bytes(sc[0], dtype));
  }
  d_all_to_all_v(send, sc, sd, recv, rc, rd, dtype);
  bytes_sent_ += comm_bytes(sent, dtype);
}

void CudaGroupBase::broadcast(void* buf, int64_t count, DType dtype, int root) {
  if (where("broadcast", {buf}) == Where::Host) return on_host([&](ProcessGroup& h) { h.broadcast(buf, count, dtype, root); });
  const int64_t bytes = comm_bytes(count, dtype);
  check(root >= 0 && root < size(), "process group '" + name() + "': broadcast root " + std::to_string(root) +
                                        " outside [0, " + std::to_string(size()) + ")");
  if (size() == 1 || count == 0) return;
  sync_device();
  d_broadcast(buf, count, dtype, root);
  if (rank() == root) bytes_sent_ += bytes;
}

void CudaGroupBase::send(const void* buf, int64_t count, DType dtype, int peer, int tag) {
  if (where("send", {buf}) == Where::Host) return on_host([&](ProcessGroup& h) { h.send(buf, count, dtype, peer, tag); });
  const int64_t bytes = comm_bytes(count, dtype);
  check(peer >= 0 && peer < size() && peer != rank(), "process group '" + name() + "': send to peer " +
                                                          std::to_string(peer) + " (rank " + std::to_string(rank()) +
                                                          " of " + std::to_string(size()) + "; use send_recv for self)");
  sync_device();
  d_send(buf, count, dtype, peer, tag);
  bytes_sent_ += bytes;
}

void CudaGroupBase::recv(void* buf, int64_t count, DType dtype, int peer, int tag) {
  if (where("recv", {buf}) == Where::Host) return on_host([&](ProcessGroup& h) { h.recv(buf, count, dtype, peer, tag); });
  comm_bytes(count, dtype);
  check(peer >= 0 && peer < size() && peer != rank(), "process group '" + name() + "': recv from peer " +
                                                          std::to_string(peer) + " (rank " + std::to_string(rank()) +
                                                          " of " + std::to_string(size()) + "; use send_recv for self)");
  sync_device();
  d_recv(buf, count, dtype, peer, tag);
}

void CudaGroupBase::send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count,
                              int src, DType dtype, int tag) {
  const bool do_send = dest != -1 && send_count > 0, do_recv = src != -1 && recv_count > 0;
  if (where("send_recv", {do_send ? send_buf : nullptr, do_recv ? recv_buf : nullptr}) == Where::Host)
    return on_host([&](ProcessGroup& h) { h.send_recv(send_buf, send_count, dest, recv_buf, recv_count, src, dtype, tag); });
  const int64_t sb = comm_bytes(send_count, dtype), rb = comm_bytes(recv_count, dtype);
  check((dest >= -1 && dest < size()) && (src >= -1 && src < size()),
        "process group '" + name() + "': send_recv peers dest=" + std::to_string(dest) + " src=" +
            std::to_string(src) + " outside [0, " + std::to_string(size()) + ") (or -1 for none)");
  if (!do_send && !do_recv) return;
  sync_device();
  if ((do_send && dest == rank()) || (do_recv && src == rank())) {
    check(do_send && do_recv && dest == rank() && src == rank() && sb == rb,
          "process group '" + name() + "': send_recv to self needs matching halves (send " +
              std::to_string(do_send ? send_count : 0) + " elements, receive " + std::to_string(do_recv ? recv_count : 0) +
              ")");
    d2d(recv_buf, send_buf, sb);
    if (size() > 1) bytes_sent_ += sb;  // the size-1 local group counts nothing
    return;
  }
  d_send_recv(send_buf, do_send ? send_count : 0, dest, recv_buf, do_recv ? recv_count : 0, src, dtype, tag);
  if (do_send) bytes_sent_ += sb;
}

std::vector<P2pOp> CudaGroupBase::ordered_device_ops(const std::vector<P2pOp>& ops, DType dtype,
                                                     int64_t* sent) const {
  *sent = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& o = ops[i];
    const int64_t b = comm_bytes(o.count, dtype);
    check(o.count > 0 && o.peer >= 0 && o.peer < size() && o.peer != rank() && o.tag >= 0 && o.tag <= 32767,
          "process group '" + name() + "': batch_send_recv op " + std::to_string(i) + " (count " + std::to_string(o.count) +
              ", peer " + std::to_string(o.peer) + ", tag " + std::to_string(o.tag) + ") needs count > 0, a peer in [0, " +
              std::to_string(size()) + ") other than this rank and a tag in [0, 32767]");
    for (size_t j = 0; j < i; ++j)
      check(!(ops[j].send == o.send && ops[j].peer == o.peer && ops[j].tag == o.tag),
            "process group '" + name() + "': batch_send_recv has two " + (o.send ? "sends to" : "receives from") +
                " peer " + std::to_string(o.peer) + " with tag " + std::to_string(o.tag));
    if (o.send) *sent += b;
  }
  std::vector<P2pOp> ordered = ops;  // an untagged library pairs each peer's messages in issue order
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const P2pOp& a, const P2pOp& b) { return a.tag != b.tag ? a.tag < b.tag : (a.send && !b.send); });
  return ordered;
}

namespace {
// Host or device for every op of a batch (all must agree).
bool device_ops(const std::vector<P2pOp>& ops, const std::string& group) {
  int dev = 0;
  for (const P2pOp& o : ops) dev += is_cuda_pointer(o.buf) ? 1 : 0;
  check(dev == 0 || dev == static_cast<int>(ops.size()),
        "process group '" + group + "': batch_send_recv mixes host and device buffers (pass all on the GPU or all in host memory)");
  return dev > 0;
}
}  // namespace

void CudaGroupBase::batch_send_recv(const std::vector<P2pOp>& ops, DType dtype) {
  if (ops.empty()) return;
  if (!device_ops(ops, name())) return on_host([&](ProcessGroup& h) { h.batch_send_recv(ops, dtype); });
  int64_t sent = 0;
  const std::vector<P2pOp> ordered = ordered_device_ops(ops, dtype, &sent);
  sync_device();
  d_batch_send_recv(ordered, dtype);
  bytes_sent_ += sent;
}

std::unique_ptr<CommWork> CudaGroupBase::ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype) {
  if (ops.empty()) return completed_work();
  if (!device_ops(ops, name())) {
    const int64_t b0 = host_->bytes_sent();
    auto w = host_->ibatch_send_recv(ops, dtype);
    bytes_sent_ += host_->bytes_sent() - b0;
    return w;
  }
  int64_t sent = 0;
  const std::vector<P2pOp> ordered = ordered_device_ops(ops, dtype, &sent);
  auto w = d_ibatch_send_recv(ordered, dtype);
  bytes_sent_ += sent;
  return w;
}

std::unique_ptr<CommWork> CudaGroupBase::d_ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype) {
  sync_device();
  d_batch_send_recv(ops, dtype);
  return completed_work();
}

}  // namespace cuda_detail
}  // namespace twinkle::dist
