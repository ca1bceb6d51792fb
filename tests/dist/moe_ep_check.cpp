// Expert parallelism: an MoE block on the EP group (Megatron's alltoall dispatcher,
// parallel/moe_dispatcher.h) equals the single-process block on the same tokens — outputs, input
// gradients, router-logit gradients and every expert weight gradient (ratio 1, not
// doubled), including an expert that receives no tokens, a rank that sends none and a rank whose
// experts receive none.
//
// Usage: moe_ep_check EP   (world size = dp, mesh dp=world, ep=EP; each EP group checks its own
// tokens). The single-process block is the kernel composition router -> sort -> permute ->
// grouped GEMM -> SwiGLU -> grouped GEMM -> combine on all of the group's tokens, the path the
// MoE kernels are verified on against PyTorch (tests/unit/kernels/torch_ref_moe.cpp).
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/kernels/cpu/grouped_gemm.h"
#include "twinkle/kernels/cpu/moe_permute.h"
#include "twinkle/kernels/cpu/moe_router.h"
#include "twinkle/kernels/cpu/swiglu.h"
#include "twinkle/parallel/moe_dispatcher.h"

using namespace twinkle::kernels::cpu;
using std::vector;

namespace {

constexpr int64_t E = 8, K = 2, H = 16, I = 12;

struct Weights {
  vector<float> wg, wu, wd;  // [E, I, H], [E, I, H], [E, H, I]
};

struct BlockOut {
  vector<float> out, dx, dlogits, dwg, dwu, dwd;
};

vector<float> randn(std::mt19937& g, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The expert MLPs on rows grouped by expert (counts [nE]) with weights of experts [e0, e0+nE):
// forward and backward, writing dW into the [nE, ...] slices given.
void experts_fwd_bwd(const float* xin, int64_t R, const int64_t* counts, int64_t nE, const Weights& w, int64_t e0,
                     const float* dy, float* y, float* dxin, float* dwg, float* dwu, float* dwd) {
  vector<float> g(R * I), u(R * I), h(R * I), dh(R * I), dg(R * I), du(R * I);
  grouped_linear_forward(xin, w.wg.data() + e0 * I * H, I * H, counts, nE, g.data(), I, H);
  grouped_linear_forward(xin, w.wu.data() + e0 * I * H, I * H, counts, nE, u.data(), I, H);
  swiglu_forward(g.data(), u.data(), h.data(), R * I);
  grouped_linear_forward(h.data(), w.wd.data() + e0 * H * I, H * I, counts, nE, y, H, I);
  if (!dy) return;
  grouped_linear_backward(h.data(), w.wd.data() + e0 * H * I, H * I, counts, nE, dy, dh.data(), dwd, H, I);
  swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), R * I);
  grouped_linear_backward(xin, w.wg.data() + e0 * I * H, I * H, counts, nE, dg.data(), dxin, dwg, I, H);
  grouped_linear_backward(xin, w.wu.data() + e0 * I * H, I * H, counts, nE, du.data(), dxin, dwu, I, H, true);
}

// Single process: all T tokens, all E experts, no dispatcher.
BlockOut single(const vector<float>& x, const vector<float>& logits, const vector<float>& dout, int64_t T,
                const Weights& w) {
  BlockOut o;
  const int64_t R = T * K;
  vector<float> probs(T * E), tw(T * K), xp(R * H), y(R * H), dy(R * H), dxp(R * H), dtw(T * K);
  vector<int32_t> sel(T * K), ros(R), sor(R);
  vector<int64_t> counts(E);
  moe_router_forward(logits.data(), probs.data(), sel.data(), tw.data(), T, E, K, true);
  moe_sort_by_expert(sel.data(), T, K, E, counts.data(), ros.data(), sor.data());
  moe_permute_forward(x.data(), sor.data(), xp.data(), R, K, H);
  o.out.resize(T * H);
  o.dwg.assign(E * I * H, 0.0f);
  o.dwu.assign(E * I * H, 0.0f);
  o.dwd.assign(E * H * I, 0.0f);
  experts_fwd_bwd(xp.data(), R, counts.data(), E, w, 0, nullptr, y.data(), nullptr, nullptr, nullptr, nullptr);
  moe_unpermute_forward(y.data(), ros.data(), tw.data(), o.out.data(), T, K, H);
  moe_unpermute_backward(y.data(), ros.data(), tw.data(), dout.data(), dy.data(), dtw.data(), T, K, H);
  experts_fwd_bwd(xp.data(), R, counts.data(), E, w, 0, dy.data(), y.data(), dxp.data(), o.dwg.data(), o.dwu.data(),
                  o.dwd.data());
  o.dx.resize(T * H);
  moe_permute_backward(dxp.data(), ros.data(), o.dx.data(), T, K, H);
  o.dlogits.resize(T * E);
  moe_router_backward(probs.data(), sel.data(), tw.data(), dtw.data(), nullptr, nullptr, o.dlogits.data(), T, E, K,
                      true);
  return o;
}

