// MpiProcessGroup: ProcessGroup over an MPI communicator (OpenMPI 4.1).
#include "twinkle/dist/mpi_process_group.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "twinkle/core/error.h"
#include "twinkle/dist/comm_watchdog.h"

namespace twinkle::dist {

bool mpi_active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

namespace {

constexpr int64_t kMaxChunk = INT_MAX;

void mpi_check(int rc, const std::string& group, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error("process group '" + group + "': " + call + " failed: " + std::string(msg, len));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::F64: return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;  // moved as raw 16-bit words, never reduced
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

// Runs one blocking MPI call under the collective watchdog (twinkle/dist/comm_watchdog.h).
template <class F>
int watched(const char* op, const std::string& group, int size, F&& call) {
  CommWatch watch(op, group, size);
  return call();
}

int to_int(int64_t v, const std::string& group, const char* what) {
  check(v >= 0, "process group '" + group + "': negative " + what + " " + std::to_string(v));
  check(v <= kMaxChunk, "process group '" + group + "': " + what + " " + std::to_string(v) +
                            " exceeds INT_MAX, the largest count MPI takes");
  return static_cast<int>(v);
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm comm, std::string name, std::vector<int> global_ranks)
    : comm_(comm), name_(std::move(name)), global_ranks_(std::move(global_ranks)) {
  check(comm_ != MPI_COMM_NULL, "process group '" + name_ + "': null communicator");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  check(static_cast<int>(global_ranks_.size()) == size_,
        "process group '" + name_ + "': " + std::to_string(global_ranks_.size()) +
            " global ranks given for a communicator of size " + std::to_string(size_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiProcessGroup::~MpiProcessGroup() {
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && mpi_active()) MPI_Comm_free(&comm_);
}

void MpiProcessGroup::all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
  int64_t bytes = comm_bytes(count, dtype);
  check(dtype == DType::F32 || dtype == DType::I32 || dtype == DType::I64,
        "process group '" + name_ + "': all_reduce of dtype " + dtype_name(dtype) +
            " is not supported (F32, I32, I64; reduce bf16/f16 in f32)");
  size_t es = dtype_size(dtype);
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    mpi_check(watched("MPI_Allreduce", name_, size_,
                      [&] {
                        return MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(buf) + off * es, n, mpi_type(dtype),
                                             mpi_op(op), comm_);
                      }),
              name_, "MPI_Allreduce");
  }
  bytes_sent_ += 2 * (size_ - 1) * bytes / size_;
}

void MpiProcessGroup::all_reduce_f64(double* buf, int64_t count, ReduceOp op) {
  int64_t bytes = count * 8;
  check(count >= 0, "process group '" + name_ + "': all_reduce_f64 negative count");
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    mpi_check(watched("MPI_Allreduce", name_, size_,
                      [&] { return MPI_Allreduce(MPI_IN_PLACE, buf + off, n, MPI_DOUBLE, mpi_op(op), comm_); }),
              name_, "MPI_Allreduce");
  }
  bytes_sent_ += 2 * (size_ - 1) * bytes / size_;
}

void MpiProcessGroup::all_gather(const void* send, void* recv, int64_t count, DType dtype) {
  int64_t bytes = comm_bytes(count, dtype);
  int n = to_int(count, name_, "all_gather count");
  to_int(count * size_, name_, "all_gather total count");
  const void* src = send;
  if (send == static_cast<const char*>(recv) + bytes * rank_) src = MPI_IN_PLACE;
  mpi_check(watched("MPI_Allgather", name_, size_,
                    [&] { return MPI_Allgather(src, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_); }),
            name_, "MPI_Allgather");
  bytes_sent_ += (size_ - 1) * bytes;
}

void MpiProcessGroup::reduce_scatter(const float* send, float* recv, int64_t count) {
  int64_t bytes = comm_bytes(count, DType::F32);
  int n = to_int(count, name_, "reduce_scatter count");
  to_int(count * size_, name_, "reduce_scatter total count");
  const void* src = send == recv ? MPI_IN_PLACE : static_cast<const void*>(send);
  mpi_check(watched("MPI_Reduce_scatter_block", name_, size_,
                    [&] { return MPI_Reduce_scatter_block(src, recv, n, MPI_FLOAT, MPI_SUM, comm_); }),
            name_, "MPI_Reduce_scatter_block");
  bytes_sent_ += (size_ - 1) * bytes;
}

void MpiProcessGroup::all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                                   const std::vector<int64_t>& send_displs, void* recv,
                                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                                   DType dtype) {
  auto sz = static_cast<size_t>(size_);
  check(send_counts.size() == sz && send_displs.size() == sz && recv_counts.size() == sz && recv_displs.size() == sz,
        "process group '" + name_ + "': all_to_all_v needs " + std::to_string(size_) +
            " counts and displacements per direction (got send " + std::to_string(send_counts.size()) + "/" +
            std::to_string(send_displs.size()) + ", recv " + std::to_string(recv_counts.size()) + "/" +
            std::to_string(recv_displs.size()) + ")");
  std::vector<int> sc(sz), sd(sz), rc(sz), rd(sz);
  int64_t sent = 0;
  for (size_t i = 0; i < sz; ++i) {
    sc[i] = to_int(send_counts[i], name_, "all_to_all_v send count");
    sd[i] = to_int(send_displs[i], name_, "all_to_all_v send displacement");
    rc[i] = to_int(recv_counts[i], name_, "all_to_all_v recv count");
    rd[i] = to_int(recv_displs[i], name_, "all_to_all_v recv displacement");
    if (static_cast<int>(i) != rank_) sent += send_counts[i];
  }
  MPI_Datatype t = mpi_type(dtype);
  mpi_check(watched("MPI_Alltoallv", name_, size_,
                    [&] { return MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, comm_); }),
            name_, "MPI_Alltoallv");
  bytes_sent_ += comm_bytes(sent, dtype);
}

