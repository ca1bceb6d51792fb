// ProcessGroup defaults and LocalProcessGroup (a group of one rank).
#include "twinkle/dist/process_group.h"

#include <cstring>

#include "twinkle/core/error.h"

namespace twinkle::dist {

int64_t comm_bytes(int64_t count, DType dtype) {
  check(count >= 0, "process group: negative element count " + std::to_string(count));
  return count * static_cast<int64_t>(dtype_size(dtype));
}

void ProcessGroup::send_recv(const void*, int64_t, int, void*, int64_t, int, DType, int) {
  throw Error("process group '" + name() + "': send_recv is not implemented by this backend");
}

namespace {

class DoneWork : public CommWork {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace

std::unique_ptr<CommWork> completed_work() { return std::make_unique<DoneWork>(); }

std::unique_ptr<CommWork> ProcessGroup::ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype) {
  batch_send_recv(ops, dtype);
  return completed_work();
}

std::unique_ptr<CommWork> ProcessGroup::iall_reduce(float* buf, int64_t count) {
  all_reduce(buf, count, DType::F32, ReduceOp::Sum);
  return completed_work();
}

std::unique_ptr<CommWork> ProcessGroup::ireduce_scatter(float* buf, int64_t count) {
  reduce_scatter(buf, buf, count);
  return completed_work();
}

std::unique_ptr<CommWork> ProcessGroup::iall_gather(float* buf, int64_t count) {
  all_gather(buf + static_cast<int64_t>(rank()) * count, buf, count, DType::F32);
  return completed_work();
}

namespace {

class LocalProcessGroup : public ProcessGroup {
 public:
  LocalProcessGroup(std::string name, int global_rank) : name_(std::move(name)), ranks_{global_rank} {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  const std::string& name() const override { return name_; }

  void all_reduce(void* buf, int64_t count, DType dtype, ReduceOp) override {
    comm_bytes(count, dtype);
    check(dtype == DType::F32 || dtype == DType::I32 || dtype == DType::I64,
          "process group '" + name_ + "': all_reduce of dtype " + dtype_name(dtype) +
              " is not supported (F32, I32, I64; reduce bf16/f16 in f32)");
    check(count == 0 || buf, "process group '" + name_ + "': all_reduce of a null buffer");
  }
  void all_reduce_f64(double* buf, int64_t count, ReduceOp) override {
    check(count >= 0, "process group '" + name_ + "': all_reduce_f64 negative count");
    check(count == 0 || buf, "process group '" + name_ + "': all_reduce_f64 of a null buffer");
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    copy(send, recv, comm_bytes(count, dtype));
  }
  void reduce_scatter(const float* send, float* recv, int64_t count) override {
    copy(send, recv, comm_bytes(count, DType::F32));
  }
  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                    void* recv, const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                    DType dtype) override {
    check(send_counts.size() == 1 && send_displs.size() == 1 && recv_counts.size() == 1 && recv_displs.size() == 1,
          "process group '" + name_ + "': all_to_all_v counts/displacements must have size() = 1 entries");
    check(send_counts[0] == recv_counts[0], "process group '" + name_ + "': all_to_all_v send count " +
                                                std::to_string(send_counts[0]) + " != recv count " +
                                                std::to_string(recv_counts[0]) + " for rank 0");
    check(send_displs[0] >= 0 && recv_displs[0] >= 0, "process group '" + name_ + "': negative displacement");
    size_t es = dtype_size(dtype);
    copy(static_cast<const char*>(send) + send_displs[0] * es, static_cast<char*>(recv) + recv_displs[0] * es,
         comm_bytes(send_counts[0], dtype));
  }
  void broadcast(void* buf, int64_t count, DType dtype, int root) override {
    comm_bytes(count, dtype);
    check(root == 0, "process group '" + name_ + "': broadcast root " + std::to_string(root) + " outside [0, 1)");
  }
  void send(const void*, int64_t, DType, int peer, int) override {
    throw Error("process group '" + name_ + "' has one rank: send to peer " + std::to_string(peer) +
                " is impossible (use send_recv for a self exchange)");
  }
  void recv(void*, int64_t, DType, int peer, int) override {
    throw Error("process group '" + name_ + "' has one rank: recv from peer " + std::to_string(peer) +
                " is impossible (use send_recv for a self exchange)");
  }
  void send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf, int64_t recv_count, int src,
                 DType dtype, int) override {
    check((dest == 0 || dest == -1) && (src == 0 || src == -1),
          "process group '" + name_ + "': send_recv peers dest=" + std::to_string(dest) + " src=" +
              std::to_string(src) + " outside [0, 1) (or -1 for none)");
    int64_t sb = comm_bytes(send_count, dtype), rb = comm_bytes(recv_count, dtype);
    const bool do_send = dest == 0 && sb > 0, do_recv = src == 0 && rb > 0;
    if (!do_send && !do_recv) return;
    check(do_send && do_recv && sb == rb, "process group '" + name_ + "': send_recv to self needs matching halves (send " +
                                              std::to_string(do_send ? send_count : 0) + " elements, receive " +
                                              std::to_string(do_recv ? recv_count : 0) + ")");
    copy(send_buf, recv_buf, sb);
  }
  void barrier() override {}

 private:
  void copy(const void* src, void* dst, int64_t bytes) {
    if (bytes == 0 || src == dst) return;
    check(src && dst, "process group '" + name_ + "': null buffer");
    std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  std::string name_;
  std::vector<int> ranks_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_local_group(const std::string& name, int global_rank) {
  return std::make_shared<LocalProcessGroup>(name, global_rank);
}

void ProcessGroup::batch_send_recv(const std::vector<P2pOp>& ops, DType) {
  if (ops.empty()) return;
  throw Error("process group '" + name() + "': batched point-to-point (batch_send_recv) is not available on this group (size " +
              std::to_string(size()) + ")");
}

}  // namespace twinkle::dist