double rel_err(const float* got, const float* ref, int64_t n) {
  double mx = 1e-30, err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    mx = std::max(mx, static_cast<double>(std::fabs(ref[i])));
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(e <= err)) err = e;
  }
  return err / mx;
}

// One scenario: token counts per ep rank; experts in `dead` get logits -30 (no tokens).
void scenario(const char* name, const vector<int64_t>& tokens_per_rank, const vector<int>& dead, int seed) {
  auto& st = twinkle::parallel_state();
  auto ep = st.ep;
  const int er = ep->rank(), es = ep->size();
  MPI_CHECK(static_cast<int>(tokens_per_rank.size()) == es, "scenario sized for ep " << tokens_per_rank.size());
  int64_t T = 0, off = 0;
  for (int r = 0; r < es; ++r) {
    if (r == er) off = T;
    T += tokens_per_rank[r];
  }
  const int64_t Tr = tokens_per_rank[er];
  // the group's data, identical on every rank of the group (seeded by the group's first rank)
  std::mt19937 g(static_cast<unsigned>(seed * 1000 + ep->global_ranks()[0]));
  Weights w{randn(g, E * I * H, 0.3f), randn(g, E * I * H, 0.3f), randn(g, E * H * I, 0.3f)};
  auto x = randn(g, T * H, 1.0f), logits = randn(g, T * E, 1.5f), dout = randn(g, T * H, 1.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int e : dead) logits[t * E + e] = -30.0f;
  const BlockOut ref = single(x, logits, dout, T, w);

  // expert-parallel: this rank's tokens, its El experts
  twinkle::parallel::AlltoAllDispatcher d(ep, E, H);
  const int64_t El = d.num_local_experts(), e0 = d.first_local_expert();
  vector<float> probs(Tr * E), tw(Tr * K), out(Tr * H), dtw(Tr * K), dx(Tr * H), dl(Tr * E);
  vector<int32_t> sel(Tr * K);
  moe_router_forward(logits.data() + off * E, probs.data(), sel.data(), tw.data(), Tr, E, K, true);
  ep->reset_bytes_sent();
  d.dispatch(x.data() + off * H, sel.data(), Tr, K);
  const int64_t R = d.expert_rows();
  vector<float> y(R * H), dy(R * H), dxe(R * H);
  vector<float> dwg(El * I * H, 0.0f), dwu(El * I * H, 0.0f), dwd(El * H * I, 0.0f);
  experts_fwd_bwd(d.expert_input(), R, d.local_counts(), El, w, e0, nullptr, y.data(), nullptr, nullptr, nullptr,
                  nullptr);
  d.combine(y.data(), tw.data(), out.data());
  d.combine_backward(dout.data() + off * H, tw.data(), dy.data(), dtw.data());
  experts_fwd_bwd(d.expert_input(), R, d.local_counts(), El, w, e0, dy.data(), y.data(), dxe.data(), dwg.data(),
                  dwu.data(), dwd.data());
  d.dispatch_backward(dxe.data(), dx.data());
  moe_router_backward(probs.data(), sel.data(), tw.data(), dtw.data(), nullptr, nullptr, dl.data(), Tr, E, K, true);

  const double tol = 1e-6;
  const double eo = rel_err(out.data(), ref.out.data() + off * H, Tr * H);
  const double ex = rel_err(dx.data(), ref.dx.data() + off * H, Tr * H);
  const double el = rel_err(dl.data(), ref.dlogits.data() + off * E, Tr * E);
  const double eg = rel_err(dwg.data(), ref.dwg.data() + e0 * I * H, El * I * H);
  const double eu = rel_err(dwu.data(), ref.dwu.data() + e0 * I * H, El * I * H);
  const double ed = rel_err(dwd.data(), ref.dwd.data() + e0 * H * I, El * H * I);
  MPI_CHECK(eo <= tol, name << ": output rel err " << eo);
  MPI_CHECK(ex <= tol, name << ": dx rel err " << ex);
  MPI_CHECK(el <= tol, name << ": dlogits rel err " << el);
  MPI_CHECK(eg <= tol && eu <= tol && ed <= tol,
            name << ": expert weight grads rel err gate " << eg << " up " << eu << " down " << ed);
  // rows received per local expert == the single-process counts of those experts
  vector<int64_t> all_counts(E, 0);
  for (int64_t t = 0; t < T; ++t) {
    vector<float> p(E), ww(K);
    vector<int32_t> s(K);
    moe_router_forward(logits.data() + t * E, p.data(), s.data(), ww.data(), 1, E, K, true);
    for (auto e : s) ++all_counts[e];
  }
  for (int64_t e = 0; e < El; ++e)
    MPI_CHECK(d.local_counts()[e] == all_counts[e0 + e],
              name << ": local expert " << e0 + e << " got " << d.local_counts()[e] << " rows, want " << all_counts[e0 + e]);
  for (int e : dead)
    if (e >= e0 && e < e0 + El) {
      MPI_CHECK(d.local_counts()[e - e0] == 0, name << ": dead expert " << e << " received rows");
      for (int64_t i = 0; i < I * H; ++i)
        if (dwg[(e - e0) * I * H + i] != 0.0f) {
          MPI_CHECK(false, name << ": dead expert " << e << " has a gradient");
          break;
        }
    }
  // Communication volume = the analytic volume of the routing that happened: the counts
  // exchange (El int64 to each other rank), then rows to other ranks' experts twice (dispatch,
  // combine backward) and rows received from other ranks twice (combine, dispatch backward).
  int64_t rows_out = 0, rows_in = 0;
  for (int64_t t = 0; t < T; ++t) {
    vector<float> p(E), ww(K);
    vector<int32_t> s(K);
    moe_router_forward(logits.data() + t * E, p.data(), s.data(), ww.data(), 1, E, K, true);
    const bool mine = t >= off && t < off + Tr;
    for (auto e : s) {
      const bool local_expert = e >= e0 && e < e0 + El;
      if (mine && !local_expert) ++rows_out;
      if (!mine && local_expert) ++rows_in;
    }
  }
  const int64_t want_bytes = 8 * El * (es - 1) + 2 * 4 * H * (rows_out + rows_in);
  MPI_CHECK(ep->bytes_sent() == want_bytes,
            name << ": all-to-all bytes " << ep->bytes_sent() << ", analytic volume " << want_bytes);
  MPI_CHECK(d.last_dispatch_bytes() == 4 * H * rows_out,
            name << ": last_dispatch_bytes " << d.last_dispatch_bytes() << " want " << 4 * H * rows_out);
  // dispatch_tags (the LoRA dropout keys of expert rows): each expert row's tag is the global index
  // of the token whose x it holds, ascending inside each local expert (the single process's order)
  vector<uint64_t> tags(Tr), got(static_cast<size_t>(R), ~uint64_t{0});
  for (int64_t t = 0; t < Tr; ++t) tags[t] = static_cast<uint64_t>(off + t);
  d.dispatch_tags(tags.data(), got.data());
  for (int64_t e = 0, row = 0; e < El; ++e)
    for (int64_t i = 0; i < d.local_counts()[e]; ++i, ++row) {
      const uint64_t tok = got[row];
      MPI_CHECK(tok < static_cast<uint64_t>(T) &&
                    std::memcmp(d.expert_input() + row * H, x.data() + tok * H, H * sizeof(float)) == 0 &&
                    (i == 0 || got[row - 1] < tok),
                name << ": expert row " << row << " carries tag " << tok << ", not its token (or out of order)");
    }
  // The same tags through a caller's workspace (the model passes the stage's) whose transient row
  // buffers hold stale bytes from an earlier user: equal tags, and the workspace does not grow (the
  // tags fit in the rows' "moe.a2a.send" / "moe.a2a.recv" buffers; nothing is allocated per call).
  twinkle::Workspace ws;
  for (const char* key : {"moe.a2a.send", "moe.a2a.recv"}) ws.get(key, {(Tr * K + R) * H}).fill_(-1.0f);
  const size_t held = ws.bytes();
  vector<uint64_t> got_ws(static_cast<size_t>(R));
  for (int call = 0; call < 2; ++call) {
    d.dispatch_tags(tags.data(), got_ws.data(), &ws);
    MPI_CHECK(got_ws == got, name << ": dispatch_tags through a stale workspace differs from the private one (call "
                                  << call << ")");
    MPI_CHECK(ws.bytes() == held, name << ": dispatch_tags grew the workspace from " << held << " to " << ws.bytes()
                                       << " bytes");
  }
  // Not doubled: the expert gradient norm summed over the EP group equals the single-process one
  double sq = 0.0, sq_ref = 0.0;
  for (auto v : dwg) sq += double(v) * v;
  for (auto v : dwu) sq += double(v) * v;
  for (auto v : dwd) sq += double(v) * v;
  for (auto v : ref.dwg) sq_ref += double(v) * v;
  for (auto v : ref.dwu) sq_ref += double(v) * v;
  for (auto v : ref.dwd) sq_ref += double(v) * v;
  ep->all_reduce_f64(&sq, 1);
  MPI_CHECK(std::fabs(std::sqrt(sq) / std::sqrt(sq_ref) - 1.0) < 1e-6,
            name << ": expert grad norm ratio ep/single " << std::sqrt(sq) / std::sqrt(sq_ref));
  if (er == 0)
    twinkle::get_logger().info(std::string(name) + ": rel err out " + std::to_string(eo) + " dx " + std::to_string(ex) +
                               " dlogits " + std::to_string(el) + " dW " + std::to_string(std::max({eg, eu, ed})) +
                               "; expert grad norm ratio " + std::to_string(std::sqrt(sq) / std::sqrt(sq_ref)));
}

