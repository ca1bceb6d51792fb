// Every ProcessGroup operation over MPI on the world group and on the tp / dp sub-groups
// of a tp=2 mesh (run on 2, 4 and 8 ranks). Expected values are closed-form functions of
// the group ranks (integers, exact in f32), computed here independently of the library.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "mpi_check.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"

using twinkle::DType;
using twinkle::dist::ProcessGroup;
using twinkle::dist::ReduceOp;

static float val(int r, int64_t k) { return float((r + 1) * 1000 + (k % 500)); }

static void suite(ProcessGroup& g) {
  const int n = g.size(), r = g.rank();
  const std::string tag = "[" + g.name() + " n=" + std::to_string(n) + "] ";
  auto expect_bytes = [&](int64_t before, int64_t want, const char* op) {
    MPI_CHECK(g.bytes_sent() - before == want, tag << op << " bytes_sent delta " << g.bytes_sent() - before
                                                   << " want " << want);
  };

  // all_reduce f32 sum / max / min (odd count, several chunks of the MPI algorithm)
  for (int64_t count : {int64_t(1), int64_t(1001), int64_t(1) << 20}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      std::vector<float> buf(count);
      for (int64_t k = 0; k < count; ++k) buf[k] = val(r, k);
      int64_t b0 = g.bytes_sent();
      g.all_reduce(buf.data(), count, op);
      expect_bytes(b0, 2 * (n - 1) * count * 4 / n, "all_reduce");
      int64_t bad = 0;
      for (int64_t k = 0; k < count; ++k) {
        float want = op == ReduceOp::Sum ? float(1000 * n * (n + 1) / 2 + n * (k % 500))
                     : op == ReduceOp::Max ? val(n - 1, k)
                                           : val(0, k);
        if (buf[k] != want) ++bad;
      }
      MPI_CHECK(bad == 0, tag << "all_reduce f32 op " << int(op) << " count " << count << ": " << bad << " wrong");
    }
  }
  // all_reduce i32 / i64 / f64
  {
    std::vector<int32_t> a = {r, -r, 7};
    g.all_reduce(a.data(), 3, DType::I32, ReduceOp::Sum);
    MPI_CHECK(a[0] == n * (n - 1) / 2 && a[1] == -n * (n - 1) / 2 && a[2] == 7 * n, tag << "all_reduce i32");
    std::vector<int64_t> b = {int64_t(r) << 40, r};
    g.all_reduce(b.data(), 2, ReduceOp::Max);
    MPI_CHECK(b[0] == (int64_t(n - 1) << 40) && b[1] == n - 1, tag << "all_reduce i64 max");
    std::vector<double> d = {0.1 * (r + 1), 1e300 * (r % 2 ? -1 : 1)};
    g.all_reduce_f64(d.data(), 1, ReduceOp::Sum);
    MPI_CHECK(std::fabs(d[0] - 0.1 * n * (n + 1) / 2) < 1e-12, tag << "all_reduce_f64 " << d[0]);
    g.all_reduce_f64(d.data() + 1, 1, ReduceOp::Min);
    MPI_CHECK(d[1] == (n > 1 ? -1e300 : 1e300), tag << "all_reduce_f64 min");
    bool threw = false;
    uint16_t h[2] = {1, 2};
    try {
      g.all_reduce(h, 2, DType::BF16);
    } catch (const twinkle::Error&) {
      threw = true;
    }
    MPI_CHECK(threw, tag << "bf16 all_reduce must throw");
  }
  // all_gather f32 / i64 / bf16, out of place and in place
  {
    const int64_t c = 37;
    std::vector<float> s(c), out(c * n, -1);
    for (int64_t k = 0; k < c; ++k) s[k] = val(r, k);
    int64_t b0 = g.bytes_sent();
    g.all_gather(s.data(), out.data(), c, DType::F32);
    expect_bytes(b0, (n - 1) * c * 4, "all_gather");
    int64_t bad = 0;
    for (int i = 0; i < n; ++i)
      for (int64_t k = 0; k < c; ++k) bad += out[i * c + k] != val(i, k);
    MPI_CHECK(bad == 0, tag << "all_gather f32");
    std::vector<int64_t> inpl(3 * n, -1);
    for (int k = 0; k < 3; ++k) inpl[r * 3 + k] = int64_t(r) * 10 + k;
    g.all_gather(inpl.data() + r * 3, inpl.data(), 3, DType::I64);
    bad = 0;
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < 3; ++k) bad += inpl[i * 3 + k] != int64_t(i) * 10 + k;
    MPI_CHECK(bad == 0, tag << "all_gather i64 in place");
    uint16_t hs[2] = {uint16_t(0x3f80 + r), uint16_t(0xbf80 + r)};
    std::vector<uint16_t> ho(2 * n);
    g.all_gather(hs, ho.data(), 2, DType::BF16);
    bad = 0;
    for (int i = 0; i < n; ++i) bad += ho[2 * i] != 0x3f80 + i || ho[2 * i + 1] != 0xbf80 + i;
    MPI_CHECK(bad == 0, tag << "all_gather bf16");
  }
  // reduce_scatter out of place and in place
  {
    const int64_t c = 513;
    std::vector<float> s(c * n), out(c, -1);
    for (int i = 0; i < n; ++i)
      for (int64_t k = 0; k < c; ++k) s[i * c + k] = float((r + 1) * (i + 1) + k % 3);
    int64_t b0 = g.bytes_sent();
    g.reduce_scatter(s.data(), out.data(), c);
    expect_bytes(b0, (n - 1) * c * 4, "reduce_scatter");
    int64_t bad = 0;
    for (int64_t k = 0; k < c; ++k) bad += out[k] != float((r + 1) * n * (n + 1) / 2 + n * (k % 3));
    MPI_CHECK(bad == 0, tag << "reduce_scatter");
    g.reduce_scatter(s.data(), s.data(), c);
    bad = 0;
    for (int64_t k = 0; k < c; ++k) bad += s[k] != out[k];
    MPI_CHECK(bad == 0, tag << "reduce_scatter in place");
  }
  // all_to_all_v: rank i sends cnt(i,j) = (i + 2j) % 3 elements to j (zeros included),
  // values i*100 + j*10 + t, with a one-element gap between peers' blocks.
  {
    auto cnt = [](int i, int j) { return int64_t((i + 2 * j) % 3); };
    std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
    int64_t so = 0, ro = 0, sent_other = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = cnt(r, j);
      sd[j] = so;
      so += sc[j] + 1;
      rc[j] = cnt(j, r);
      rd[j] = ro;
      ro += rc[j] + 1;
      if (j != r) sent_other += sc[j];
    }
    std::vector<int64_t> s(so, -5), out(ro, -7);
    for (int j = 0; j < n; ++j)
      for (int64_t t = 0; t < sc[j]; ++t) s[sd[j] + t] = int64_t(r) * 100 + j * 10 + t;
    int64_t b0 = g.bytes_sent();
    g.all_to_all_v(s.data(), sc, sd, out.data(), rc, rd, DType::I64);
    expect_bytes(b0, sent_other * 8, "all_to_all_v");
    int64_t bad = 0;
    for (int j = 0; j < n; ++j) {
      for (int64_t t = 0; t < rc[j]; ++t) bad += out[rd[j] + t] != int64_t(j) * 100 + r * 10 + t;
      bad += out[rd[j] + rc[j]] != -7;  // the gap is untouched
    }
    MPI_CHECK(bad == 0, tag << "all_to_all_v");
    bool threw = false;
    try {
      g.all_to_all_v(s.data(), {1}, {0}, out.data(), {1}, {0}, DType::I64);
    } catch (const twinkle::Error&) {
      threw = true;
    }
    MPI_CHECK(threw || n == 1, tag << "all_to_all_v with wrong count vectors must throw");
  }
  // broadcast from every root
  for (int root = 0; root < n; ++root) {
    std::vector<int32_t> buf(100, -1);
    if (r == root)
      for (int k = 0; k < 100; ++k) buf[k] = root * 1000 + k;
    int64_t b0 = g.bytes_sent();
    g.broadcast(buf.data(), 100, DType::I32, root);
    expect_bytes(b0, r == root ? 400 : 0, "broadcast");
    int64_t bad = 0;
    for (int k = 0; k < 100; ++k) bad += buf[k] != root * 1000 + k;
    MPI_CHECK(bad == 0, tag << "broadcast root " << root);
  }
  if (n == 1) return;
  // send / recv around the ring, two tags received in reverse order
  {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<float> a(16, float(r)), b(16, float(r + 100)), ra(16), rb(16);
    auto do_send = [&] {
      g.send(a.data(), 16, DType::F32, next, 1);
      g.send(b.data(), 16, DType::F32, next, 2);
    };
    auto do_recv = [&] {
      g.recv(rb.data(), 16, DType::F32, prev, 2);
      g.recv(ra.data(), 16, DType::F32, prev, 1);
    };
    int64_t b0 = g.bytes_sent();
    if (r % 2 == 0) {
      do_send();
      do_recv();
    } else {
      do_recv();
      do_send();
    }
    expect_bytes(b0, 2 * 16 * 4, "send");
    MPI_CHECK(ra[5] == float(prev) && rb[15] == float(prev + 100), tag << "send/recv tags");
  }
  // send_recv: a ring shift of 1 MiB per rank (rendezvous-sized: blocking sends would deadlock)
  {
    const int64_t c = 1 << 18;
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<float> s(c, float(r)), out(c, -1);
    int64_t b0 = g.bytes_sent();
    g.send_recv(s.data(), c, next, out.data(), c, prev, DType::F32, 3);
    expect_bytes(b0, c * 4, "send_recv");
    MPI_CHECK(out[0] == float(prev) && out[c - 1] == float(prev), tag << "send_recv ring");
    // pipeline style: first stage receives nothing, last sends nothing
    std::fill(out.begin(), out.end(), -1.f);
    g.send_recv(s.data(), r == n - 1 ? 0 : 10, r == n - 1 ? -1 : r + 1, out.data(), 10, r == 0 ? -1 : r - 1,
                DType::F32, 4);
    MPI_CHECK(r == 0 ? out[0] == -1.f : out[9] == float(r - 1), tag << "send_recv pipeline");
  }
  // ibatch_send_recv: the ring shift started, the buffers untouched while this rank "computes" (reads its
  // send buffer), then wait(); bytes counted at the start; a receive of another size reported by wait()
  if (n > 1) {
    const int64_t c = 1 << 18;
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<float> s(c, float(r)), out(c, -1);
    int64_t b0 = g.bytes_sent();
    auto w = g.ibatch_send_recv({{true, s.data(), c, next, 5}, {false, out.data(), c, prev, 5}}, DType::F32);
    expect_bytes(b0, c * 4, "ibatch_send_recv (at the start)");
    double acc = 0;
    for (int64_t i = 0; i < c; ++i) acc += s[static_cast<size_t>(i)];  // reading a send buffer in flight is allowed
    MPI_CHECK(acc == double(r) * double(c), tag << "send buffer unchanged");
    (void)w->test();
    w->wait();
    MPI_CHECK(w->test(), tag << "test() after wait()");
    MPI_CHECK(out[0] == float(prev) && out[c - 1] == float(prev), tag << "ibatch_send_recv ring");
    {
      float x[4] = {1, 2, 3, 4}, y[4] = {};
      bool threw = false;
      auto bad = g.ibatch_send_recv({{true, x, r == 0 ? 2 : 4, next, 6}, {false, y, 4, prev, 6}}, DType::F32);
      try {
        bad->wait();
      } catch (const twinkle::Error& e) {
        threw = std::string(e.what()).find("expected 4 elements but the message had 2") != std::string::npos;
      }
      MPI_CHECK(threw == (prev == 0), tag << "ibatch_send_recv: a shorter message must be reported by wait()");
    }
  }
  // recv of a message shorter than announced -> twinkle::Error on the receiver only
  {
    float x[5] = {1, 2, 3, 4, 5};
    bool threw = false;
    if (r == 0) g.send(x, 3, DType::F32, 1, 9);
    if (r == 1) {
      try {
        g.recv(x, 5, DType::F32, 0, 9);
      } catch (const twinkle::Error& e) {
        threw = std::string(e.what()).find("expected 5 elements but the message had 3") != std::string::npos;
      }
      MPI_CHECK(threw, tag << "short message must throw");
    }
    bool peer_threw = false;
    try {
      g.send(x, 1, DType::F32, n, 0);
    } catch (const twinkle::Error&) {
      peer_threw = true;
    }
    MPI_CHECK(peer_threw, tag << "peer out of range must throw");
  }
  g.barrier();
}

static int body(int, char**) {
  int world = twinkle::world_size();
  twinkle::MeshSizes s;
  s.tp = world >= 2 ? 2 : 1;
  s.dp = world / s.tp;
  twinkle::InitOptions o;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(s);
  twinkle::initialize(o);
  auto& st = twinkle::parallel_state();
  suite(*st.world);
  suite(*st.tp);
  suite(*st.dp);
  // counters are per group and resettable
  st.world->reset_bytes_sent();
  MPI_CHECK(st.world->bytes_sent() == 0, "reset_bytes_sent");
  int fails = twinkle_test::failures();
  st.world->all_reduce(&fails, 1, DType::I32);
  if (twinkle::world_rank() == 0)
    std::cout << (fails == 0 ? "mpi_collectives OK" : "mpi_collectives FAILED") << " on " << world << " ranks"
              << std::endl;
  return fails == 0 ? 0 : 1;
}

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
