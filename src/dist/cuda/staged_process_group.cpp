// StagedProcessGroup: device buffers copied to host memory, through the wrapped (MPI) group's
// collective, and back (twinkle/dist/nccl_process_group.h). For ranks that share one GPU, which
// NCCL refuses in one communicator. The staging buffers of the blocking calls grow and are reused
// across calls; a non-blocking call owns its staging buffer until it completes.
#include <memory>
#include <vector>

#include "cuda_group_base.h"

namespace twinkle::dist {
namespace {

using cuda_detail::CudaGroupBase;

// A non-blocking staged collective: the host group's work on `host`, then bytes [off, off + bytes) of it
// copied back to `dst` on the compute stream (queued, in stream order: the host does not wait for it). The
// host buffer is released once the copy is queued: a host-to-device cudaMemcpyAsync from pageable memory
// has taken the bytes when it returns (the CUDA runtime's "API synchronization behavior": it stages them,
// synchronizing with the stream where it must). Pinned staging would need the buffer kept until an event.
class StagedWork final : public CommWork {
 public:
  StagedWork(std::string group, std::vector<char> host, std::unique_ptr<CommWork> mpi, void* dst, int64_t off,
             int64_t bytes, cudaStream_t stream)
      : group_(std::move(group)), host_(std::move(host)), mpi_(std::move(mpi)), dst_(dst), off_(off), bytes_(bytes),
        stream_(stream) {}
  ~StagedWork() override {
    if (!uploaded_) mpi_.reset();  // the host request completes (MpiWork waits); nothing is copied back
  }
  bool test() override {
    if (uploaded_) return true;
    if (!mpi_->test()) return false;
    upload();
    return true;
  }
  void wait() override {
    if (uploaded_) return;
    mpi_->wait();
    upload();
  }

 private:
  void upload() {
    uploaded_ = true;
    TWINKLE_CUDA_CHECK_GROUP(
        cudaMemcpyAsync(dst_, host_.data() + off_, static_cast<size_t>(bytes_), cudaMemcpyHostToDevice, stream_),
        group_);
    std::vector<char>().swap(host_);
  }
  std::string group_;
  std::vector<char> host_;
  std::unique_ptr<CommWork> mpi_;
  void* dst_;
  int64_t off_, bytes_;
  cudaStream_t stream_;
  bool uploaded_ = false;
};

class StagedProcessGroup final : public CudaGroupBase {
 public:
  using CudaGroupBase::CudaGroupBase;

 protected:
  void d_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    const int64_t b = comm_bytes(count, dtype);
    char* h = stage(a_, b);
    down(h, buf, b);
    host_->all_reduce(h, count, dtype, op);
    up(buf, h, b);
  }
  void d_all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    const int64_t b = comm_bytes(count, dtype);
    char* hr = stage(a_, b * size());
    const bool in_place = send == static_cast<const char*>(recv) + b * rank();
    char* hs = in_place ? hr + b * rank() : stage(b_, b);
    down(hs, send, b);
    host_->all_gather(hs, hr, count, dtype);
    up(recv, hr, b * size());
  }
  void d_reduce_scatter(const float* send, float* recv, int64_t count) override {
    const int64_t b = comm_bytes(count, DType::F32);
    char* hs = stage(a_, b * size());
    down(hs, send, b * size());
    if (send == recv) {
      host_->reduce_scatter(reinterpret_cast<float*>(hs), reinterpret_cast<float*>(hs), count);
      up(recv, hs, b);
      return;
    }
    char* hr = stage(b_, b);
    host_->reduce_scatter(reinterpret_cast<const float*>(hs), reinterpret_cast<float*>(hr), count);
    up(recv, hr, b);
  }
  void d_all_to_all_v(const void* send, const std::vector<int64_t>& sc, const std::vector<int64_t>& sd, void* recv,
                      const std::vector<int64_t>& rc, const std::vector<int64_t>& rd, DType dtype) override {
    const auto es = static_cast<int64_t>(dtype_size(dtype));
    int64_t send_end = 0, recv_end = 0;
    for (size_t i = 0; i < sc.size(); ++i) {
      send_end = std::max(send_end, sd[i] + sc[i]);
      recv_end = std::max(recv_end, rd[i] + rc[i]);
    }
    char* hs = stage(a_, send_end * es);
    char* hr = stage(b_, recv_end * es);
    // Only the counted blocks travel; the gaps between them stay untouched on the device.
    for (size_t i = 0; i < sc.size(); ++i) down(hs + sd[i] * es, static_cast<const char*>(send) + sd[i] * es, sc[i] * es);
    host_->all_to_all_v(hs, sc, sd, hr, rc, rd, dtype);
    for (size_t i = 0; i < rc.size(); ++i) up(static_cast<char*>(recv) + rd[i] * es, hr + rd[i] * es, rc[i] * es);
  }
  void d_broadcast(void* buf, int64_t count, DType dtype, int root) override {
    const int64_t b = comm_bytes(count, dtype);
    char* h = stage(a_, b);
    if (rank() == root) down(h, buf, b);
    host_->broadcast(h, count, dtype, root);
    if (rank() != root) up(buf, h, b);
  }
  void d_send(const void* buf, int64_t count, DType dtype, int peer, int tag) override {
    const int64_t b = comm_bytes(count, dtype);
    char* h = stage(a_, b);
    down(h, buf, b);
    host_->send(h, count, dtype, peer, tag);
  }
  void d_recv(void* buf, int64_t count, DType dtype, int peer, int tag) override {
    const int64_t b = comm_bytes(count, dtype);
    char* h = stage(a_, b);
    host_->recv(h, count, dtype, peer, tag);
    up(buf, h, b);
  }
  // The non-blocking forms: the device bytes come down on the compute stream (a device-to-host copy into
  // pageable memory waits for the work queued before it, as the host must have the bytes to send them),
  // the host group's non-blocking collective runs on them, and completion queues the copy back.
  std::unique_ptr<CommWork> d_iall_reduce(float* buf, int64_t count) override {
    const int64_t b = count * 4;
    std::vector<char> h(static_cast<size_t>(b));
    down_on_stream(h.data(), buf, b);
    auto mpi = host_->iall_reduce(reinterpret_cast<float*>(h.data()), count);
    return std::make_unique<StagedWork>(name(), std::move(h), std::move(mpi), buf, 0, b, compute_stream());
  }
  std::unique_ptr<CommWork> d_ireduce_scatter(float* buf, int64_t count) override {
    const int64_t b = count * 4;
    std::vector<char> h(static_cast<size_t>(b * size()));
    down_on_stream(h.data(), buf, b * size());
    auto mpi = host_->ireduce_scatter(reinterpret_cast<float*>(h.data()), count);
    return std::make_unique<StagedWork>(name(), std::move(h), std::move(mpi), buf, 0, b, compute_stream());
  }
  std::unique_ptr<CommWork> d_iall_gather(float* buf, int64_t count) override {
    const int64_t b = count * 4, mine = b * rank();
    std::vector<char> h(static_cast<size_t>(b * size()));
    down_on_stream(h.data() + mine, reinterpret_cast<const char*>(buf) + mine, b);
    auto mpi = host_->iall_gather(reinterpret_cast<float*>(h.data()), count);
    return std::make_unique<StagedWork>(name(), std::move(h), std::move(mpi), buf, 0, b * size(), compute_stream());
  }

