#include "twinkle/parallel/pipeline_interleaved.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <string>

#include "twinkle/core/error.h"

namespace twinkle::parallel {

namespace {
constexpr int kTagFwd = 1111;  // activations, rank r -> r+1 (mod p)
constexpr int kTagBwd = 1112;  // gradients, rank r -> r-1 (mod p)
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::vector<std::pair<int, int>> interleaved_schedule_table(int m, int v, int group) {
  check(m >= 1 && v >= 1 && group >= 1, "interleaved_schedule_table: needs micro-batches, chunks and a group size >= 1");
  std::vector<std::pair<int, int>> t;
  t.reserve(static_cast<size_t>(m) * static_cast<size_t>(v));
  for (int g0 = 0; g0 < m; g0 += group) {
    const int g1 = g0 + group >= m ? m : g0 + group;  // the last group takes the rest
    for (int c = 0; c < v; ++c)
      for (int mb = g0; mb < g1; ++mb) t.emplace_back(mb, c);
  }
  return t;
}

InterleavedCounts interleaved_counts(int p, int r, int m, int v, int group, bool forward_only) {
  InterleavedCounts n;
  n.total = m * v;
  n.warmup = forward_only ? n.total : (p - r - 1) * 2 + (v - 1) * group;
  if (n.warmup >= n.total) {
    n.warmup = n.total;
    n.all_warmup = true;
  }
  n.remaining = n.total - n.warmup;
  return n;
}

std::vector<int> interleaved_peak_slots(int p, int r, int m, int v) {
  const auto table = interleaved_schedule_table(m, v, p);
  const InterleavedCounts n = interleaved_counts(p, r, m, v, p, false);
  std::vector<int> held(static_cast<size_t>(v), 0), peak(static_cast<size_t>(v), 0);
  auto fwd = [&](int k) {
    const size_t c = static_cast<size_t>(table[static_cast<size_t>(k)].second);
    peak[c] = std::max(peak[c], ++held[c]);
  };
  auto bwd = [&](int k) { --held[static_cast<size_t>(v - 1 - table[static_cast<size_t>(k)].second)]; };
  for (int k = 0; k < n.warmup; ++k) fwd(k);
  for (int k = 0; k < n.remaining; ++k) {
    fwd(k + n.warmup);
    bwd(k);
  }
  return peak;
}

void check_interleaved_micro_batches(int m, int p, int v) {
  check(m >= p && m % p == 0,
        "the interleaved pipeline schedule (vpp " + std::to_string(v) + ") needs a number of micro-batches that is a positive "
        "multiple of pp " + std::to_string(p) + " (Megatron-core's rule for micro-batch groups of pp), got " +
            std::to_string(m));
}

PipelineTimes run_interleaved_1f1b(dist::ProcessGroup& pp, int m, int v, const ChunkedPipelineStage& st, bool forward_only) {
  check_interleaved_micro_batches(m, pp.size(), v);
  PipelineTimes times;
  const int p = pp.size(), r = pp.rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  const int group = p;  // Megatron's microbatch_group_size_per_vp_stage default
  const std::vector<std::pair<int, int>> table = interleaved_schedule_table(m, v, group);
  const InterleavedCounts n = interleaved_counts(p, r, m, v, group, forward_only);
  auto chunk_of = [&](int k, bool forward) {
    const int c = table[static_cast<size_t>(k % n.total)].second;
    return forward ? c : v - 1 - c;
  };
  auto mb_of = [&](int k) { return table[static_cast<size_t>(k)].first; };
  const bool first_rank = r == 0, last_rank = r == p - 1;
  auto model_first = [&](int c) { return first_rank && c == 0; };     // no input to receive
  auto model_last = [&](int c) { return last_rank && c == v - 1; };   // the loss: no output to send

  // Received tensors per chunk, in micro-batch order, each in its own buffer until consumed.
  struct Held {
    int index;
    const float* data;
  };
  std::vector<std::deque<Held>> inputs(static_cast<size_t>(v)), grads(static_cast<size_t>(v));
  std::vector<int> recv_fwd_count(static_cast<size_t>(v), 0), recv_bwd_count(static_cast<size_t>(v), 0);
  std::vector<int> free_index[2];
  int next_index[2] = {0, 0};
  std::vector<std::vector<float>> host[2];
  auto acquire = [&](int which, int64_t elems) -> Held {
    int idx;
    if (!free_index[which].empty()) {
      idx = free_index[which].back();
      free_index[which].pop_back();
    } else {
      idx = next_index[which]++;
    }
    if (st.recv_buffer) return {idx, st.recv_buffer(which, elems, idx)};
    auto& h = host[which];
    if (static_cast<int>(h.size()) <= idx) h.resize(static_cast<size_t>(idx) + 1);
    h[static_cast<size_t>(idx)].resize(static_cast<size_t>(elems));
    return {idx, h[static_cast<size_t>(idx)].data()};
  };
  auto release = [&](int which, const Held& h) { free_index[which].push_back(h.index); };

  // Megatron's recv_tensor_from_previous_stage: whether the neighbour sends a tensor after virtual
  // step k and for which chunk it is (forward: from rank r-1; backward: from rank r+1).
  auto recv_plan = [&](int k, bool forward) -> std::pair<bool, int> {
    bool recv = true;
    const bool leading = forward ? first_rank : last_rank;
    const int last_chunk = forward ? v - 1 : 0;
    int c;
    if (leading) {
      if (k < p - 1) {
        recv = false;
        c = chunk_of(k + 1, forward);
      } else {
        c = chunk_of(k - (p - 1), forward);
      }
      if (c == last_chunk) recv = false;
      c += forward ? 1 : -1;
    } else {
      c = chunk_of(k + 1, forward);
    }
    return {recv, c};
  };

  // One exchange with both neighbours: the forward output to rank r+1, the input gradient to rank
  // r-1, the next forward input from rank r-1 into chunk fc, the next output gradient from r+1 into bc.
  struct Out {
    const float* data = nullptr;
    int64_t elems = 0;
  };
  auto exchange = [&](Out fwd_out, Out bwd_out, bool recv_prev, int fc, bool recv_next, int bc) {
    auto t0 = Clock::now();
    std::vector<dist::P2pOp> ops;
    if (fwd_out.data) ops.push_back({true, const_cast<float*>(fwd_out.data), fwd_out.elems, next, kTagFwd});
    if (bwd_out.data) ops.push_back({true, const_cast<float*>(bwd_out.data), bwd_out.elems, prev, kTagBwd});
    Held in{-1, nullptr}, g{-1, nullptr};
    if (recv_prev) {
      const int64_t e = st.hidden_elems(recv_fwd_count[static_cast<size_t>(fc)]++);
      in = acquire(0, e);
      ops.push_back({false, const_cast<float*>(in.data), e, prev, kTagFwd});
    }
    if (recv_next) {
      const int64_t e = st.hidden_elems(recv_bwd_count[static_cast<size_t>(bc)]++);
      g = acquire(1, e);
      ops.push_back({false, const_cast<float*>(g.data), e, next, kTagBwd});
    }
    if (!ops.empty()) pp.batch_send_recv(ops, DType::F32);
    if (recv_prev) inputs[static_cast<size_t>(fc)].push_back(in);
    if (recv_next) grads[static_cast<size_t>(bc)].push_back(g);
    times.comm_s += since(t0);
  };

  auto run_forward = [&](int k) -> Out {
    const int c = chunk_of(k, true), mb = mb_of(k);
    Held in{-1, nullptr};
    if (!model_first(c)) {
      check(!inputs[static_cast<size_t>(c)].empty(), "interleaved schedule: no input received for chunk " +
                                                          std::to_string(c) + " micro-batch " + std::to_string(mb));
      in = inputs[static_cast<size_t>(c)].front();
      inputs[static_cast<size_t>(c)].pop_front();
    }
    auto t0 = Clock::now();
    st.forward(c, mb, in.data);
    times.compute_s += since(t0);
    if (in.data) release(0, in);
    if (model_last(c)) return {};
    return {st.output(c, mb), st.hidden_elems(mb)};
  };
  auto run_backward = [&](int k) -> Out {
    const int c = chunk_of(k, false), mb = mb_of(k);
    Held g{-1, nullptr};
    if (!model_last(c)) {
      check(!grads[static_cast<size_t>(c)].empty(), "interleaved schedule: no gradient received for chunk " +
                                                         std::to_string(c) + " micro-batch " + std::to_string(mb));
      g = grads[static_cast<size_t>(c)].front();
      grads[static_cast<size_t>(c)].pop_front();
    }
    auto t0 = Clock::now();
    const float* din = st.backward(c, mb, g.data);
    times.compute_s += since(t0);
    if (g.data) release(1, g);
    if (model_first(c)) return {};
    return {din, st.hidden_elems(mb)};
  };

  // The first forward input (chunk 0, micro-batch 0) from rank r-1.
  if (!first_rank) exchange({}, {}, true, 0, false, 0);
  for (int k = 0; k < n.warmup; ++k) {
    const Out out = run_forward(k);
    auto [recv_prev, fc] = recv_plan(k, true);
    if (k == n.total - 1) recv_prev = false;
    if (k == n.warmup - 1 && !forward_only && !n.all_warmup)
      exchange(out, {}, recv_prev, fc, !last_rank, v - 1);
    else
      exchange(out, {}, recv_prev, fc, false, 0);
  }
  for (int k = 0; k < n.remaining; ++k) {
    const int fk = k + n.warmup;
    const Out out = run_forward(fk);
    const Out din = run_backward(k);
    auto [recv_prev, fc] = recv_plan(fk, true);
    auto [recv_next, bc] = recv_plan(k, false);
    if (k == n.remaining - 1) recv_prev = false;
    exchange(out, din, recv_prev, fc, recv_next, bc);
  }
  if (!forward_only) {
    if (n.all_warmup && !last_rank) exchange({}, {}, false, 0, true, v - 1);
    for (int k = n.remaining; k < n.total; ++k) {
      const Out din = run_backward(k);
      auto [recv_next, bc] = recv_plan(k, false);
      if (k == n.total - 1) recv_next = false;
      exchange({}, din, false, 0, recv_next, bc);
    }
  }
  return times;
}

}  // namespace twinkle::parallel
