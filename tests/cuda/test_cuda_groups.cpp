// The CUDA process groups (twinkle/dist/nccl_process_group.h) on device buffers: every collective's
// result against values computed here, host buffers passing through to the wrapped group, and the
// byte counters of process_group.h. One process: the size-1 groups (device copies). Under mpirun
// (-np N): the world group in the mode TWINKLE_CUDA_COMM picks (staged when the ranks share one GPU).
// Labelled `gpu`: without a GPU every rank prints the reason and exits 77 (CTest: skipped).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "twinkle/core/device_allocator.h"
#include "twinkle/dist/nccl_process_group.h"
#include "twinkle/dist/parallel_state.h"
#include "twinkle/kernels/cuda/runtime.h"

using namespace twinkle;

namespace {

int failures = 0;
int me = 0;

#define CHECK_EQ_AT(a, b, what)                                                                                   \
  do {                                                                                                            \
    if (!((a) == (b))) {                                                                                          \
      ++failures;                                                                                                 \
      std::printf("[rank %d] CHECK FAILED %s: got %s expected %s (%s:%d)\n", me, what, std::to_string(a).c_str(), \
                  std::to_string(b).c_str(), __FILE__, __LINE__);                                                 \
    }                                                                                                             \
  } while (0)

template <class T>
Tensor up(const std::vector<T>& v, DType dt) {
  Tensor h = Tensor::zeros({static_cast<int64_t>(v.size())}, dt);
  std::copy(v.begin(), v.end(), static_cast<T*>(h.raw()));
  return h.to(Device::CUDA);
}
template <class T>
std::vector<T> down(const Tensor& d) {
  Tensor h = d.to(Device::CPU);
  const T* p = static_cast<const T*>(h.raw());
  return std::vector<T>(p, p + h.numel());
}

void run(dist::ProcessGroup& g) {
  const int n = g.size(), r = g.rank();
  const int64_t c = 5;
  // all_reduce: f32 sum, i64 max
  {
    std::vector<float> v(c);
    for (int64_t i = 0; i < c; ++i) v[i] = static_cast<float>((r + 1) * (i + 1));
    Tensor d = up(v, DType::F32);
    const int64_t b0 = g.bytes_sent();
    g.all_reduce(d.f32(), c, DType::F32, dist::ReduceOp::Sum);
    CHECK_EQ_AT(g.bytes_sent() - b0, 2 * (n - 1) * c * 4 / n, "all_reduce bytes");
    auto o = down<float>(d);
    for (int64_t i = 0; i < c; ++i) CHECK_EQ_AT(o[i], static_cast<float>(n * (n + 1) / 2 * (i + 1)), "all_reduce sum");
    Tensor m = up(std::vector<int64_t>{r * 10, -r}, DType::I64);
    g.all_reduce(m.raw(), 2, DType::I64, dist::ReduceOp::Max);
    auto mo = down<int64_t>(m);
    CHECK_EQ_AT(mo[0], static_cast<int64_t>((n - 1) * 10), "all_reduce max");
    CHECK_EQ_AT(mo[1], static_cast<int64_t>(0), "all_reduce max");
  }
  // host buffers still go to the wrapped group
  {
    double x = r + 1.0;
    g.all_reduce_f64(&x, 1, dist::ReduceOp::Sum);
    CHECK_EQ_AT(x, n * (n + 1) / 2.0, "host all_reduce_f64");
  }
  // all_gather, out of place and in place
  {
    std::vector<float> s(c);
    for (int64_t i = 0; i < c; ++i) s[i] = static_cast<float>(r * 100 + i);
    Tensor ds = up(s, DType::F32), dr = Tensor::zeros({n * c}, DType::F32, Device::CUDA);
    g.all_gather(ds.f32(), dr.f32(), c, DType::F32);
    auto o = down<float>(dr);
    for (int j = 0; j < n; ++j)
      for (int64_t i = 0; i < c; ++i) CHECK_EQ_AT(o[j * c + i], static_cast<float>(j * 100 + i), "all_gather");
    Tensor ip = Tensor::zeros({n * c}, DType::F32, Device::CUDA);
    ip.narrow(0, r * c, c).copy_(ds);
    g.all_gather(ip.f32() + r * c, ip.f32(), c, DType::F32);
    o = down<float>(ip);
    for (int j = 0; j < n; ++j)
      for (int64_t i = 0; i < c; ++i) CHECK_EQ_AT(o[j * c + i], static_cast<float>(j * 100 + i), "all_gather in place");
  }
  // reduce_scatter, out of place and in place (result at recv[0:c])
  {
    std::vector<float> s(n * c);
    for (int64_t k = 0; k < n * c; ++k) s[k] = static_cast<float>(r + k);
    Tensor ds = up(s, DType::F32), dr = Tensor::zeros({c}, DType::F32, Device::CUDA);
    g.reduce_scatter(ds.f32(), dr.f32(), c);
    auto o = down<float>(dr);
    for (int64_t i = 0; i < c; ++i)
      CHECK_EQ_AT(o[i], static_cast<float>(n * (n - 1) / 2 + n * (r * c + i)), "reduce_scatter");
    g.reduce_scatter(ds.f32(), ds.f32(), c);
    o = down<float>(ds);
    for (int64_t i = 0; i < c; ++i)
      CHECK_EQ_AT(o[i], static_cast<float>(n * (n - 1) / 2 + n * (r * c + i)), "reduce_scatter in place");
  }
  // the non-blocking in-place forms the gradient buckets use (results ordered before later work on the
  // backend's stream, where the download below runs): three in flight at once, completed by test() and wait()
  {
    std::vector<float> v(n * c), mine(n * c, -1.0f);
    for (int64_t k = 0; k < n * c; ++k) v[k] = static_cast<float>(r + k);
    for (int64_t i = 0; i < c; ++i) mine[r * c + i] = static_cast<float>(r * 100 + i);
    Tensor ar = up(std::vector<float>(v.begin(), v.begin() + c), DType::F32), rs = up(v, DType::F32),
           ag = up(mine, DType::F32);
    const int64_t b0 = g.bytes_sent();
    auto w1 = g.iall_reduce(ar.f32(), c);
    auto w2 = g.ireduce_scatter(rs.f32(), c);
    auto w3 = g.iall_gather(ag.f32(), c);
    CHECK_EQ_AT(g.bytes_sent() - b0, 2 * (n - 1) * c * 4 / n + 2 * (n - 1) * c * 4, "non-blocking bytes");
    while (!w1->test()) {
    }
    w2->wait();
    w3->wait();
    CHECK_EQ_AT(w3->test(), true, "a waited work tests complete");
    auto o = down<float>(ar);
    for (int64_t i = 0; i < c; ++i) CHECK_EQ_AT(o[i], static_cast<float>(n * (n - 1) / 2 + n * i), "iall_reduce");
    o = down<float>(rs);
    for (int64_t i = 0; i < c; ++i)
      CHECK_EQ_AT(o[i], static_cast<float>(n * (n - 1) / 2 + n * (r * c + i)), "ireduce_scatter");
    o = down<float>(ag);
    for (int j = 0; j < n; ++j)
      for (int64_t i = 0; i < c; ++i) CHECK_EQ_AT(o[j * c + i], static_cast<float>(j * 100 + i), "iall_gather");
  }
  // broadcast from the last rank
  {
    Tensor d = up(std::vector<int32_t>{r, r + 1, r + 2}, DType::I32);
    g.broadcast(d.raw(), 3, DType::I32, n - 1);
    auto o = down<int32_t>(d);
    for (int i = 0; i < 3; ++i) CHECK_EQ_AT(o[i], n - 1 + i, "broadcast");
  }
  // send_recv around the ring (to self when n = 1)
  {
    Tensor s = up(std::vector<float>{static_cast<float>(r), 7.0f}, DType::F32), d = Tensor::zeros({2}, DType::F32, Device::CUDA);
    g.send_recv(s.f32(), 2, (r + 1) % n, d.f32(), 2, (r + n - 1) % n, DType::F32, 11);
    auto o = down<float>(d);
    CHECK_EQ_AT(o[0], static_cast<float>((r + n - 1) % n), "send_recv");
    CHECK_EQ_AT(o[1], 7.0f, "send_recv");
  }
  // send / recv between ranks 0 and 1
  if (n > 1 && r < 2) {
    Tensor d = up(std::vector<float>{3.0f, 4.0f, static_cast<float>(r)}, DType::F32);
    if (r == 0) g.send(d.f32(), 3, DType::F32, 1, 5);
    else g.recv(d.f32(), 3, DType::F32, 0, 5);
    CHECK_EQ_AT(down<float>(d)[2], 0.0f, "send/recv");
  }
  // all_to_all_v: rank r sends j+1 elements (value 1000r + j) to rank j
  {
    std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
    int64_t so = 0, ro = 0;
    std::vector<float> s;
    for (int j = 0; j < n; ++j) {
      sc[j] = j + 1;
      sd[j] = so;
      so += sc[j];
      for (int64_t k = 0; k < sc[j]; ++k) s.push_back(static_cast<float>(1000 * r + j));
      rc[j] = r + 1;
      rd[j] = ro;
      ro += rc[j];
    }
    Tensor ds = up(s, DType::F32), dr = Tensor::zeros({ro}, DType::F32, Device::CUDA);
    g.all_to_all_v(ds.f32(), sc, sd, dr.f32(), rc, rd, DType::F32);
    auto o = down<float>(dr);
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < rc[j]; ++k) CHECK_EQ_AT(o[rd[j] + k], static_cast<float>(1000 * j + r), "all_to_all_v");
  }
  // a host/device mix is refused by name
  if (n > 1) {
    std::vector<float> h(c);
    Tensor d = Tensor::zeros({n * c}, DType::F32, Device::CUDA);
    bool threw = false;
    try {
      g.all_gather(h.data(), d.f32(), c, DType::F32);
    } catch (const Error& e) {
      threw = std::string(e.what()).find("mixes host and device") != std::string::npos;
    }
    CHECK_EQ_AT(threw, true, "mixed buffers refused");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool mpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
  }
  std::string why;
  if (twinkle::cuda::visible_device_count(&why) == 0) {
    std::printf("SKIPPED: no GPU visible (%s): the CUDA process-group test needs one\n", why.c_str());
    if (mpi) MPI_Finalize();
    return 77;
  }
  int rc = 0;
  try {
    twinkle::cuda::init();
    int world = 1;
    if (mpi) MPI_Comm_size(MPI_COMM_WORLD, &world);
    MeshSizes s;
    s.device_type = "cuda";
    s.dp = world;
    auto ps = dist::make_mpi_state(DeviceMesh::from_sizes(s));
    const dist::DeviceComm mode = dist::attach_cuda_groups(*ps);
    run(*ps->world);
    run(*ps->dp);
    run(*ps->tp);  // size 1: device copies
    if (failures == 0 && me == 0)
      std::printf("cuda_groups OK on %d ranks (%s)\n", world, dist::device_comm_name(mode).c_str());
    rc = failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::printf("[rank %d] CHECK FAILED: %s\n", me, e.what());
    rc = 1;
  }
  std::fflush(stdout);
  if (mpi) {
    if (rc) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
  }
  return rc;
}