  // Every send staged to host memory, the host group's batch, every receive copied up.
  void d_batch_send_recv(const std::vector<P2pOp>& ops, DType dtype) override {
    std::vector<std::vector<char>> h(ops.size());
    std::vector<P2pOp> host = ops;
    for (size_t i = 0; i < ops.size(); ++i) {
      h[i].resize(static_cast<size_t>(comm_bytes(ops[i].count, dtype)));
      host[i].buf = h[i].data();
      if (ops[i].send) down(h[i].data(), ops[i].buf, static_cast<int64_t>(h[i].size()));
    }
    host_->batch_send_recv(host, dtype);
    for (size_t i = 0; i < ops.size(); ++i)
      if (!ops[i].send) up(ops[i].buf, h[i].data(), static_cast<int64_t>(h[i].size()));
  }

  void d_send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count, int src,
                   DType dtype, int tag) override {
    const int64_t sb = comm_bytes(send_count, dtype), rb = comm_bytes(recv_count, dtype);
    char* hs = stage(a_, sb);
    char* hr = stage(b_, rb);
    if (sb > 0) down(hs, send_buf, sb);
    host_->send_recv(hs, send_count, send_count > 0 ? dest : -1, hr, recv_count, recv_count > 0 ? src : -1, dtype, tag);
    if (rb > 0) up(recv_buf, hr, rb);
  }

 private:
  static char* stage(std::vector<char>& v, int64_t bytes) {
    if (static_cast<int64_t>(v.size()) < bytes) v.resize(static_cast<size_t>(bytes + bytes / 4 + 64));
    return v.data();
  }
  void down(void* h, const void* d, int64_t bytes) const {
    if (bytes > 0) TWINKLE_CUDA_CHECK_GROUP(cudaMemcpy(h, d, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost), name());
  }
  // The device bytes in host memory `h` once it returns (MPI reads them next): the copy on the compute
  // stream, then a synchronize of that stream (a pageable D2H copy already waits; the synchronize says so).
  void down_on_stream(void* h, const void* d, int64_t bytes) const {
    if (bytes <= 0) return;
    TWINKLE_CUDA_CHECK_GROUP(
        cudaMemcpyAsync(h, d, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, compute_stream()), name());
    TWINKLE_CUDA_CHECK_GROUP(cudaStreamSynchronize(compute_stream()), name());
  }
  void up(void* d, const void* h, int64_t bytes) const {
    if (bytes <= 0) return;
    TWINKLE_CUDA_CHECK_GROUP(cudaMemcpy(d, h, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), name());
    // from pageable memory the DMA may still be in flight on the legacy stream; the backend's
    // (non-blocking) stream must see the bytes
    sync_device();
  }
  std::vector<char> a_, b_;  // reused staging buffers (send side / receive side)
};

}  // namespace

std::shared_ptr<ProcessGroup> make_staged_group(std::shared_ptr<ProcessGroup> host) {
  return std::make_shared<StagedProcessGroup>(std::move(host));
}

}  // namespace twinkle::dist
