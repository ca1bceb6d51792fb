// Megatron's per-layer router losses on a split sequence (parallel/moe_router_loss.h): with the
// tokens of a micro-batch split over the ranks of a group (tp under sequence parallelism, cp),
// the aux loss, the z-loss, the router-logit gradients of every token and the router weight
// gradient (summed over the group) equal one process holding all tokens, whatever the split.
// The single-process values use the same class over a size-1 group, whose kernels are checked
// against PyTorch (tests/unit/kernels/torch_ref_moe.cpp: AuxLossPerLayerIsMegatrons, ZLoss).
//
// Usage: moe_aux_check   (mesh tp = world size; uneven shards, padding tokens in two shards)
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/moe_router.h"
#include "twinkle/parallel/moe_router_loss.h"

using namespace twinkle::kernels::cpu;
using std::vector;

namespace {

constexpr int64_t E = 8, K = 2, H = 12;
constexpr double kAux = 0.01, kZ = 1e-3, kGradScale = 0.5;  // grad scale: e.g. 2 micro-batches

struct Result {
  double aux = 0, z = 0;
  vector<float> dlogits, dwg;  // [T, E], [E, H]
};

Result run(twinkle::dist::ProcessGroup& g, const float* x, const float* wg, const uint8_t* mask, int64_t T) {
  Result r;
  vector<float> logits(T * E), probs(T * E), w(T * K), dprobs(T * E, 0.0f), dz(T * E, 0.0f);
  vector<int32_t> sel(T * K);
  linear_forward(x, wg, logits.data(), T, E, H);
  moe_router_forward(logits.data(), probs.data(), sel.data(), w.data(), T, E, K, true);
  twinkle::parallel::PerLayerRouterLoss loss;
  loss.forward(g, probs.data(), sel.data(), logits.data(), mask, T, E, K, kAux, kZ);
  r.aux = loss.aux();
  r.z = loss.z();
  loss.backward(probs.data(), mask, kGradScale, dprobs.data(), dz.data());
  r.dlogits.resize(T * E);
  moe_router_backward(probs.data(), sel.data(), w.data(), nullptr, dprobs.data(), dz.data(), r.dlogits.data(), T, E,
                      K, true);
  r.dwg.assign(E * H, 0.0f);
  linear_backward(x, wg, r.dlogits.data(), nullptr, r.dwg.data(), T, E, H);
  g.all_reduce(r.dwg.data(), E * H);  // the replicated router weight: sum over the shards
  return r;
}

double rel(const float* a, const float* b, int64_t n) {
  double mx = 1e-30, err = 0;
  for (int64_t i = 0; i < n; ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(b[i])));
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return err / mx;
}

int body(int, char**) {
  twinkle::MeshSizes s;
  s.tp = twinkle::world_size();
  s.sequence_parallel = true;
  twinkle::InitOptions o;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(s);
  twinkle::initialize(o);
  auto& st = twinkle::parallel_state();
  auto& tp = *st.tp;
  const int n = tp.size(), me = tp.rank();
  // uneven shards: rank r holds 4 + 2r tokens; the first and the last shard end in padding
  vector<int64_t> len(n), off(n);
  int64_t T = 0;
  for (int r = 0; r < n; ++r) {
    off[r] = T;
    len[r] = 4 + 2 * r;
    T += len[r];
  }
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  vector<float> x(T * H), wg(E * H);
  for (auto& v : x) v = nd(gen);
  for (auto& v : wg) v = 0.5f * nd(gen);
  vector<uint8_t> mask(T, 1);
  mask[off[0] + len[0] - 1] = 0;
  mask[T - 1] = mask[T - 2] = 0;

  auto one = twinkle::dist::make_local_group("single");
  const Result ref = run(*one, x.data(), wg.data(), mask.data(), T);
  const Result got = run(tp, x.data() + off[me] * H, wg.data(), mask.data() + off[me], len[me]);
  MPI_CHECK(std::fabs(got.aux - ref.aux) <= 1e-6 * std::fabs(ref.aux), "aux " << got.aux << " vs " << ref.aux);
  MPI_CHECK(std::fabs(got.z - ref.z) <= 1e-6 * std::fabs(ref.z), "z " << got.z << " vs " << ref.z);
  const double ed = rel(got.dlogits.data(), ref.dlogits.data() + off[me] * E, len[me] * E);
  const double ew = rel(got.dwg.data(), ref.dwg.data(), E * H);
  MPI_CHECK(ed <= 1e-6, "dlogits rel err " << ed);
  MPI_CHECK(ew <= 1e-6, "router weight grad rel err " << ew);
  // (1e-6: the shards' logits come from GEMMs of other row counts, equal to ~1 ulp)
  // the padding tokens get no gradient
  for (int64_t t = 0; t < len[me]; ++t)
    if (!mask[off[me] + t])
      for (int64_t e = 0; e < E; ++e) MPI_CHECK(got.dlogits[t * E + e] == 0.0f, "padding token " << t << " has a gradient");
  if (me == 0)
    twinkle::get_logger().info("per-layer aux " + std::to_string(got.aux) + " z " + std::to_string(got.z) +
                               "; rel err aux " + std::to_string(std::fabs(got.aux - ref.aux) / ref.aux) + " dlogits " + std::to_string(ed) + " router weight grad " + std::to_string(ew));
  int fails = twinkle_test::failures();
  st.world->all_reduce(&fails, 1, twinkle::DType::I32);
  if (st.global_rank == 0)
    std::cout << (fails == 0 ? "moe_aux_check OK " : "moe_aux_check FAILED ") << st.mesh.describe() << std::endl;
  return fails == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