void MpiProcessGroup::broadcast(void* buf, int64_t count, DType dtype, int root) {
  int64_t bytes = comm_bytes(count, dtype);
  check(root >= 0 && root < size_, "process group '" + name_ + "': broadcast root " + std::to_string(root) +
                                       " outside [0, " + std::to_string(size_) + ")");
  size_t es = dtype_size(dtype);
  for (int64_t off = 0; off < count; off += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    mpi_check(watched("MPI_Bcast", name_, size_,
                      [&] { return MPI_Bcast(static_cast<char*>(buf) + off * es, n, mpi_type(dtype), root, comm_); }),
              name_, "MPI_Bcast");
  }
  if (rank_ == root) bytes_sent_ += bytes;
}

static void check_peer(const std::string& name, int peer, int size, int tag, const char* what) {
  check(peer >= 0 && peer < size, "process group '" + name + "': " + what + " peer " + std::to_string(peer) +
                                      " outside [0, " + std::to_string(size) + ")");
  check(tag >= 0 && tag <= 32767, "process group '" + name + "': " + what + " tag " + std::to_string(tag) +
                                      " outside [0, 32767] (MPI_TAG_UB guarantee)");
}

void MpiProcessGroup::send(const void* buf, int64_t count, DType dtype, int peer, int tag) {
  int64_t bytes = comm_bytes(count, dtype);
  check_peer(name_, peer, size_, tag, "send");
  check(peer != rank_, "process group '" + name_ + "': blocking send to self (rank " + std::to_string(rank_) +
                           ") would deadlock; use send_recv");
  size_t es = dtype_size(dtype);
  int64_t off = 0;
  do {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    mpi_check(watched("MPI_Send", name_, size_,
                      [&] { return MPI_Send(static_cast<const char*>(buf) + off * es, n, mpi_type(dtype), peer, tag, comm_); }),
              name_, "MPI_Send");
    off += n;
  } while (off < count);
  bytes_sent_ += bytes;
}

void MpiProcessGroup::recv(void* buf, int64_t count, DType dtype, int peer, int tag) {
  comm_bytes(count, dtype);
  check_peer(name_, peer, size_, tag, "recv");
  check(peer != rank_, "process group '" + name_ + "': blocking recv from self (rank " + std::to_string(rank_) +
                           ") would deadlock; use send_recv");
  size_t es = dtype_size(dtype);
  int64_t off = 0;
  do {
    int n = static_cast<int>(std::min(kMaxChunk, count - off));
    MPI_Status st;
    mpi_check(watched("MPI_Recv", name_, size_,
                      [&] { return MPI_Recv(static_cast<char*>(buf) + off * es, n, mpi_type(dtype), peer, tag, comm_, &st); }),
              name_, "MPI_Recv");
    int got = 0;
    MPI_Get_count(&st, mpi_type(dtype), &got);
    check(got == n, "process group '" + name_ + "': recv from peer " + std::to_string(peer) + " tag " +
                        std::to_string(tag) + " expected " + std::to_string(count) + " elements but the message had " +
                        std::to_string(off + got));
    off += n;
  } while (off < count);
}

