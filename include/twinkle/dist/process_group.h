// twinkle/dist/process_group.h — collective communication over a group of ranks.
//
// The interface the parallel layers use. MpiProcessGroup (dist/mpi_process_group.h)
// implements it over an MPI communicator; a size-1 group (LocalProcessGroup) makes
// every collective a no-op so single-process code runs the same path. NCCL (and an
// NPU collective library) implement the same interface in their backends.
// All collectives must be called by every rank of the group in the same order. The plain ones
// are blocking; iall_reduce / ireduce_scatter / iall_gather start a collective and return a
// CommWork to test or wait on (MPI's non-blocking collectives, MPI-3 §5.12; the gradient
// buckets of the distributed optimizer overlap them with the backward and forward passes, as
// Megatron-core's param_and_grad_buffer.py does with async_op=True). Buffers are host memory
// for the MPI implementation.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "twinkle/core/dtype.h"

namespace twinkle::dist {

enum class ReduceOp { Sum, Max, Min };

/// A collective in flight (an MPI_Request of a non-blocking collective). Its buffer must not be
/// touched until test() returned true or wait() returned. Destroying an unfinished one waits for
/// it (errors then ignored). Not copyable.
class CommWork {
 public:
  CommWork() = default;
  CommWork(const CommWork&) = delete;
  CommWork& operator=(const CommWork&) = delete;
  virtual ~CommWork() = default;
  /// Lets the library progress the collective (OpenMPI moves non-blocking collectives only inside
  /// MPI calls) and returns true once it is complete (MPI_Test). Throws twinkle::Error naming the
  /// group when the collective failed. Cheap once complete.
  virtual bool test() = 0;
  /// Blocks until the collective is complete (MPI_Wait); throws twinkle::Error on failure. Device
  /// buffers (the CUDA groups, twinkle/dist/nccl_process_group.h): completion means the result is
  /// ordered before later work on the backend's stream; the host may return before the device has it,
  /// so host reads go through that stream (Tensor::to / DeviceAllocator::copy), never the legacy one.
  virtual void wait() = 0;
};

/// One message of a batched point-to-point exchange (ProcessGroup::batch_send_recv).
struct P2pOp {
  bool send = false;    ///< true: send buf[0 : count) to `peer`; false: receive exactly `count` elements into it
  void* buf = nullptr;  ///< host memory (MPI groups) or device memory (the CUDA groups); untouched until the call returns
  int64_t count = 0;    ///< elements (> 0)
  int peer = 0;         ///< group rank, not this rank
  int tag = 0;          ///< [0, 32767]: separates concurrent streams (activations vs gradients)
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  /// This process's rank inside the group, 0..size()-1.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Global (world) ranks of the members, in group-rank order.
  virtual const std::vector<int>& global_ranks() const = 0;
  /// Name for logs and errors ("tp", "dp-cp", ...).
  virtual const std::string& name() const = 0;

