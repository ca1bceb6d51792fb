// Shared part of the CUDA process groups (twinkle/dist/nccl_process_group.h): the wrapped host
// group, pointer classification, host fall-through with byte accounting, size-1 device copies.
#pragma once
#ifdef TWINKLE_CUDA_SHIM  // the host emulation of CUDA for tests without a GPU (tests/cuda/emu/cuda_shim.h)
#include "cuda_shim.h"
#else
#include <cuda_runtime.h>
#endif

#include <memory>
#include <string>
#include <vector>

#include "../../core/cuda_check.h"  // TWINKLE_CUDA_CHECK_GROUP
#include "twinkle/core/error.h"
#include "twinkle/dist/nccl_process_group.h"

namespace twinkle::dist::cuda_detail {

/// Where a call's buffers live. Mixed host/device pairs throw.
enum class Where { Host, Device };

class CudaGroupBase : public ProcessGroup {
 public:
  explicit CudaGroupBase(std::shared_ptr<ProcessGroup> host);
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::vector<int>& global_ranks() const override { return host_->global_ranks(); }
  const std::string& name() const override { return host_->name(); }

  void all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override;
  void all_reduce_f64(double* buf, int64_t count, ReduceOp op) override;
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override;
  void reduce_scatter(const float* send, float* recv, int64_t count) override;
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
                    const std::vector<int64_t>& recv_displs, DType dtype) override;
  void broadcast(void* buf, int64_t count, DType dtype, int root) override;
  void send(const void* buf, int64_t count, DType dtype, int peer, int tag) override;
  void recv(void* buf, int64_t count, DType dtype, int peer, int tag) override;
  /// Host buffers: the host group's. Device buffers: every op checked, the device synchronized,
  /// then d_batch_send_recv with the ops in (tag, sends first) order (ProcessGroup's contract).
  void batch_send_recv(const std::vector<P2pOp>& ops, DType dtype) override;
  /// Host buffers: the host group's (MPI: non-blocking). Device buffers: checked and ordered as
  /// batch_send_recv, then d_ibatch_send_recv (no device synchronize where the group can order the
  /// exchange after the compute stream's queued work itself: NCCL).
  std::unique_ptr<CommWork> ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype) override;
  void send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count, int src,
                 DType dtype, int tag) override;
  void barrier() override { host_->barrier(); }
  /// Non-blocking, in place (ProcessGroup's contract). Host buffers: the host group's own. Device buffers:
  /// the collective starts after the work queued so far on the compute stream (compute_stream()), and
  /// once the returned work has completed (test() true, or wait() returned) its result is ordered before
  /// every later piece of work on that stream: wait() queues the hand-over on the device and returns
  /// without waiting for the device where the group can (NCCL: an event; host-staged: the MPI request
  /// is waited for on the host, the copy back queued on the stream).
  std::unique_ptr<CommWork> iall_reduce(float* buf, int64_t count) override;
  std::unique_ptr<CommWork> ireduce_scatter(float* buf, int64_t count) override;
  std::unique_ptr<CommWork> iall_gather(float* buf, int64_t count) override;

  using ProcessGroup::all_reduce;

 protected:
  // Device versions (size() > 1, every buffer on the device, arguments validated as below).
  virtual void d_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void d_all_gather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  virtual void d_reduce_scatter(const float* send, float* recv, int64_t count) = 0;
  virtual void d_all_to_all_v(const void* send, const std::vector<int64_t>& sc, const std::vector<int64_t>& sd,
                              void* recv, const std::vector<int64_t>& rc, const std::vector<int64_t>& rd,
                              DType dtype) = 0;
  virtual void d_broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  virtual void d_send(const void* buf, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual void d_recv(void* buf, int64_t count, DType dtype, int peer, int tag) = 0;
  /// Either half may be absent (count 0 or peer -1, already normalised to count 0); peers != rank().
  virtual void d_send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count,
                           int src, DType dtype, int tag) = 0;
  /// Batched point-to-point on device buffers (ops validated, non-empty, in (tag, sends first) order).
  virtual void d_batch_send_recv(const std::vector<P2pOp>& ops, DType dtype) = 0;
  /// The non-blocking form (ops as d_batch_send_recv's; semantics as iall_reduce's device case). Default:
  /// a device synchronize, the blocking d_batch_send_recv, a completed work.
  virtual std::unique_ptr<CommWork> d_ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype);
  /// Non-blocking device versions (size() > 1, count > 0, buf on the device; semantics as iall_reduce
  /// above). Defaults: the blocking d_* after a device synchronize, and a completed work.
  virtual std::unique_ptr<CommWork> d_iall_reduce(float* buf, int64_t count);
  virtual std::unique_ptr<CommWork> d_ireduce_scatter(float* buf, int64_t count);
  virtual std::unique_ptr<CommWork> d_iall_gather(float* buf, int64_t count);

  /// The CUDA backend's stream (twinkle/kernels/cuda/runtime.h, reached through Device::CUDA's
  /// DeviceAllocator::stream); the legacy default stream when the backend is not initialised.
  static cudaStream_t compute_stream();

  /// Host or device for the buffers of one call (null / empty buffers are ignored).
  Where where(const char* call, std::initializer_list<const void*> bufs) const;
  /// Waits for all queued device work (the compute stream) before a device collective reads it.
  void sync_device() const;
  void d2d(void* dst, const void* src, int64_t bytes) const;
  /// batch_send_recv's checks of device ops; returns them in (tag, sends first) order and the bytes sent.
  std::vector<P2pOp> ordered_device_ops(const std::vector<P2pOp>& ops, DType dtype, int64_t* sent) const;
  template <class Host, class Dev>
  std::unique_ptr<CommWork> start_nonblocking(const char* call, float* buf, int64_t count, int64_t device_bytes,
                                              Host&& host, Dev&& dev);
  /// Runs f on the host group and adds the bytes it counted to this group's counter.
  template <class F>
  void on_host(F&& f) {
    const int64_t b0 = host_->bytes_sent();
    f(*host_);
    bytes_sent_ += host_->bytes_sent() - b0;
  }

  std::shared_ptr<ProcessGroup> host_;
};

}  // namespace twinkle::dist::cuda_detail
