// twinkle/dist/mpi_process_group.h — ProcessGroup over an MPI communicator (OpenMPI 4.1).
//
// Every group is an MPI communicator split collectively from MPI_COMM_WORLD
// (MPI_Comm_split with colour = index of the group containing the caller, key = the
// caller's position in it), so all ranks must create the same groups in the same
// order. Collectives map one-to-one onto MPI calls:
//   all_reduce -> MPI_Allreduce (MPI_IN_PLACE)     all_gather     -> MPI_Allgather
//   reduce_scatter -> MPI_Reduce_scatter_block     all_to_all_v   -> MPI_Alltoallv
//   broadcast -> MPI_Bcast    send/recv -> MPI_Send/MPI_Recv    send_recv -> MPI_Sendrecv
//   iall_reduce -> MPI_Iallreduce    ireduce_scatter -> MPI_Ireduce_scatter_block
//   iall_gather -> MPI_Iallgather    (all in place; CommWork::test/wait -> MPI_Test/MPI_Wait)
// Element counts travel as MPI `int`: all_reduce, broadcast, send and recv split a
// larger buffer into chunks of at most INT_MAX elements; all_gather, reduce_scatter and
// all_to_all_v throw twinkle::Error when a count or displacement exceeds INT_MAX.
// Errors are returned, not fatal (MPI_ERRORS_RETURN on every communicator) and become
// twinkle::Error naming the group and the MPI call; a dead peer still ends the job
// through mpirun.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "twinkle/dist/process_group.h"

namespace twinkle::dist {

class MpiProcessGroup : public ProcessGroup {
 public:
  /// Takes ownership of `comm` (freed with MPI_Comm_free on destruction unless MPI is
  /// already finalised). `global_ranks[i]` is the MPI_COMM_WORLD rank of group rank i;
  /// its size must equal the communicator's size (else twinkle::Error).
  MpiProcessGroup(MPI_Comm comm, std::string name, std::vector<int> global_ranks);
  ~MpiProcessGroup() override;
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  const std::string& name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }

  void all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op = ReduceOp::Sum) override;
  void all_reduce_f64(double* buf, int64_t count, ReduceOp op = ReduceOp::Sum) override;
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override;
  void reduce_scatter(const float* send, float* recv, int64_t count) override;
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
                    const std::vector<int64_t>& recv_displs, DType dtype) override;
  void broadcast(void* buf, int64_t count, DType dtype, int root) override;
  void send(const void* buf, int64_t count, DType dtype, int peer, int tag) override;
  void recv(void* buf, int64_t count, DType dtype, int peer, int tag) override;
  void batch_send_recv(const std::vector<P2pOp>& ops, DType dtype) override;
  std::unique_ptr<CommWork> ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype) override;
  void send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count, int src,
                 DType dtype, int tag) override;
  void barrier() override;
  std::unique_ptr<CommWork> iall_reduce(float* buf, int64_t count) override;
  std::unique_ptr<CommWork> ireduce_scatter(float* buf, int64_t count) override;
  std::unique_ptr<CommWork> iall_gather(float* buf, int64_t count) override;

  using ProcessGroup::all_reduce;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  std::vector<int> global_ranks_;
  int rank_ = 0, size_ = 1;
};

/// Collectively (every rank of MPI_COMM_WORLD must call it, with the same `groups`, in
/// the same order as every other group creation) builds one communicator per group.
/// `groups` lists global ranks in group-rank order; a rank may appear in at most one
/// group (twinkle::Error otherwise, and for ranks outside [0, world)). Returns the
/// caller's group, or nullptr when the caller belongs to none.
std::shared_ptr<ProcessGroup> make_mpi_group(const std::string& name, const std::vector<std::vector<int>>& groups);

/// MPI_Initialized() && !MPI_Finalized().
bool mpi_active();

}  // namespace twinkle::dist