  /// In-place all-reduce of `count` elements of `dtype` (F32, I32, I64; F64 via all_reduce_f64;
  /// BF16/F16 throw twinkle::Error: reduce in f32). Sum/Max/Min as MPI_SUM/MAX/MIN.
  virtual void all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op = ReduceOp::Sum) = 0;
  /// In-place all-reduce of doubles (loss sums, squared norms).
  virtual void all_reduce_f64(double* buf, int64_t count, ReduceOp op = ReduceOp::Sum) = 0;
  /// recv[size()*count] = concat over ranks of send[count] (rank order). In place when
  /// send == recv + rank()*count elements (MPI_IN_PLACE); otherwise the buffers must not overlap.
  virtual void all_gather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  /// recv[count] = sum over ranks of send[rank()*count : (rank()+1)*count] (f32 only).
  /// In place when send == recv (the input fills recv[0 : size()*count], the result lands
  /// in recv[0 : count]; MPI_IN_PLACE of MPI_Reduce_scatter_block).
  virtual void reduce_scatter(const float* send, float* recv, int64_t count) = 0;
  /// Non-blocking, in place, f32 sum (MPI_Iallreduce with MPI_IN_PLACE): buf[count] becomes the
  /// sum over ranks once the returned work completes. Counted in bytes_sent() when started, as
  /// all_reduce. The default implementation (LocalProcessGroup) runs the blocking all_reduce and
  /// returns a completed work; the MPI group and the CUDA groups have their own (for device
  /// buffers ordered on the backend's stream, CommWork::wait).
  virtual std::unique_ptr<CommWork> iall_reduce(float* buf, int64_t count);
  /// Non-blocking, in place reduce-scatter (MPI_Ireduce_scatter_block with MPI_IN_PLACE):
  /// buf[size()*count] holds this rank's input; once complete buf[0 : count] holds the sum over
  /// ranks of their block rank() (the rest of buf is undefined). Counted as reduce_scatter.
  /// Default: the blocking reduce_scatter(buf, buf, count).
  virtual std::unique_ptr<CommWork> ireduce_scatter(float* buf, int64_t count);
  /// Non-blocking, in place all-gather (MPI_Iallgather with MPI_IN_PLACE): this rank's block is
  /// buf[rank()*count : +count]; once complete buf[size()*count] holds every rank's block in rank
  /// order. Counted as all_gather. Default: the blocking all_gather in place.
  virtual std::unique_ptr<CommWork> iall_gather(float* buf, int64_t count);
  /// All-to-all with per-peer counts and displacements in elements (vectors of size()
  /// entries each, else twinkle::Error): send[send_displs[j] : +send_counts[j]] goes to
  /// rank j and lands in its recv[recv_displs[me] : +recv_counts[me]]. Counts may be 0;
  /// send and recv must not overlap (MPI_Alltoallv).
  virtual void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_displs, void* recv,
                            const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                            DType dtype) = 0;
  /// Broadcast `count` elements from group rank `root`.
  virtual void broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  /// Point-to-point (group ranks). `tag` separates concurrent streams (pipeline activations vs grads).
  virtual void send(const void* buf, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual void recv(void* buf, int64_t count, DType dtype, int peer, int tag) = 0;
  virtual void barrier() = 0;
  /// Combined send to `dest` and receive from `src` (MPI_Sendrecv): the pipeline
  /// schedule's send_forward_recv_backward / send_backward_recv_forward (Megatron's
  /// batched isend/irecv in p2p_communication.py), which must not deadlock when two
  /// neighbouring stages exchange at the same time. Either count may be 0 (then that half
  /// is skipped: no message at all), and a peer of -1 also skips its half (MPI_PROC_NULL;
  /// the first / last stage). `dest`/`src` may equal rank() (a local copy; the counts must
  /// then agree). The received message must hold exactly recv_count elements (else
  /// twinkle::Error). Counted as send_count bytes sent (0 when skipped). Added by the
  /// lead; implementations must override (the base version throws twinkle::Error).
  virtual void send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count,
                         int src, DType dtype, int tag);

  /// Starts every op of `ops` at once and returns when all are complete (MPI_Isend / MPI_Irecv then
  /// MPI_Waitall; NCCL: ncclSend / ncclRecv inside one group): Megatron-core's batched isend/irecv of
  /// the interleaved pipeline schedule (p2p_communication.py, _batched_p2p_ops), where a rank sends
  /// to and receives from both neighbours of a ring in one exchange, which no sequence of blocking
  /// calls does without deadlock. At most one op per (direction, peer, tag) in one call; a peer sees
  /// the messages of one (source, tag) in the order they were sent (MPI's non-overtaking rule; the
  /// CUDA groups issue each batch in (tag, send-before-receive) order so an untagged library pairs
  /// them alike). Counted as the sends' bytes. Throws twinkle::Error naming the group for a peer
  /// equal to this rank or outside the group, a bad tag or count, a received message of another size,
  /// and, in the base implementation (groups without point-to-point: the one-rank local group), always.
  virtual void batch_send_recv(const std::vector<P2pOp>& ops, DType dtype);
  /// batch_send_recv started and not waited for: the ops' buffers must not be touched (the sends' neither
  /// written, the receives' neither read nor written) until the returned work completes; the argument checks
  /// and the byte count happen at the call, a received message of another size is reported by wait().
  /// Used to overlap an exchange with compute (ring attention's K/V hop during a block's attention: Megatron /
  /// Transformer Engine's context-parallel attention sends the next K/V block while computing this one).
  /// MPI group: MPI_Isend / MPI_Irecv, MPI_Waitall in wait(). CUDA groups with NCCL: the ops inside one NCCL
  /// group on the group's own stream, after the compute stream's work queued so far (an event), and
  /// CommWork::wait makes the compute stream wait for them (no host wait): the exchange runs while kernels
  /// queued in between run. Default (and the staged CUDA group): the blocking batch_send_recv, then a
  /// completed work.
  virtual std::unique_ptr<CommWork> ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype);

  /// Bytes this rank has sent through this group since creation (or reset), counted
  /// with the algorithm-independent model: all-reduce 2(n-1)/n * bytes, all-gather and
  /// reduce-scatter (n-1)/n * total bytes, send = bytes, broadcast root = bytes.
  /// Exactly (integer arithmetic, b = bytes of one rank's buffer):
  ///   all_reduce(count): 2*(n-1)*b/n (floor)    all_gather(count): (n-1)*b
  ///   reduce_scatter(count): (n-1)*b (b = count*4, the output block)
  ///   all_to_all_v: bytes of send_counts to the other ranks (the self block is free)
  ///   broadcast: b on the root, 0 elsewhere    send, send_recv: b    recv, barrier: 0
  int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes_sent() { bytes_sent_ = 0; }

  // typed conveniences
  void all_reduce(float* buf, int64_t n, ReduceOp op = ReduceOp::Sum) { all_reduce(buf, n, DType::F32, op); }
  void all_reduce(int64_t* buf, int64_t n, ReduceOp op = ReduceOp::Sum) { all_reduce(buf, n, DType::I64, op); }

 protected:
  int64_t bytes_sent_ = 0;
};

/// A CommWork that is already complete (what the blocking default implementations return).
std::unique_ptr<CommWork> completed_work();

/// A group of one rank (LocalProcessGroup): all_reduce and barrier are no-ops;
/// all_gather, reduce_scatter, all_to_all_v (counts of size 1) and send_recv to self
/// copy; broadcast needs root 0; send/recv throw twinkle::Error (no peer, even self:
/// a blocking send to oneself would deadlock under MPI). bytes_sent stays 0.
std::shared_ptr<ProcessGroup> make_local_group(const std::string& name = "local", int global_rank = 0);

/// Bytes of `count` elements of `dtype` (throws twinkle::Error for a negative count).
int64_t comm_bytes(int64_t count, DType dtype);

}  // namespace twinkle::dist
