#include "twinkle/parallel/pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace twinkle::parallel {

namespace {
constexpr int kTagFwd = 1101;
constexpr int kTagBwd = 1102;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

PipelineTimes run_1f1b(dist::ProcessGroup& pp, int m, const PipelineStage& st, bool forward_only) {
  PipelineTimes times;
  const int p = pp.size(), s = pp.rank();
  const bool first = s == 0, last = s == p - 1;
  std::vector<float> host_fwd, host_bwd;
  // Receive buffers: the stage's own (device memory) when it gives them, else host vectors.
  auto buffer = [&](int which, int64_t elems) -> float* {
    if (st.recv_buffer) return st.recv_buffer(which, elems);
    std::vector<float>& v = which == 0 ? host_fwd : host_bwd;
    v.resize(static_cast<size_t>(elems));
    return v.data();
  };
  auto timed_compute = [&](auto&& fn) {
    auto t0 = Clock::now();
    fn();
    times.compute_s += since(t0);
  };
  auto recv_forward = [&](int mb) -> const float* {
    if (first) return nullptr;
    auto t0 = Clock::now();
    const int64_t n = st.hidden_elems(mb);
    float* buf = buffer(0, n);
    pp.recv(buf, n, DType::F32, s - 1, kTagFwd);
    times.comm_s += since(t0);
    return buf;
  };
  auto send_forward = [&](int mb) {
    if (last) return;
    auto t0 = Clock::now();
    pp.send(st.output(mb), st.hidden_elems(mb), DType::F32, s + 1, kTagFwd);
    times.comm_s += since(t0);
  };
  auto recv_backward = [&](int mb) -> const float* {
    if (last) return nullptr;
    auto t0 = Clock::now();
    const int64_t n = st.hidden_elems(mb);
    float* buf = buffer(1, n);
    pp.recv(buf, n, DType::F32, s + 1, kTagBwd);
    times.comm_s += since(t0);
    return buf;
  };
  auto send_backward = [&](int mb, const float* d) {
    if (first) return;
    auto t0 = Clock::now();
    pp.send(d, st.hidden_elems(mb), DType::F32, s - 1, kTagBwd);
    times.comm_s += since(t0);
  };

  if (forward_only) {
    for (int i = 0; i < m; ++i) {
      const float* in = recv_forward(i);
      timed_compute([&] { st.forward(i, in); });
      send_forward(i);
    }
    return times;
  }

  const int warmup = std::min(p - s - 1, m);
  const int remaining = m - warmup;
  for (int i = 0; i < warmup; ++i) {
    const float* in = recv_forward(i);
    timed_compute([&] { st.forward(i, in); });
    send_forward(i);
  }
  const float* in = remaining > 0 ? recv_forward(warmup) : nullptr;
  for (int i = 0; i < remaining; ++i) {
    const int fmb = warmup + i, bmb = i;
    timed_compute([&] { st.forward(fmb, in); });
    const float* dout = nullptr;
    if (!last) {
      // send_forward_recv_backward
      auto t0 = Clock::now();
      const int64_t n = st.hidden_elems(bmb);
      float* buf = buffer(1, n);
      pp.send_recv(st.output(fmb), st.hidden_elems(fmb), s + 1, buf, n, s + 1, DType::F32, kTagFwd);
      times.comm_s += since(t0);
      dout = buf;
    }
    const float* din = nullptr;
    timed_compute([&] { din = st.backward(bmb, dout); });
    if (i == remaining - 1) {
      send_backward(bmb, din);
    } else if (!first) {
      // send_backward_recv_forward
      auto t0 = Clock::now();
      const int64_t n = st.hidden_elems(fmb + 1);
      float* buf = buffer(0, n);
      pp.send_recv(din, st.hidden_elems(bmb), s - 1, buf, n, s - 1, DType::F32, kTagFwd);
      times.comm_s += since(t0);
      in = buf;
    } else {
      in = nullptr;
    }
  }
  for (int i = remaining; i < m; ++i) {
    const float* dout = recv_backward(i);
    const float* din = nullptr;
    timed_compute([&] { din = st.backward(i, dout); });
    send_backward(i, din);
  }
  return times;
}

}  // namespace twinkle::parallel