namespace {

// The requests of one batched exchange (MpiProcessGroup::ibatch_send_recv): MPI_Waitall, then each
// receive's size checked.
class MpiBatchWork : public CommWork {
 public:
  MpiBatchWork(std::string group, int size, std::vector<P2pOp> ops, MPI_Datatype type)
      : group_(std::move(group)), size_(size), ops_(std::move(ops)), type_(type), req_(ops_.size(), MPI_REQUEST_NULL) {}
  ~MpiBatchWork() override {
    if (!done_ && mpi_active()) MPI_Waitall(static_cast<int>(req_.size()), req_.data(), MPI_STATUSES_IGNORE);
  }
  MPI_Request* request(size_t i) { return &req_[i]; }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    std::vector<MPI_Status> st(req_.size());
    mpi_check(MPI_Testall(static_cast<int>(req_.size()), req_.data(), &flag, st.data()), group_, "MPI_Testall");
    if (flag) finish(st);
    return flag != 0;
  }
  void wait() override {
    if (done_) return;
    std::vector<MPI_Status> st(req_.size());
    mpi_check(watched("MPI_Waitall", group_, size_,
                      [&] { return MPI_Waitall(static_cast<int>(req_.size()), req_.data(), st.data()); }),
              group_, "MPI_Waitall");
    finish(st);
  }

 private:
  void finish(const std::vector<MPI_Status>& st) {
    done_ = true;
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (ops_[i].send) continue;
      int got = 0;
      MPI_Get_count(&st[i], type_, &got);
      check(got == ops_[i].count, "process group '" + group_ + "': batch_send_recv from peer " +
                                      std::to_string(ops_[i].peer) + " tag " + std::to_string(ops_[i].tag) +
                                      " expected " + std::to_string(ops_[i].count) +
                                      " elements but the message had " + std::to_string(got));
    }
  }
  std::string group_;
  int size_;
  std::vector<P2pOp> ops_;
  MPI_Datatype type_;
  std::vector<MPI_Request> req_;
  bool done_ = false;
};

}  // namespace

void MpiProcessGroup::batch_send_recv(const std::vector<P2pOp>& ops, DType dtype) {
  if (ops.empty()) return;
  ibatch_send_recv(ops, dtype)->wait();
}

std::unique_ptr<CommWork> MpiProcessGroup::ibatch_send_recv(const std::vector<P2pOp>& ops, DType dtype) {
  if (ops.empty()) return completed_work();
  int64_t sent = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& o = ops[i];
    check(o.count > 0, "process group '" + name_ + "': batch_send_recv op " + std::to_string(i) + " has count " +
                           std::to_string(o.count) + " (must be > 0)");
    check_peer(name_, o.peer, size_, o.tag, "batch_send_recv peer");
    check(o.peer != rank_, "process group '" + name_ + "': batch_send_recv op " + std::to_string(i) +
                               " names this rank (" + std::to_string(rank_) + ") as its peer");
    check(o.tag >= 0 && o.tag <= 32767, "process group '" + name_ + "': batch_send_recv tag " + std::to_string(o.tag) +
                                            " outside [0, 32767]");
    for (size_t j = 0; j < i; ++j)
      check(!(ops[j].send == o.send && ops[j].peer == o.peer && ops[j].tag == o.tag),
            "process group '" + name_ + "': batch_send_recv has two " + (o.send ? "sends to" : "receives from") +
                " peer " + std::to_string(o.peer) + " with tag " + std::to_string(o.tag));
    to_int(o.count, name_, "batch_send_recv count");
  }
  const MPI_Datatype t = mpi_type(dtype);
  auto w = std::make_unique<MpiBatchWork>(name_, size_, ops, t);
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& o = ops[i];
    const int n = to_int(o.count, name_, "batch_send_recv count");
    if (o.send) {
      mpi_check(MPI_Isend(o.buf, n, t, o.peer, o.tag, comm_, w->request(i)), name_, "MPI_Isend");
      sent += comm_bytes(o.count, dtype);
    } else {
      mpi_check(MPI_Irecv(o.buf, n, t, o.peer, o.tag, comm_, w->request(i)), name_, "MPI_Irecv");
    }
  }
  bytes_sent_ += sent;
  return w;
}

void MpiProcessGroup::send_recv(const void* send_buf, int64_t send_count, int dest, void* recv_buf,
                                int64_t recv_count, int src, DType dtype, int tag) {
  int sc = to_int(send_count, name_, "send_recv send count");
  int rc = to_int(recv_count, name_, "send_recv recv count");
  const bool do_send = dest != -1 && sc > 0, do_recv = src != -1 && rc > 0;
  if (dest != -1) check_peer(name_, dest, size_, tag, "send_recv destination");
  if (src != -1) check_peer(name_, src, size_, tag, "send_recv source");
  check(tag >= 0 && tag <= 32767, "process group '" + name_ + "': send_recv tag " + std::to_string(tag) +
                                      " outside [0, 32767]");
  if (!do_send && !do_recv) return;
  MPI_Status st;
  MPI_Datatype t = mpi_type(dtype);
  mpi_check(watched("MPI_Sendrecv", name_, size_,
                    [&] {
                      return MPI_Sendrecv(send_buf, do_send ? sc : 0, t, do_send ? dest : MPI_PROC_NULL, tag, recv_buf,
                                          do_recv ? rc : 0, t, do_recv ? src : MPI_PROC_NULL, tag, comm_, &st);
                    }),
            name_, "MPI_Sendrecv");
  if (do_recv) {
    int got = 0;
    MPI_Get_count(&st, t, &got);
    check(got == rc, "process group '" + name_ + "': send_recv from peer " + std::to_string(src) + " expected " +
                         std::to_string(rc) + " elements but the message had " + std::to_string(got));
  }
  if (do_send) bytes_sent_ += comm_bytes(send_count, dtype);
}