int body(int argc, char** argv) {
  twinkle::check(argc >= 2, "usage: moe_ep_check EP");
  const int EP = std::stoi(argv[1]);
  twinkle::MeshSizes s;
  s.dp = twinkle::world_size();
  s.ep = EP;
  twinkle::InitOptions o;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(s);
  twinkle::initialize(o);
  auto& st = twinkle::parallel_state();
  const int es = st.ep->size();
  // A: uneven token counts, expert 5 gets nothing
  vector<int64_t> uneven(es);
  for (int r = 0; r < es; ++r) uneven[r] = 5 + 3 * r;
  scenario("uneven tokens, expert 5 empty", uneven, {5}, 1);
  // B: the last rank sends no tokens; the first rank's experts receive none
  vector<int64_t> none_last(es, 9);
  none_last[es - 1] = 0;
  vector<int> first_dead;
  for (int e = 0; e < E / es; ++e) first_dead.push_back(e);
  scenario("a rank without tokens, a rank without routed rows", none_last, first_dead, 2);
  // C: the error names the numbers
  bool threw = false;
  try {
    twinkle::parallel::AlltoAllDispatcher bad(st.ep, 6, H);
  } catch (const twinkle::Error& e) {
    threw = std::string(e.what()).find("num_experts = 6 is not divisible by ep = " + std::to_string(es)) !=
            std::string::npos;
  }
  MPI_CHECK(threw || 6 % es == 0, "experts % ep error");
  int fails = twinkle_test::failures();
  st.world->all_reduce(&fails, 1, twinkle::DType::I32);
  if (st.global_rank == 0)
    std::cout << (fails == 0 ? "moe_ep_check OK " : "moe_ep_check FAILED ") << st.mesh.describe() << std::endl;
  return fails == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
