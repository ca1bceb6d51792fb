// An in-process pipeline group for the schedule tests: p threads stand in for the ranks, and a
// mailbox of buffered messages for MPI's point-to-point (sends never block, receives wait;
// messages of one (source, destination, tag) arrive in order, as MPI's non-overtaking rule).
#pragma once
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/dist/process_group.h"

namespace twinkle::testing {

using twinkle::DType;
using twinkle::check;

// Point-to-point messages between threads; sends are buffered (never block), receives wait.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<char>>> q;  // (src, dst, tag)
};

class ThreadGroup : public dist::ProcessGroup {
 public:
  ThreadGroup(Mailbox& mb, int rank, int size) : mb_(mb), rank_(rank), size_(size) {
    for (int i = 0; i < size; ++i) ranks_.push_back(i);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  const std::string& name() const override { return name_; }
  void all_reduce(void*, int64_t, DType, dist::ReduceOp) override { unused(); }
  void all_reduce_f64(double*, int64_t, dist::ReduceOp) override { unused(); }
  void all_gather(const void*, void*, int64_t, DType) override { unused(); }
  void reduce_scatter(const float*, float*, int64_t) override { unused(); }
  void all_to_all_v(const void*, const std::vector<int64_t>&, const std::vector<int64_t>&, void*,
                    const std::vector<int64_t>&, const std::vector<int64_t>&, DType) override {
    unused();
  }
  void broadcast(void*, int64_t, DType, int) override { unused(); }
  void barrier() override { unused(); }
  void send(const void* buf, int64_t count, DType dt, int peer, int tag) override {
    check(peer >= 0 && peer < size_ && peer != rank_, "ThreadGroup: bad peer");
    std::vector<char> m(static_cast<size_t>(dist::comm_bytes(count, dt)));
    std::memcpy(m.data(), buf, m.size());
    std::lock_guard<std::mutex> l(mb_.mu);
    mb_.q[{rank_, peer, tag}].push_back(std::move(m));
    mb_.cv.notify_all();
  }
  void recv(void* buf, int64_t count, DType dt, int peer, int tag) override {
    std::unique_lock<std::mutex> l(mb_.mu);
    auto& dq = mb_.q[{peer, rank_, tag}];
    mb_.cv.wait(l, [&] { return !dq.empty(); });
    std::vector<char> m = std::move(dq.front());
    dq.pop_front();
    check(static_cast<int64_t>(m.size()) == dist::comm_bytes(count, dt), "ThreadGroup: message size mismatch");
    std::memcpy(buf, m.data(), m.size());
  }
  void send_recv(const void* sbuf, int64_t scount, int dest, void* rbuf, int64_t rcount, int src, DType dt,
                 int tag) override {
    if (dest >= 0 && scount > 0) send(sbuf, scount, dt, dest, tag);
    if (src >= 0 && rcount > 0) recv(rbuf, rcount, dt, src, tag);
  }
  // Sends never block here, so posting every send before any receive is MPI_Waitall's effect.
  void batch_send_recv(const std::vector<dist::P2pOp>& ops, DType dt) override {
    for (const auto& o : ops)
      if (o.send) send(o.buf, o.count, dt, o.peer, o.tag);
    for (const auto& o : ops)
      if (!o.send) recv(o.buf, o.count, dt, o.peer, o.tag);
  }

 private:
  [[noreturn]] static void unused() { throw twinkle::Error("ThreadGroup: collective not used by the pipeline schedules"); }
  Mailbox& mb_;
  int rank_, size_;
  std::vector<int> ranks_;
  std::string name_ = "pp";
};

/// The events of a schedule log joined by spaces ("F0 F1 B0 ..."), for EXPECT_EQ against a hand-written order.
inline std::string joined(const std::vector<std::string>& v) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size(); ++i) o << (i ? " " : "") << v[i];
  return o.str();
}

}  // namespace twinkle::testing