namespace {

// One MPI_Request of a non-blocking collective.
class MpiWork : public CommWork {
 public:
  MpiWork(std::string group, int size, const char* call) : group_(std::move(group)), call_(call), size_(size) {}
  ~MpiWork() override {
    if (req_ != MPI_REQUEST_NULL && mpi_active()) MPI_Wait(&req_, MPI_STATUS_IGNORE);
  }
  MPI_Request* request() { return &req_; }
  bool test() override {
    if (req_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    mpi_check(MPI_Test(&req_, &done, MPI_STATUS_IGNORE), group_, call_);
    return done != 0;
  }
  void wait() override {
    if (req_ == MPI_REQUEST_NULL) return;
    mpi_check(watched(call_, group_, size_, [&] { return MPI_Wait(&req_, MPI_STATUS_IGNORE); }), group_, call_);
  }

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
  std::string group_;
  const char* call_;
  int size_;
};

}  // namespace

std::unique_ptr<CommWork> MpiProcessGroup::iall_reduce(float* buf, int64_t count) {
  const int64_t bytes = comm_bytes(count, DType::F32);
  const int n = to_int(count, name_, "iall_reduce count");
  auto w = std::make_unique<MpiWork>(name_, size_, "MPI_Iallreduce");
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm_, w->request()), name_, "MPI_Iallreduce");
  bytes_sent_ += 2 * (size_ - 1) * bytes / size_;
  return w;
}

std::unique_ptr<CommWork> MpiProcessGroup::ireduce_scatter(float* buf, int64_t count) {
  const int64_t bytes = comm_bytes(count, DType::F32);
  const int n = to_int(count, name_, "ireduce_scatter count");
  to_int(count * size_, name_, "ireduce_scatter total count");
  auto w = std::make_unique<MpiWork>(name_, size_, "MPI_Ireduce_scatter_block");
  mpi_check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm_, w->request()), name_,
            "MPI_Ireduce_scatter_block");
  bytes_sent_ += (size_ - 1) * bytes;
  return w;
}

std::unique_ptr<CommWork> MpiProcessGroup::iall_gather(float* buf, int64_t count) {
  const int64_t bytes = comm_bytes(count, DType::F32);
  const int n = to_int(count, name_, "iall_gather count");
  to_int(count * size_, name_, "iall_gather total count");
  auto w = std::make_unique<MpiWork>(name_, size_, "MPI_Iallgather");
  mpi_check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, n, MPI_FLOAT, comm_, w->request()), name_,
            "MPI_Iallgather");
  bytes_sent_ += (size_ - 1) * bytes;
  return w;
}

void MpiProcessGroup::barrier() {
  mpi_check(watched("MPI_Barrier", name_, size_, [&] { return MPI_Barrier(comm_); }), name_, "MPI_Barrier");
}

std::shared_ptr<ProcessGroup> make_mpi_group(const std::string& name, const std::vector<std::vector<int>>& groups) {
  check(mpi_active(), "make_mpi_group('" + name + "'): MPI is not initialised (call twinkle::initialize under a launcher)");
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int color = MPI_UNDEFINED, key = 0;
  std::vector<char> seen(world, 0);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    check(!groups[gi].empty(), "make_mpi_group('" + name + "'): group " + std::to_string(gi) + " is empty");
    for (size_t k = 0; k < groups[gi].size(); ++k) {
      int r = groups[gi][k];
      check(r >= 0 && r < world, "make_mpi_group('" + name + "'): group " + std::to_string(gi) + " has rank " +
                                     std::to_string(r) + " outside the MPI world [0, " + std::to_string(world) + ")");
      check(!seen[r], "make_mpi_group('" + name + "'): rank " + std::to_string(r) + " appears in two groups");
      seen[r] = 1;
      if (r == me) {
        color = static_cast<int>(gi);
        key = static_cast<int>(k);
      }
    }
  }
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), name, "MPI_Comm_split");
  if (color == MPI_UNDEFINED) return nullptr;
  return std::make_shared<MpiProcessGroup>(comm, name, groups[color]);
}

}  // namespace twinkle::dist
