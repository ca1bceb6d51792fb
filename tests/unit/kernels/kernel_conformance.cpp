// Kernel conformance table (the idea of ggml's tests/test-backend-ops.cpp): every op of
// twinkle/kernels/ops.h x every implementation registered for the CPU x forward and backward, on odd
// shapes, against PyTorch float64 autograd references (tests/reference/kernels_ref.py, read through the
// CTest fixture kernels_ref_data). A new implementation registered in the registry (a user kernel, the
// MoE grouped GEMM, a future fusion) is picked up automatically; an op without a row in kRows fails.
// The self test registers deliberately broken kernels through a kernelize mapping and requires the
// table to reject them (a test of the test).
//
// Tolerance: max |got - ref| <= tol * max|ref| per tensor (tol per row, <= 1e-4); comparisons are
// collected, not asserted, so that the self test can inspect them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ref_case.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/rmsnorm.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/registry.h"

#ifdef TWINKLE_CONFORMANCE_CUDA
// The same table for every implementation registered for device "cuda" (tests/cuda.cmake builds this file
// a second time as kernel_conformance_cuda, label gpu): inputs staged to device buffers, outputs copied
// back (tests/cuda/staged_kernels.h); without a GPU the binary prints why and exits 77 (skipped).
#include "staged_kernels.h"
#include "twinkle/kernels/cuda/runtime.h"
#endif

namespace {

using kernels_ref::Case;
using namespace twinkle::kernels;

// Collects the comparisons of one (op, implementation, case).
struct Check {
  std::string ctx;
  std::vector<std::string> fails;
  // The "bf16" set rounds every GEMM input to bf16 (2^-9 relative each): its tolerance is 2^-6 of the
  // tensor's max (sums of products of mixed sign); the exact bf16 GEMM is checked in test_gemm_bf16.cpp.
  double min_tol = 0.0;

  template <typename F>
  void close(const F* got, const std::vector<double>& ref, double tol, const std::string& what) {
    tol = std::max(tol, min_tol);
    double mx = 1e-30, err = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      mx = std::max(mx, std::fabs(ref[i]));
      const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
      if (!(e <= err)) err = e, worst = i;  // NaN counts as worst
    }
    const double rel = err / mx;
    std::printf("  %-52s rel err %.2e (tol %.0e)\n", (ctx + " " + what).c_str(), rel, tol);
    if (!(rel <= tol))
      fails.push_back(ctx + " " + what + ": rel err " + std::to_string(rel) + " > " + std::to_string(tol) +
                      " at element " + std::to_string(worst) + " (got " + std::to_string(got[worst]) + ", ref " +
                      std::to_string(ref[worst]) + ")");
  }
  template <typename F>
  void close(const std::vector<F>& got, const std::vector<double>& ref, double tol, const std::string& what) {
    if (got.size() != ref.size()) {
      fails.push_back(ctx + " " + what + ": size " + std::to_string(got.size()) + " vs " + std::to_string(ref.size()));
      return;
    }
    close(got.data(), ref, tol, what);
  }
  // integer outputs (indices, counts, the routing plan): equal element by element
  template <typename A, typename B>
  void same(const std::vector<A>& got, const std::vector<B>& ref, const std::string& what) {
    size_t wrong = got.size() == ref.size() ? 0 : std::max(got.size(), ref.size()), first = 0;
    for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i)
      if (static_cast<int64_t>(got[i]) != static_cast<int64_t>(ref[i]) && wrong++ == 0) first = i;
    std::printf("  %-52s %s\n", (ctx + " " + what).c_str(), wrong ? "DIFFERS" : "exact");
    if (wrong)
      fails.push_back(ctx + " " + what + ": " + std::to_string(wrong) + " of " + std::to_string(ref.size()) +
                      " elements differ (sizes " + std::to_string(got.size()) + ", " + std::to_string(ref.size()) +
                      "; first at " + std::to_string(first) + ")");
  }
  // f() throws a twinkle::Error whose message contains every one of `needles`
  void throws(const std::function<void()>& f, const std::vector<std::string>& needles, const std::string& what) {
    std::string msg;
    bool threw = false;
    try {
      f();
    } catch (const twinkle::Error& e) {
      threw = true;
      msg = e.what();
    }
    bool named = threw;
    for (const auto& n : needles) named &= msg.find(n) != std::string::npos;
    std::printf("  %-52s %s\n", (ctx + " " + what).c_str(), named ? "throws" : "DOES NOT THROW AS REQUIRED");
    if (!named)
      fails.push_back(ctx + " " + what + ": " +
                      (threw ? "the message '" + msg + "' lacks a name" : "no twinkle::Error"));
  }
  void scalar(double got, double ref, double tol, const std::string& what) {
    close(std::vector<float>{static_cast<float>(got)}, {ref}, std::max(tol, 1e-7), what);
  }
  void expect(bool ok, const std::string& what) {
    if (!ok) fails.push_back(ctx + " " + what);
  }
};

std::vector<double> plus(std::vector<double> v, double c) {
  for (auto& x : v) x += c;
  return v;
}
std::vector<int64_t> widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// ---------------------------------------------------------------- one runner per op

void embedding(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t V = c.pi("V"), H = c.pi("H"), T = c.pi("T");
  auto table = c.f("table"), dout = c.f("dout");
  auto ids = c.i("ids");
  std::vector<float> out(T * H, 7.0f), dt(V * H, 0.5f);
  k.embedding.forward(table.data(), ids.data(), out.data(), T, H, 0, V);
  ck.close(out, c.d("out"), 0.0, "fwd out");
  k.embedding.backward(dout.data(), ids.data(), dt.data(), T, H, 0, V);
  ck.close(dt, plus(c.d("dtable"), 0.5), 5e-7, "bwd dtable (+=)");
  // two vocab shards [0, 8) and [8, V): out-of-shard rows are zero, so the shard sum is the lookup
  std::vector<float> sum(T * H, 0.0f), part(T * H), dsh(V * H, 0.0f);
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t v0 = s ? 8 : 0, vl = s ? V - 8 : 8;
    k.embedding.forward(table.data() + v0 * H, ids.data(), part.data(), T, H, v0, vl);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    k.embedding.backward(dout.data(), ids.data(), dsh.data() + v0 * H, T, H, v0, vl);
  }
  ck.close(sum, c.d("out"), 0.0, "fwd 2-shard out");
  ck.close(dsh, c.d("dtable"), 5e-7, "bwd 2-shard dtable");
}

void rms_norm(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t rows = c.pi("rows"), dim = c.pi("dim");
  auto x = c.f("x"), w = c.f("w"), dy = c.f("dy");
  std::vector<float> y(rows * dim, 7.0f), rstd(rows), dx(rows * dim, 7.0f), dw(dim, 0.5f);
  k.rms_norm.forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, static_cast<float>(c.p("eps")));
  ck.close(y, c.d("y"), 2e-6, "fwd y");
  ck.close(rstd, c.d("rstd"), 2e-6, "fwd rstd");
  k.rms_norm.backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, dim);
  ck.close(dx, c.d("dx"), 5e-6, "bwd dx");
  ck.close(dw, plus(c.d("dw"), 0.5), 5e-6, "bwd dw (+=)");
}

void add_rms_norm(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t rows = c.pi("rows"), dim = c.pi("dim");
  auto x = c.f("x"), r = c.f("r"), w = c.f("w"), dy = c.f("dy"), dres = c.f("dres");
  std::vector<float> h(rows * dim, 7.0f), y(rows * dim, 7.0f), rstd(rows), dh(rows * dim, 7.0f), dw(dim, 0.5f);
  k.add_rms_norm.forward(x.data(), r.data(), h.data(), w.data(), y.data(), rstd.data(), rows, dim,
                         static_cast<float>(c.p("eps")));
  ck.close(h, c.d("h"), 1e-7, "fwd h");
  ck.close(y, c.d("y"), 2e-6, "fwd y");
  ck.close(rstd, c.d("rstd"), 2e-6, "fwd rstd");
  k.add_rms_norm.backward(h.data(), w.data(), rstd.data(), dy.data(), dres.data(), dh.data(), dw.data(), rows, dim);
  ck.close(dh, c.d("dh"), 5e-6, "bwd dh");
  ck.close(dw, plus(c.d("dw"), 0.5), 5e-6, "bwd dw (+=)");
  // in place: h over x, dh over dres (the model's residual buffers)
  std::vector<float> xi = x, di = dres;
  k.add_rms_norm.forward(xi.data(), r.data(), xi.data(), w.data(), y.data(), rstd.data(), rows, dim,
                         static_cast<float>(c.p("eps")));
  ck.close(xi, c.d("h"), 1e-7, "fwd h in place");
  k.add_rms_norm.backward(xi.data(), w.data(), rstd.data(), dy.data(), di.data(), di.data(), nullptr, rows, dim);
  ck.close(di, c.d("dh"), 5e-6, "bwd dh in place");
}

void qk_norm_rope(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t tokens = c.pi("tokens"), heads = c.pi("heads"), D = c.pi("head_dim");
  const auto t = twinkle::kernels::cpu::make_rope_table(c.pi("max_pos"), D, c.p("theta"));
  auto x = c.f("x"), w = c.f("w"), dy = c.f("dy");
  auto pos = c.i("pos");
  const int64_t n = tokens * heads * D;
  std::vector<float> y(n, 7.0f), rstd(tokens * heads), dx(n, 7.0f), dw(D, 0.25f);
  k.qk_norm_rope.forward(x.data(), w.data(), y.data(), rstd.data(), pos.data(), t, tokens, heads, D,
                         static_cast<float>(c.p("eps")));
  ck.close(y, c.d("y"), 2e-6, "fwd y");
  ck.close(rstd, c.d("rstd"), 2e-6, "fwd rstd");
  k.qk_norm_rope.backward(x.data(), w.data(), rstd.data(), pos.data(), t, dy.data(), dx.data(), dw.data(), tokens,
                          heads, D);
  ck.close(dx, c.d("dx"), 5e-6, "bwd dx");
  ck.close(dw, plus(c.d("dw"), 0.25), 5e-6, "bwd dw (+=)");
  std::vector<float> di = dy;  // dx over dy
  k.qk_norm_rope.backward(x.data(), w.data(), rstd.data(), pos.data(), t, di.data(), di.data(), nullptr, tokens,
                          heads, D);
  ck.close(di, c.d("dx"), 5e-6, "bwd dx in place");
  bool threw = false;  // a position outside the table is an error, not a read past it
  std::vector<int32_t> bad = pos;
  bad.back() = static_cast<int32_t>(t.max_pos);
  try {
    k.qk_norm_rope.forward(x.data(), w.data(), y.data(), rstd.data(), bad.data(), t, tokens, heads, D, 1e-6f);
  } catch (const twinkle::Error&) {
    threw = true;
  }
  ck.expect(threw, "fwd: position outside the rope table did not throw twinkle::Error");
}

void rope(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t tokens = c.pi("tokens"), heads = c.pi("heads"), D = c.pi("head_dim");
  const auto t = twinkle::kernels::cpu::make_rope_table(c.pi("max_pos"), D, c.p("theta"));
  auto x = c.f("x"), dy = c.f("dy");
  auto pos = c.i("pos");
  k.rope.forward(x.data(), pos.data(), t, tokens, heads, D);
  ck.close(x, c.d("y"), 2e-6, "fwd");
  k.rope.backward(dy.data(), pos.data(), t, tokens, heads, D);
  ck.close(dy, c.d("dx"), 2e-6, "bwd");
}

void swiglu(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t n = c.pi("rows") * c.pi("cols");
  auto g = c.f("gate"), u = c.f("up"), dh = c.f("dh");
  std::vector<float> h(n, 7.0f), dg(n, 7.0f), du(n, 7.0f);
  k.swiglu.forward(g.data(), u.data(), h.data(), n);
  ck.close(h, c.d("h"), 1e-6, "fwd h");
  k.swiglu.backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
  ck.close(dg, c.d("dgate"), 1e-6, "bwd dgate");
  ck.close(du, c.d("dup"), 1e-6, "bwd dup");
}

void gate_up_swiglu(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), I = c.pi("I"), H = c.pi("H");
  auto x = c.f("x"), w = c.f("wgu"), da = c.f("da");
  std::vector<float> gu(T * 2 * I, 7.0f), a(T * I, 7.0f), dgu(T * 2 * I, 7.0f), dx(T * H, 7.0f), dw(2 * I * H, 0.5f);
  k.gate_up_swiglu.forward(x.data(), w.data(), gu.data(), a.data(), T, I, H);
  ck.close(gu, c.d("gu"), 1e-5, "fwd gu");
  ck.close(a, c.d("a"), 1e-5, "fwd a");
  k.gate_up_swiglu.backward(x.data(), w.data(), gu.data(), da.data(), dgu.data(), dx.data(), dw.data(), T, I, H,
                            false);
  ck.close(dx, c.d("dx"), 1e-5, "bwd dx");
  ck.close(dw, plus(c.d("dwgu"), 0.5), 1e-5, "bwd dwgu (+=)");
  std::vector<float> dx2(T * H, 1.0f);
  k.gate_up_swiglu.backward(x.data(), w.data(), gu.data(), da.data(), dgu.data(), dx2.data(), nullptr, T, I, H, true);
  ck.close(dx2, plus(c.d("dx"), 1.0), 1e-5, "bwd dx (accumulate_dx)");
}

void attention(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t Hq = c.pi("Hq"), Hkv = c.pi("Hkv"), D = c.pi("D"), T = c.pi("T"), ns = c.pi("n_seqs");
  const float scale = static_cast<float>(c.p("scale"));
  auto q = c.f("q"), kk = c.f("k"), v = c.f("v"), dout = c.f("dout");
  auto cu = c.i("cu_seqlens");
  std::vector<float> out(T * Hq * D, 7.0f), lse(T * Hq, 7.0f), dq(T * Hq * D, 7.0f), dk(T * Hkv * D, 7.0f),
      dv(T * Hkv * D, 7.0f);
  const int64_t window = c.meta.at("params").value("window", int64_t{0});
  k.attention.forward(q.data(), kk.data(), v.data(), out.data(), lse.data(), cu.data(), ns, Hq, Hkv, D, scale, window);
  ck.close(out, c.d("out"), 1e-5, "fwd out");
  ck.close(lse, c.d("lse"), 1e-6, "fwd lse");
  k.attention.backward(q.data(), kk.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                       dv.data(), cu.data(), ns, Hq, Hkv, D, scale, window);
  ck.close(dq, c.d("dq"), 1e-5, "bwd dq");
  ck.close(dk, c.d("dk"), 1e-5, "bwd dk");
  ck.close(dv, c.d("dv"), 1e-5, "bwd dv");
}

void linear(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t M = c.pi("M"), N = c.pi("N"), K = c.pi("K");
  auto x = c.f("x"), w = c.f("w"), dy = c.f("dy");
  std::vector<float> y(M * N, 7.0f), dx(M * K, 7.0f), dw(N * K, 0.5f);
  k.linear.forward(x.data(), w.data(), y.data(), M, N, K, false);
  ck.close(y, c.d("y"), 1e-5, "fwd y");
  std::fill(y.begin(), y.end(), 1.0f);
  k.linear.forward(x.data(), w.data(), y.data(), M, N, K, true);
  ck.close(y, plus(c.d("y"), 1.0), 1e-5, "fwd y (accumulate)");
  k.linear.backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), M, N, K, false);
  ck.close(dx, c.d("dx"), 1e-5, "bwd dx");
  ck.close(dw, plus(c.d("dw"), 0.5), 1e-5, "bwd dw (+=)");
  std::fill(dx.begin(), dx.end(), 1.0f);
  k.linear.backward(x.data(), w.data(), dy.data(), dx.data(), nullptr, M, N, K, true);
  ck.close(dx, plus(c.d("dx"), 1.0), 1e-5, "bwd dx (accumulate_dx)");
}

void grouped_linear(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t M = c.pi("M"), N = c.pi("N"), K = c.pi("K"), G = c.pi("G");
  auto x = c.f("x"), w = c.f("w"), dy = c.f("dy");
  const auto counts = widen(c.i("counts"));
  // expert weights at a stride larger than N*K (padding filled with garbage that must not be read)
  const int64_t ws = N * K + 5;
  std::vector<float> wp(G * ws, 1e4f);
  for (int64_t g = 0; g < G; ++g) std::copy(w.begin() + g * N * K, w.begin() + (g + 1) * N * K, wp.begin() + g * ws);
  std::vector<float> y(M * N, 7.0f), dx(M * K, 7.0f), dwp(G * ws, 0.5f);
  k.grouped_linear.forward(x.data(), wp.data(), ws, counts.data(), G, y.data(), N, K, false);
  ck.close(y, c.d("y"), 1e-5, "fwd y");
  std::fill(y.begin(), y.end(), 1.0f);
  k.grouped_linear.forward(x.data(), wp.data(), ws, counts.data(), G, y.data(), N, K, true);
  ck.close(y, plus(c.d("y"), 1.0), 1e-5, "fwd y (accumulate)");
  k.grouped_linear.backward(x.data(), wp.data(), ws, counts.data(), G, dy.data(), dx.data(), dwp.data(), N, K, false);
  ck.close(dx, c.d("dx"), 1e-5, "bwd dx");
  std::vector<float> dw;
  for (int64_t g = 0; g < G; ++g) dw.insert(dw.end(), dwp.begin() + g * ws, dwp.begin() + g * ws + N * K);
  ck.close(dw, plus(c.d("dw"), 0.5), 1e-5, "bwd dw (+=)");
  bool pad_ok = true;  // the stride padding of dW is never written
  for (int64_t g = 0; g < G; ++g)
    for (int64_t i = N * K; i < ws; ++i) pad_ok &= dwp[g * ws + i] == 0.5f;
  ck.expect(pad_ok, "bwd: dW written outside an expert's [N, K] block");
  std::fill(dx.begin(), dx.end(), 1.0f);
  k.grouped_linear.backward(x.data(), wp.data(), ws, counts.data(), G, dy.data(), dx.data(), nullptr, N, K, true);
  ck.close(dx, plus(c.d("dx"), 1.0), 1e-5, "bwd dx (accumulate_dx)");
}

void cross_entropy(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), V = c.pi("V");
  auto x = c.f("logits");
  auto lab = c.i("labels");
  int64_t nv = 0;
  for (auto l : lab) nv += l != -100;
  std::vector<float> lse(T), dl(T * V, 7.0f), scale(T, 1.0f / static_cast<float>(nv));
  ck.scalar(k.cross_entropy.forward(x.data(), lab.data(), T, V, lse.data()), c.d("loss_sum")[0], 1e-6, "fwd loss");
  ck.close(lse, c.d("lse"), 3e-7, "fwd lse");
  k.cross_entropy.backward(x.data(), lab.data(), lse.data(), T, V, V, 0, scale.data(), dl.data());
  ck.close(dl, c.d("dlogits"), 1e-6, "bwd dlogits");
  // Megatron's vocab-parallel pieces on two padded shards [0, 25) and [25, V)
  const int64_t Vl = 32, vstart[2] = {0, 25}, valid[2] = {25, V - 25};
  std::vector<float> shard[2], mx[2], se[2], tg[2];
  for (int s = 0; s < 2; ++s) {
    shard[s].assign(T * Vl, 1e4f);  // padding must never be read
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < valid[s]; ++j) shard[s][t * Vl + j] = x[t * V + vstart[s] + j];
    mx[s].resize(T);
    k.cross_entropy.local_max(shard[s].data(), T, Vl, valid[s], mx[s].data());
  }
  std::vector<float> gmax(T), lse2(T);
  for (int64_t t = 0; t < T; ++t) gmax[t] = std::max(mx[0][t], mx[1][t]);
  double loss = 0.0;
  for (int s = 0; s < 2; ++s) {
    se[s].resize(T);
    tg[s].resize(T);
    k.cross_entropy.local_sumexp_target(shard[s].data(), lab.data(), gmax.data(), T, Vl, valid[s], vstart[s],
                                        se[s].data(), tg[s].data());
  }
  for (int64_t t = 0; t < T; ++t) {
    lse2[t] = gmax[t] + std::log(se[0][t] + se[1][t]);
    if (lab[t] != -100) loss += static_cast<double>(lse2[t]) - (tg[0][t] + tg[1][t]);
  }
  ck.scalar(loss, c.d("loss_sum")[0], 1e-6, "fwd 2-shard loss");
  ck.close(lse2, c.d("lse"), 3e-7, "fwd 2-shard lse");
  const auto dref = c.d("dlogits");
  for (int s = 0; s < 2; ++s) {
    std::vector<float> d(T * Vl, 5.0f), got;
    std::vector<double> ref;
    k.cross_entropy.backward(shard[s].data(), lab.data(), lse2.data(), T, Vl, valid[s], vstart[s], scale.data(),
                             d.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < Vl; ++j) {
        got.push_back(d[t * Vl + j]);
        ref.push_back(j < valid[s] ? dref[t * V + vstart[s] + j] : 0.0);
      }
    ck.close(got, ref, 1e-6, "bwd shard " + std::to_string(s) + " dlogits");
  }
}

void linear_cross_entropy(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), V = c.pi("V"), H = c.pi("H");
  auto x = c.f("x"), w = c.f("w");
  auto lab = c.i("labels");
  int64_t nv = 0;
  for (auto l : lab) nv += l != -100;
  std::vector<float> lse(T, 7.0f), dx(T * H, 7.0f), dw(V * H, 0.5f);
  const double lf =
      k.linear_cross_entropy.forward_backward(x.data(), w.data(), lab.data(), T, V, H, 0.0f, lse.data(), nullptr,
                                              nullptr, 0);
  ck.scalar(lf, c.d("loss_sum")[0], 1e-5, "fwd loss");
  ck.close(lse, c.d("lse"), 1e-5, "fwd lse");
  const double lb = k.linear_cross_entropy.forward_backward(x.data(), w.data(), lab.data(), T, V, H,
                                                            1.0f / static_cast<float>(nv), lse.data(), dx.data(),
                                                            dw.data(), 4);  // chunks of 4, 4, 3 rows
  ck.scalar(lb, c.d("loss_sum")[0], 1e-5, "fwd+bwd loss");
  ck.close(dx, c.d("dx"), 1e-5, "bwd dx");
  ck.close(dw, plus(c.d("dw"), 0.5), 1e-5, "bwd dw (+=)");
}

void adamw(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t n = c.pi("n"), steps = c.pi("steps");
  auto p = c.f("p0");
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  for (int64_t s = 0; s < steps; ++s) {
    auto g = c.f("g" + std::to_string(s));
    k.adamw.step(p.data(), g.data(), m.data(), v.data(), n, static_cast<float>(c.p("lr")),
                 static_cast<float>(c.p("beta1")), static_cast<float>(c.p("beta2")), static_cast<float>(c.p("eps")),
                 static_cast<float>(c.p("weight_decay")), s + 1, c.f("gs" + std::to_string(s))[0]);
    ck.close(p, c.d("p" + std::to_string(s + 1)), 1e-6, "step " + std::to_string(s + 1) + " p");
  }
  ck.close(m, c.d("m"), 1e-6, "exp_avg");
  ck.close(v, c.d("v"), 1e-6, "exp_avg_sq");
}

void norms(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t n = c.pi("n");
  auto x = c.f("x");
  ck.scalar(k.norms.sum_squares(x.data(), n), c.d("sumsq")[0], 1e-12, "sum_squares");
  k.norms.scale(x.data(), n, static_cast<float>(c.p("s")));
  ck.close(x, c.d("scaled"), 1e-7, "scale");
}

void add(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t n = c.pi("n");
  auto x = c.f("x"), b = c.f("b");
  std::vector<float> out(n, 7.0f);
  k.add.add(out.data(), x.data(), b.data(), n);
  ck.close(out, c.d("sum"), 1e-7, "add");
  k.add.add_inplace(x.data(), b.data(), n);
  ck.close(x, c.d("sum"), 1e-7, "add_inplace");
}

void bias_rows(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t rows = c.pi("rows"), cols = c.pi("cols");
  auto y = c.f("y"), b = c.f("b"), dy = c.f("dy"), db = c.f("db0");
  k.add.add_bias_rows(y.data(), b.data(), rows, cols);
  ck.close(y, c.d("y_plus_b"), 1e-7, "add_bias_rows");
  k.add.bias_grad_rows(dy.data(), db.data(), rows, cols);
  ck.close(db, c.d("db"), 1e-6, "bias_grad_rows");
  k.add.bias_grad_rows(dy.data(), nullptr, rows, cols);  // a frozen bias: nothing to write
}

void lora(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), in = c.pi("n_in"), out = c.pi("n_out"), r = c.pi("r");
  const float s = static_cast<float>(c.meta.at("params").at("scaling").get<double>());
  const float keep = static_cast<float>(c.meta.at("params").at("keep_scale").get<double>());
  const auto rows = c.i("rows"), pos = c.i("pos"), ref_mask = c.i("mask");
  std::vector<uint64_t> key(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) key[t] = (static_cast<uint64_t>(rows[t]) << 32) | static_cast<uint32_t>(pos[t]);
  std::vector<uint8_t> m(static_cast<size_t>(T * in), 7);
  k.lora.dropout_mask(key.data(), T, static_cast<uint64_t>(c.pi("seed")), static_cast<uint64_t>(c.pi("module_key")),
                      c.pi("feature0"), in, static_cast<uint64_t>(c.pi("threshold")), m.data());
  int64_t wrong = 0, kept = 0;
  for (int64_t i = 0; i < T * in; ++i) {
    wrong += m[i] != ref_mask[i];
    kept += m[i];
  }
  ck.expect(wrong == 0, "dropout_mask: " + std::to_string(wrong) + " of " + std::to_string(T * in) +
                            " elements differ from the reference mask");
  ck.expect(kept > 0 && kept < T * in, "dropout_mask: the case keeps every element or none");
  const auto x = c.f("x"), A = c.f("A"), B = c.f("B"), dy = c.f("dy");
  std::vector<float> xd(static_cast<size_t>(T * in));
  k.lora.dropout_apply(x.data(), m.data(), keep, xd.data(), T * in);
  ck.close(xd, c.d("xd"), 1e-7, "dropout_apply");
  auto y = c.f("y0");
  std::vector<float> h(static_cast<size_t>(T * r)), dh(static_cast<size_t>(T * r)), g(static_cast<size_t>(T * in));
  k.lora.forward(xd.data(), A.data(), B.data(), h.data(), y.data(), T, in, out, r, s);
  ck.close(h, c.d("h"), 1e-6, "forward h");
  ck.close(y, c.d("y"), 1e-6, "forward y");
  auto dA = c.f("dA0"), dB = c.f("dB0");
  k.lora.backward(xd.data(), A.data(), B.data(), dy.data(), h.data(), dh.data(), g.data(), false, dA.data(), dB.data(),
                  T, in, out, r, s);
  ck.close(dh, c.d("dh"), 1e-6, "backward dh");
  ck.close(dA, c.d("dA"), 1e-6, "backward dA");
  ck.close(dB, c.d("dB"), 1e-6, "backward dB");
  ck.close(g, c.d("g"), 1e-6, "backward dx");
  auto dx = c.f("dx0");  // accumulate_dx, a frozen pair (dA, dB null)
  k.lora.backward(xd.data(), A.data(), B.data(), dy.data(), h.data(), dh.data(), dx.data(), true, nullptr, nullptr, T,
                  in, out, r, s);
  ck.close(dx, c.d("dx_acc"), 1e-6, "backward dx (accumulate, frozen)");
  dx = c.f("dx0");
  k.lora.dropout_backward(g.data(), m.data(), keep, dx.data(), T * in);
  ck.close(dx, c.d("dx_drop"), 1e-6, "dropout_backward");
}

std::vector<uint8_t> mask_u8(const std::vector<int32_t>& m) { return {m.begin(), m.end()}; }

// Ring attention's pieces: the query block against key block A (rows without a visible key: out 0, lse
// -inf), then B, merged by lse_merge into the attention over A and B together; delta from the merged output;
// the backward of A and of B with the final lse / delta accumulating into dq (and each block's dk / dv) gives
// autograd's gradients of the attention over both (tests/reference/kernels_ref.py attention_block_case).
void attention_block(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t Hq = c.pi("Hq"), Hkv = c.pi("Hkv"), D = c.pi("D"), Tq = c.pi("Tq"), Ta = c.pi("Ta"), Tb = c.pi("Tb");
  const int64_t window = c.pi("window");
  const float scale = static_cast<float>(c.p("scale"));
  auto q = c.f("q"), dout = c.f("dout"), ka = c.f("ka"), va = c.f("va"), kb = c.f("kb"), vb = c.f("vb");
  auto qs = c.i("q_seg"), qp = c.i("q_pos"), as = c.i("a_seg"), ap = c.i("a_pos"), bs = c.i("b_seg"), bp = c.i("b_pos");
  const auto empty = c.i("a_empty");
  const AttentionBlockOp& op = k.attention_block;
  std::vector<float> out(Tq * Hq * D, 7.0f), lse(Tq * Hq, 7.0f), ob(Tq * Hq * D, 7.0f), lb(Tq * Hq, 7.0f);
  op.forward(q.data(), qs.data(), qp.data(), Tq, ka.data(), va.data(), as.data(), ap.data(), Ta, out.data(), lse.data(),
             Hq, Hkv, D, scale, window);
  // block A alone: rows with a visible key against the reference, the others exactly out 0 and lse -inf
  const auto out_a = c.d("out_a"), lse_a = c.d("lse_a");
  std::vector<float> got_o, got_l;
  std::vector<double> ref_o, ref_l;
  bool empty_ok = true;
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t r = i * Hq + h;
      if (empty[static_cast<size_t>(i)]) {
        empty_ok &= lse[static_cast<size_t>(r)] == -INFINITY;
        for (int64_t d = 0; d < D; ++d) empty_ok &= out[static_cast<size_t>(r * D + d)] == 0.0f;
        continue;
      }
      got_l.push_back(lse[static_cast<size_t>(r)]);
      ref_l.push_back(lse_a[static_cast<size_t>(r)]);
      for (int64_t d = 0; d < D; ++d) {
        got_o.push_back(out[static_cast<size_t>(r * D + d)]);
        ref_o.push_back(out_a[static_cast<size_t>(r * D + d)]);
      }
    }
  ck.close(got_o, ref_o, 1e-5, "fwd block A out");
  ck.close(got_l, ref_l, 1e-6, "fwd block A lse");
  ck.expect(empty_ok, "fwd block A: a query without a visible key must get out 0 and lse -inf");
  op.forward(q.data(), qs.data(), qp.data(), Tq, kb.data(), vb.data(), bs.data(), bp.data(), Tb, ob.data(), lb.data(),
             Hq, Hkv, D, scale, window);
  op.lse_merge(out.data(), lse.data(), ob.data(), lb.data(), Tq, Hq, D);
  ck.close(out, c.d("out"), 1e-5, "merged out");
  ck.close(lse, c.d("lse"), 1e-6, "merged lse");
  std::vector<float> delta(Tq * Hq, 7.0f);
  op.softmax_delta(out.data(), dout.data(), delta.data(), Tq, Hq, D);
  ck.close(delta, c.d("delta"), 1e-5, "softmax delta");
  std::vector<float> dq(Tq * Hq * D, 0.5f), dka(Ta * Hkv * D, 0.5f), dva(Ta * Hkv * D, 0.5f), dkb(Tb * Hkv * D, 0.5f),
      dvb(Tb * Hkv * D, 0.5f);
  op.backward(q.data(), qs.data(), qp.data(), Tq, ka.data(), va.data(), as.data(), ap.data(), Ta, lse.data(),
              delta.data(), dout.data(), dq.data(), dka.data(), dva.data(), Hq, Hkv, D, scale, window);
  op.backward(q.data(), qs.data(), qp.data(), Tq, kb.data(), vb.data(), bs.data(), bp.data(), Tb, lse.data(),
              delta.data(), dout.data(), dq.data(), dkb.data(), dvb.data(), Hq, Hkv, D, scale, window);
  ck.close(dq, plus(c.d("dq"), 0.5), 1e-5, "bwd dq over A and B (+=)");
  ck.close(dka, plus(c.d("dka"), 0.5), 1e-5, "bwd dk of A (+=)");
  ck.close(dva, plus(c.d("dva"), 0.5), 1e-5, "bwd dv of A (+=)");
  ck.close(dkb, plus(c.d("dkb"), 0.5), 1e-5, "bwd dk of B (+=)");
  ck.close(dvb, plus(c.d("dvb"), 0.5), 1e-5, "bwd dv of B (+=)");
  bool threw = false;
  try {
    op.forward(q.data(), qs.data(), qp.data(), Tq, ka.data(), va.data(), as.data(), ap.data(), Ta, out.data(),
               lse.data(), 3, 2, D, scale, window);
  } catch (const twinkle::Error&) {
    threw = true;
  }
  ck.expect(threw, "forward with Hq % Hkv != 0 must throw twinkle::Error");
}

void moe_router(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), E = c.pi("E"), K = c.pi("k");
  const bool norm = c.pi("norm") != 0;
  const auto logits = c.f("logits"), dw = c.f("dw"), dprobs = c.f("dprobs"), dextra = c.f("dextra");
  std::vector<float> probs(T * E, 7.0f), w(T * K, 7.0f), dl(T * E, 7.0f);
  std::vector<int32_t> idx(T * K, -1);
  k.moe_router.forward(logits.data(), probs.data(), idx.data(), w.data(), T, E, K, norm);
  ck.close(probs, c.d("probs"), 1e-6, "fwd probs");
  ck.same(idx, c.i("sel"), "fwd topk_idx (ties to the lower expert)");
  ck.close(w, c.d("w"), 1e-6, "fwd topk_w");
  const auto bwd = [&](const float* g_w, const float* g_p, const float* g_x, float* out) {
    k.moe_router.backward(probs.data(), idx.data(), w.data(), g_w, g_p, g_x, out, T, E, K, norm);
  };
  bwd(dw.data(), dprobs.data(), dextra.data(), dl.data());
  ck.close(dl, c.d("dlogits"), 1e-6, "bwd dlogits (dtopk_w + dprobs + extra)");
  bwd(dw.data(), nullptr, nullptr, dl.data());
  ck.close(dl, c.d("dlogits_w"), 1e-6, "bwd dlogits (dtopk_w only)");
  bwd(nullptr, dprobs.data(), nullptr, dl.data());
  ck.close(dl, c.d("dlogits_p"), 1e-6, "bwd dlogits (dprobs only)");
  bwd(nullptr, nullptr, nullptr, dl.data());
  ck.close(dl, std::vector<double>(T * E, 0.0), 0.0, "bwd dlogits (no gradient: 0)");
  std::vector<float> da = dprobs, de = dextra;  // dlogits over dprobs, then over dlogits_extra
  bwd(dw.data(), da.data(), dextra.data(), da.data());
  ck.close(da, c.d("dlogits"), 1e-6, "bwd dlogits over dprobs");
  bwd(dw.data(), dprobs.data(), de.data(), de.data());
  ck.close(de, c.d("dlogits"), 1e-6, "bwd dlogits over dlogits_extra");
  std::vector<float> p1(E + 1), w1(E + 1);  // k > E
  std::vector<int32_t> i1(E + 1);
  ck.throws([&] { k.moe_router.forward(logits.data(), p1.data(), i1.data(), w1.data(), 1, E, E + 1, norm); },
            {"k=" + std::to_string(E + 1)}, "fwd k > E");
}

void moe_permute(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), K = c.pi("k"), E = c.pi("E"), H = c.pi("H"), R = T * K;
  const auto sel = c.i("sel"), ros_ref = c.i("row_of_slot"), sor_ref = c.i("slot_of_row");
  std::vector<int64_t> counts(E, -7);
  std::vector<int32_t> ros(R, -1), sor(R, -1);
  k.moe_permute.sort_by_expert(sel.data(), T, K, E, counts.data(), ros.data(), sor.data());
  ck.same(counts, c.i("counts"), "sort counts (host)");
  ck.same(ros, ros_ref, "sort row_of_slot");
  ck.same(sor, sor_ref, "sort slot_of_row");
  const auto x = c.f("x"), dperm = c.f("dperm"), dx0 = c.f("dx0"), y = c.f("y"), w = c.f("w"), dun = c.f("dunperm");
  std::vector<float> out(R * H, 7.0f), dx(T * H, 7.0f), dxa = dx0, uo(T * H, 7.0f), dy(R * H, 7.0f), dw(R, 7.0f);
  k.moe_permute.permute_forward(x.data(), sor.data(), out.data(), R, K, H);
  ck.close(out, c.d("perm"), 0.0, "permute fwd");
  k.moe_permute.permute_backward(dperm.data(), ros.data(), dx.data(), T, K, H, false);
  ck.close(dx, c.d("dx"), 1e-6, "permute bwd dx");
  k.moe_permute.permute_backward(dperm.data(), ros.data(), dxa.data(), T, K, H, true);
  ck.close(dxa, c.d("dx_acc"), 1e-6, "permute bwd dx (accumulate)");
  k.moe_permute.unpermute_forward(y.data(), ros.data(), w.data(), uo.data(), T, K, H);
  ck.close(uo, c.d("unperm"), 1e-6, "unpermute fwd");
  k.moe_permute.unpermute_backward(y.data(), ros.data(), w.data(), dun.data(), dy.data(), dw.data(), T, K, H);
  ck.close(dy, c.d("dy"), 1e-6, "unpermute bwd dy");
  ck.close(dw, c.d("dw"), 1e-6, "unpermute bwd dtopk_w");
  std::vector<uint64_t> key(T), kout(R, 0), kref(R);
  for (int64_t t = 0; t < T; ++t) key[t] = (static_cast<uint64_t>(t) + 1) * 0x9e3779b97f4a7c15ull;
  for (int64_t r = 0; r < R; ++r) kref[r] = key[sor_ref[r] / K];
  k.moe_permute.permute_keys(key.data(), sor.data(), kout.data(), R, K);
  ck.same(kout, kref, "permute_keys");
  // bad routings: the first bad token (in token order) is named
  const int64_t t1 = T / 3, t2 = T - 2;
  auto bad = sel;
  bad[t2 * K + K - 1] = K > 1 ? bad[t2 * K] : -1;  // a repeated expert (k > 1), else a negative one
  const std::string why2 = K > 1 ? "twice" : "outside";
  const auto sort = [&](const std::vector<int32_t>& idx) {
    k.moe_permute.sort_by_expert(idx.data(), T, K, E, counts.data(), ros.data(), sor.data());
  };
  ck.throws([&] { sort(bad); }, {"token " + std::to_string(t2) + " ", why2}, "sort: bad expert of token " +
                                                                               std::to_string(t2));
  bad[t1 * K] = static_cast<int32_t>(E);  // out of range, and before t2
  ck.throws([&] { sort(bad); }, {"token " + std::to_string(t1) + " ", "outside [0, " + std::to_string(E) + ")"},
            "sort: expert E of token " + std::to_string(t1));
}

void moe_router_loss(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), E = c.pi("E"), K = c.pi("k");
  const auto probs = c.f("probs"), logits = c.f("logits");
  const auto sel = c.i("sel");
  const auto mask = mask_u8(c.i("mask"));
  const auto ps0 = c.d("prob_sum0");
  const auto counts0 = widen(c.i("counts0"));
  for (const bool masked : {true, false}) {
    const std::string tag = masked ? " (mask)" : " (no mask)";
    auto ps = ps0;
    auto counts = counts0;
    const int64_t n = k.moe_router_loss.routing_stats(probs.data(), sel.data(), masked ? mask.data() : nullptr, T, E,
                                                      K, ps.data(), counts.data());
    ck.same(std::vector<int64_t>{n}, masked ? c.i("n") : std::vector<int32_t>{static_cast<int32_t>(T)},
            "stats real tokens" + tag);
    ck.same(counts, c.i(masked ? "counts" : "counts_all"), "stats counts (host, +=)" + tag);
    ck.close(ps, c.d(masked ? "prob_sum" : "prob_sum_all"), 1e-12, "stats prob_sum (host, +=)" + tag);
  }
  auto dprobs = c.f("dprobs0");
  k.moe_router_loss.aux_loss_backward(widen(c.i("counts_aux")).data(), mask.data(), T, E, c.d("coeff_scale")[0],
                                      dprobs.data());
  ck.close(dprobs, c.d("dprobs"), 1e-6, "aux bwd dprobs (+=)");
  std::vector<float> lse(T, 7.0f);  // the sums are doubles: compared as doubles
  ck.close(std::vector<double>{k.moe_router_loss.z_loss_forward(logits.data(), nullptr, T, E, lse.data())},
           c.d("z_sum_all"), 1e-12, "z fwd sum lse^2 (no mask)");
  std::fill(lse.begin(), lse.end(), 7.0f);
  ck.close(std::vector<double>{k.moe_router_loss.z_loss_forward(logits.data(), mask.data(), T, E, lse.data())},
           c.d("z_sum"), 1e-12, "z fwd sum lse^2 (mask)");
  ck.close(lse, c.d("lse"), 1e-7, "z fwd lse (every token)");
  auto dl = c.f("dlogits0");
  k.moe_router_loss.z_loss_backward(probs.data(), lse.data(), mask.data(), T, E, c.d("z_scale")[0], dl.data());
  ck.close(dl, c.d("dlogits"), 1e-6, "z bwd dlogits (+=)");
}

// ---------------------------------------------------------------- the table

// The Gated DeltaNet ops (tests/reference/gdn_kernels_ref.py: transformers' qwen3_5 functions in float64).
void causal_conv1d(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), C = c.pi("C"), K = c.pi("K"), N = c.pi("n_seqs");
  const bool silu = c.pi("silu") != 0, has_bias = c.pi("has_bias") != 0;
  auto x = c.f("x"), w = c.f("w"), dy = c.f("dy");
  auto cu = c.i("cu_seqlens");
  const std::vector<float> bias = has_bias ? c.f("bias") : std::vector<float>{};
  const float* bp = has_bias ? bias.data() : nullptr;
  std::vector<float> y(T * C, 7.0f), dx(T * C, 7.0f), dw(C * K, 0.5f), db(C, 0.25f);
  k.causal_conv1d.forward(x.data(), w.data(), bp, y.data(), cu.data(), N, C, K, silu);
  ck.close(y, c.d("y"), 1e-6, "fwd y");
  k.causal_conv1d.backward(x.data(), w.data(), bp, dy.data(), dx.data(), dw.data(), has_bias ? db.data() : nullptr,
                           cu.data(), N, C, K, silu);
  ck.close(dx, c.d("dx"), 2e-6, "bwd dx");
  ck.close(dw, plus(c.d("dw"), 0.5), 2e-6, "bwd dw (+=)");
  if (has_bias) ck.close(db, plus(c.d("dbias"), 0.25), 2e-6, "bwd dbias (+=)");
  std::vector<int32_t> bad = cu;
  bad[2] = bad[1] - 1;
  ck.throws([&] { k.causal_conv1d.forward(x.data(), w.data(), bp, y.data(), bad.data(), N, C, K, silu); },
            {"causal_conv1d", "cu_seqlens[2]"}, "decreasing cu_seqlens refused");
}

void gated_delta_rule(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), N = c.pi("n_seqs"), Hk = c.pi("Hk"), Hv = c.pi("Hv"), Dk = c.pi("Dk"), Dv = c.pi("Dv");
  const float scale = static_cast<float>(c.p("scale"));
  const bool l2 = c.pi("l2norm") != 0, has_h0 = c.pi("has_h0") != 0, has_dht = c.pi("has_dht") != 0;
  auto q = c.f("q"), kk = c.f("k"), v = c.f("v"), g = c.f("g"), beta = c.f("beta"), h0 = c.f("h0"), dout = c.f("dout"),
       dht = c.f("dht");
  auto cu = c.i("cu_seqlens");
  const float* h0p = has_h0 ? h0.data() : nullptr;
  const int64_t SS = N * Hv * Dk * Dv;
  std::vector<float> out(T * Hv * Dv, 7.0f), ht(SS, 7.0f);
  k.gated_delta_rule.forward(q.data(), kk.data(), v.data(), g.data(), beta.data(), h0p, out.data(), ht.data(),
                             cu.data(), N, Hk, Hv, Dk, Dv, scale, l2);
  ck.close(out, c.d("out"), 1e-5, "fwd out");
  ck.close(ht, c.d("ht"), 1e-5, "fwd final state");
  std::vector<float> out2(T * Hv * Dv, 7.0f);  // without the final state
  k.gated_delta_rule.forward(q.data(), kk.data(), v.data(), g.data(), beta.data(), h0p, out2.data(), nullptr,
                             cu.data(), N, Hk, Hv, Dk, Dv, scale, l2);
  ck.close(out2, c.d("out"), 1e-5, "fwd out (ht null)");
  std::vector<float> dq(T * Hk * Dk, 7.0f), dk(T * Hk * Dk, 7.0f), dv(T * Hv * Dv, 7.0f), dg(T * Hv, 7.0f),
      db(T * Hv, 7.0f), dh0(SS, 7.0f);
  k.gated_delta_rule.backward(q.data(), kk.data(), v.data(), g.data(), beta.data(), h0p, dout.data(),
                              has_dht ? dht.data() : nullptr, dq.data(), dk.data(), dv.data(), dg.data(), db.data(),
                              has_h0 ? dh0.data() : nullptr, cu.data(), N, Hk, Hv, Dk, Dv, scale, l2);
  ck.close(dq, c.d("dq"), 2e-5, "bwd dq");
  ck.close(dk, c.d("dk"), 2e-5, "bwd dk");
  ck.close(dv, c.d("dv"), 2e-5, "bwd dv");
  ck.close(dg, c.d("dg"), 2e-5, "bwd dg");
  ck.close(db, c.d("dbeta"), 2e-5, "bwd dbeta");
  if (has_h0) ck.close(dh0, c.d("dh0"), 2e-5, "bwd dh0");
  ck.throws(
      [&] {
        k.gated_delta_rule.forward(q.data(), kk.data(), v.data(), g.data(), beta.data(), nullptr, out2.data(), nullptr,
                                   cu.data(), N, 2, 3, Dk, Dv, scale, l2);
      },
      {"gated_delta_rule", "Hv 3", "Hk 2"}, "Hv not a multiple of Hk refused");
}

void gdn_gates(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t T = c.pi("T"), H = c.pi("H");
  auto a = c.f("a"), b = c.f("b"), A_log = c.f("A_log"), dt = c.f("dt_bias"), dg = c.f("dg"), dbeta = c.f("dbeta");
  std::vector<float> g(T * H, 7.0f), beta(T * H, 7.0f), da(T * H, 7.0f), db(T * H, 7.0f), dA(H, 0.5f), ddt(H, 0.25f);
  k.gated_delta_rule.gates_forward(a.data(), b.data(), A_log.data(), dt.data(), g.data(), beta.data(), T, H);
  ck.close(g, c.d("g"), 1e-6, "gates fwd g");
  ck.close(beta, c.d("beta"), 1e-6, "gates fwd beta");
  k.gated_delta_rule.gates_backward(a.data(), b.data(), A_log.data(), dt.data(), dg.data(), dbeta.data(), da.data(),
                                    db.data(), dA.data(), ddt.data(), T, H);
  ck.close(da, c.d("da"), 1e-6, "gates bwd da");
  ck.close(db, c.d("db"), 1e-6, "gates bwd db");
  ck.close(dA, plus(c.d("dA_log"), 0.5), 1e-6, "gates bwd dA_log (+=)");
  ck.close(ddt, plus(c.d("ddt_bias"), 0.25), 1e-6, "gates bwd ddt_bias (+=)");
}

void gated_rms_norm(const KernelTable& k, const std::string& name, Check& ck) {
  Case c(name);
  const int64_t rows = c.pi("rows"), dim = c.pi("dim");
  auto x = c.f("x"), z = c.f("z"), w = c.f("w"), dy = c.f("dy");
  std::vector<float> y(rows * dim, 7.0f), rstd(rows), dx(rows * dim, 7.0f), dz(rows * dim, 7.0f), dw(dim, 0.5f);
  k.gated_rms_norm.forward(x.data(), z.data(), w.data(), y.data(), rstd.data(), rows, dim,
                           static_cast<float>(c.p("eps")));
  ck.close(y, c.d("y"), 2e-6, "fwd y");
  ck.close(rstd, c.d("rstd"), 2e-6, "fwd rstd");
  k.gated_rms_norm.backward(x.data(), z.data(), w.data(), rstd.data(), dy.data(), dx.data(), dz.data(), dw.data(), rows,
                            dim);
  ck.close(dx, c.d("dx"), 5e-6, "bwd dx");
  ck.close(dz, c.d("dz"), 5e-6, "bwd dz");
  ck.close(dw, plus(c.d("dw"), 0.5), 5e-6, "bwd dw (+=)");
  std::vector<float> di = dy;  // dx over dy
  k.gated_rms_norm.backward(x.data(), z.data(), w.data(), rstd.data(), di.data(), di.data(), dz.data(), nullptr, rows,
                            dim);
  ck.close(di, c.d("dx"), 5e-6, "bwd dx in place");
}

struct Row {
  const char* op;
  const char* ref_case;  // directory written by kernels_ref.py
  void (*run)(const KernelTable&, const std::string&, Check&);
};

const Row kRows[] = {
    {"embedding", "embedding", embedding},
    {"rms_norm", "rmsnorm_odd_50", rms_norm},
    {"rms_norm", "rmsnorm_96", rms_norm},
    {"add_rms_norm", "add_rmsnorm_45", add_rms_norm},
    {"qk_norm_rope", "qk_norm_rope_d18", qk_norm_rope},
    {"qk_norm_rope", "qk_norm_rope_d64", qk_norm_rope},
    {"rope", "rope_d32", rope},
    {"rope", "rope_d64_theta1e4", rope},
    {"swiglu", "swiglu", swiglu},
    {"gate_up_swiglu", "gate_up_swiglu_7x11x13", gate_up_swiglu},
    {"attention", "attn_gqa_d32", attention},
    {"attention", "attn_mha_d40_lead", attention},
    {"attention", "attn_gqa4_d128", attention},        // Qwen3's head dim, 4 query heads per kv head
    {"attention", "attn_win70_gqa_d64", attention},    // sliding window across tiles of 64 rows
    {"attention", "attn_win64_mha_d32_lead", attention},
    {"attention", "attn_gqa_d160_win40", attention},   // head dim > 128
    {"linear", "linear_9x23x17", linear},
    {"grouped_linear", "grouped_linear_g4", grouped_linear},
    {"cross_entropy", "ce_v50", cross_entropy},
    {"linear_cross_entropy", "linear_ce_v37", linear_cross_entropy},
    {"adamw", "adamw", adamw},
    {"adamw", "adamw_default", adamw},
    {"adamw", "adamw_clipped", adamw},  // clip_grad_norm_'s coefficient as grad_scale
    {"norms", "elementwise_1001", norms},
    {"add", "elementwise_1001", add},
    {"add", "bias_rows_37x70", bias_rows},  // F.linear's bias and its gradient
    {"lora", "lora_13x37x29_r4", lora},     // PEFT's LoRA term and lora_dropout's mask, apply and backward
    {"moe_router", "moe_router_13x7_k3_norm", moe_router},  // ties inside the top-k and at its boundary
    {"moe_router", "moe_router_13x7_k3_raw", moe_router},
    {"moe_router", "moe_router_21x16_k4_norm", moe_router},
    {"moe_permute", "moe_permute_13x3_e7_h10", moe_permute},  // expert 4 gets no row
    {"moe_permute", "moe_permute_17x1_e5_h3", moe_permute},
    {"moe_router_loss", "moe_router_loss_13x7_k3", moe_router_loss},  // 3 padding tokens
    {"attention_block", "attn_block_gqa_d12", attention_block},    // queries and keys out of order, 2 segments
    {"attention_block", "attn_block_mha_d8_win5", attention_block},  // sliding window on the global positions
    {"causal_conv1d", "conv1d_packed_c37_k4", causal_conv1d},        // 4 segments, 2 shorter than K
    {"causal_conv1d", "conv1d_bias_linear_c16_k3", causal_conv1d},   // a bias, no activation
    {"gated_delta_rule", "gdr_packed_hv2hk_l2", gated_delta_rule},   // 4 segments, tails of 6, 1, 2; Hv = 2 Hk
    {"gated_delta_rule", "gdr_mha_nol2_noh0", gated_delta_rule},     // no l2norm, h0 / dht null
    {"gated_delta_rule", "gdr_d128_hv2hk", gated_delta_rule},        // head dim 128, 2 chunks + a tail
    {"gated_delta_rule", "gdn_gates_29x6", gdn_gates},               // softplus past its threshold
    {"gated_rms_norm", "gated_rmsnorm_d24", gated_rms_norm},
    {"gated_rms_norm", "gated_rmsnorm_d128", gated_rms_norm},
};

// Runs every row of `op` on the table's implementation of it; returns the failures.
std::vector<std::string> run_op(const std::string& op, const KernelTable& k, int* rows_run = nullptr) {
  std::vector<std::string> fails;
  int n = 0;
  for (const Row& r : kRows) {
    if (op != r.op) continue;
    ++n;
    Check ck{op + "[" + k.impl(op) + "] " + r.ref_case, {}};
    if (k.impl(op) == "bf16") ck.min_tol = 1.0 / 64;
    try {
      r.run(k, r.ref_case, ck);
    } catch (const std::exception& e) {
      ck.fails.push_back(ck.ctx + ": threw " + e.what());
    }
    fails.insert(fails.end(), ck.fails.begin(), ck.fails.end());
  }
  if (rows_run) *rows_run = n;
  return fails;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

class Conformance : public ::testing::TestWithParam<std::string> {};

#ifdef TWINKLE_CONFORMANCE_CUDA
TEST_P(Conformance, EveryCudaImplementationForwardAndBackward) {
  const std::string op = GetParam();
  const auto impls = Registry::global().implementations(op, "cuda");
  ASSERT_FALSE(impls.empty()) << "op " << op << " has no CUDA implementation";
  for (const auto& impl : impls) {
    const KernelTable dev = resolve_kernels("cuda", "fused", {{op, {{"cuda", impl}}}});
    ASSERT_EQ(dev.impl(op), impl);
    const KernelTable k = staged::staged_table(dev);
    int rows = 0;
    const auto fails = run_op(op, k, &rows);
    ASSERT_GT(rows, 0) << "op " << op << " has no row in the conformance table";
    const auto& cpu_only = cpu_only_ops();
    if (std::find(cpu_only.begin(), cpu_only.end(), op) != cpu_only.end()) {
      // no CUDA kernel yet: every row must stop at its first call with the refusal naming the op
      ASSERT_EQ(fails.size(), static_cast<size_t>(rows)) << join(fails);
      for (const auto& f : fails)
        EXPECT_TRUE(f.find("threw kernels: op '" + op + "'") != std::string::npos &&
                    f.find("has no CUDA implementation") != std::string::npos)
            << f;
      continue;
    }
    EXPECT_TRUE(fails.empty()) << join(fails);
  }
}
#else
TEST_P(Conformance, EveryImplementationForwardAndBackward) {
  const std::string op = GetParam();
  const auto impls = Registry::global().implementations(op, "cpu");
  ASSERT_FALSE(impls.empty()) << "op " << op << " has no CPU implementation";
  EXPECT_NE(std::find(impls.begin(), impls.end(), "reference"), impls.end()) << op << " lacks a reference";
  EXPECT_NE(std::find(impls.begin(), impls.end(), "fused"), impls.end()) << op << " lacks a fused implementation";
  for (const auto& impl : impls) {
    const KernelTable k = resolve_kernels("cpu", "fused", {{op, {{"cpu", impl}}}});
    ASSERT_EQ(k.impl(op), impl);
    int rows = 0;
    const auto fails = run_op(op, k, &rows);
    ASSERT_GT(rows, 0) << "op " << op << " has no row in the conformance table";
    EXPECT_TRUE(fails.empty()) << join(fails);
  }
}

#endif

INSTANTIATE_TEST_SUITE_P(Ops, Conformance, ::testing::ValuesIn(op_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---------------------------------------------------------------- the CUDA bf16 set vs the CPU bf16 set
#ifdef TWINKLE_CONFORMANCE_CUDA
// The table above holds the bf16 rows to 2^-6 of float64 (what any bf16 rounding gives). This check is
// sharper: the CUDA "bf16" set must round at the CPU set's points (twinkle/kernels/cpu/bf16_ops.h,
// attention_bf16.h), so on the same inputs the two differ only by fp32 summation order (rarely flipping one
// bf16 rounding downstream), far less than either differs from fp32. Per output tensor:
//   d16 = max|cuda bf16 - cpu bf16| / max|cpu bf16| <= kSame, and
//   d32 = max|cpu fp32  - cpu bf16| / max|cpu bf16| >= 10 * kSame (the check can fail: a missing rounding
//   of any one operand moves the result by about d32), except for scalars that are sums over every token
//   (the lm-head loss: its roundings average out, fp32 and bf16 agree to ~1e-5).
constexpr double kSame = 1e-4;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

double rel_max(const std::vector<float>& a, const std::vector<float>& ref) {
  double mx = 1e-30, err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(ref[i])));
    const double e = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(e <= err)) err = e;
  }
  return err / mx;
}

using Outputs = std::vector<std::pair<std::string, std::vector<float>>>;

// Runs `f` (the op calls on one table, returning its named outputs) on the staged CUDA bf16 table, the CPU
// bf16 table and the CPU fp32 table, and applies the rule above to every output.
void same_rounding(const std::string& op, const std::function<Outputs(const KernelTable&)>& f) {
  KernelTable dev = resolve_kernels("cuda", "fused");
  apply_mixed_precision(dev, "bf16");
  ASSERT_EQ(dev.impl(op), "bf16");
  const Outputs c16 = f(staged::staged_table(dev));
  KernelTable cpu16 = resolve_kernels("cpu", "fused");
  apply_mixed_precision(cpu16, "bf16");
  const Outputs h16 = f(cpu16), h32 = f(resolve_kernels("cpu", "fused"));
  for (size_t i = 0; i < h16.size(); ++i) {
    const double d16 = rel_max(c16[i].second, h16[i].second), d32 = rel_max(h32[i].second, h16[i].second);
    std::printf("  %-22s %-6s cuda bf16 vs cpu bf16 %.2e (tol %.0e) | cpu fp32 vs cpu bf16 %.2e\n", op.c_str(),
                h16[i].first.c_str(), d16, kSame, d32);
    EXPECT_LE(d16, kSame) << op << " " << h16[i].first << ": the CUDA bf16 set rounds elsewhere than the CPU set";
    if (h16[i].second.size() > 1) {
      EXPECT_GE(d32, 10 * kSame) << op << " " << h16[i].first << ": fp32 is as close as bf16; the check cannot fail";
    }
  }
}

TEST(CudaBf16Set, RoundsWhereTheCpuSetRounds) {
  {
    const int64_t M = 37, N = 53, K = 300;
    const auto X = randn(M * K, 1), W = randn(N * K, 2, 0.05f), dY = randn(M * N, 3);
    same_rounding("linear", [&](const KernelTable& t) {
      std::vector<float> Y(M * N), dX(M * K), dW(N * K, 0.0f);
      t.linear.forward(X.data(), W.data(), Y.data(), M, N, K, false);
      t.linear.backward(X.data(), W.data(), dY.data(), dX.data(), dW.data(), M, N, K, false);
      return Outputs{{"Y", Y}, {"dX", dX}, {"dW", dW}};
    });
  }
  {
    // the experts' grouped GEMM (one launch per product on the device): experts with no rows, one row, more
    // rows than a 64-row tile; N and K off the 64 / 32 tile sizes; a weight stride above N * K
    const int64_t N = 53, K = 300, E = 6, ws = N * K + 7;
    const std::vector<int64_t> counts = {0, 37, 1, 70, 0, 16};
    int64_t R = 0;
    for (int64_t c : counts) R += c;
    const auto X = randn(R * K, 21), W = randn((E - 1) * ws + N * K, 22, 0.05f), dY = randn(R * N, 23);
    same_rounding("grouped_linear", [&](const KernelTable& t) {
      std::vector<float> Y(R * N), Y2(R * N, 0.5f), dX(R * K), dW((E - 1) * ws + N * K, 0.25f);
      t.grouped_linear.forward(X.data(), W.data(), ws, counts.data(), E, Y.data(), N, K, false);
      t.grouped_linear.forward(X.data(), W.data(), ws, counts.data(), E, Y2.data(), N, K, true);
      t.grouped_linear.backward(X.data(), W.data(), ws, counts.data(), E, dY.data(), dX.data(), dW.data(), N, K,
                                false);
      return Outputs{{"Y", Y}, {"Y+=", Y2}, {"dX", dX}, {"dW", dW}};
    });
  }
  {
    const int64_t T = 29, I = 40, H = 96;
    const auto X = randn(T * H, 4), Wgu = randn(2 * I * H, 5, 0.1f), da = randn(T * I, 6);
    same_rounding("gate_up_swiglu", [&](const KernelTable& t) {
      std::vector<float> gu(T * 2 * I), a(T * I), dgu(T * 2 * I), dX(T * H), dW(2 * I * H, 0.0f);
      t.gate_up_swiglu.forward(X.data(), Wgu.data(), gu.data(), a.data(), T, I, H);
      t.gate_up_swiglu.backward(X.data(), Wgu.data(), gu.data(), da.data(), dgu.data(), dX.data(), dW.data(), T, I,
                                H, false);
      return Outputs{{"a", a}, {"dX", dX}, {"dWgu", dW}};
    });
  }
  {
    const int64_t T = 31, V = 301, H = 96;
    const auto X = randn(T * H, 7), W = randn(V * H, 8, 0.1f);
    std::vector<int32_t> labels(T);
    for (int64_t i = 0; i < T; ++i) labels[i] = i % 7 == 3 ? -100 : static_cast<int32_t>((i * 37) % V);
    same_rounding("linear_cross_entropy", [&](const KernelTable& t) {
      std::vector<float> lse(T), dX(T * H), dW(V * H, 0.0f);
      const double loss =
          t.linear_cross_entropy.forward_backward(X.data(), W.data(), labels.data(), T, V, H, 1.0f / 27, lse.data(),
                                                  dX.data(), dW.data(), 8);  // 4 chunks
      return Outputs{{"loss", {static_cast<float>(loss)}}, {"dX", dX}, {"dW", dW}};
    });
  }
  {
    const int64_t Hq = 4, Hkv = 2, D = 64, T = 120;
    const std::vector<int32_t> cu = {0, 70, 120};
    const auto q = randn(T * Hq * D, 9), k = randn(T * Hkv * D, 10), v = randn(T * Hkv * D, 11),
               dout = randn(T * Hq * D, 12);
    const float scale = 1.0f / 8.0f;
    // the forward of the bf16 set is the fp32 one: every backward gets the CPU fp32 forward's out and lse
    std::vector<float> out(T * Hq * D), lse(T * Hq);
    resolve_kernels("cpu", "fused").attention.forward(q.data(), k.data(), v.data(), out.data(), lse.data(), cu.data(),
                                                      2, Hq, Hkv, D, scale, 0);
    same_rounding("attention", [&](const KernelTable& t) {
      std::vector<float> dq(T * Hq * D), dk(T * Hkv * D), dv(T * Hkv * D);
      t.attention.backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                           dv.data(), cu.data(), 2, Hq, Hkv, D, scale, 0);
      return Outputs{{"dq", dq}, {"dk", dk}, {"dv", dv}};
    });
    // ring attention's block op: the same tokens as one query block against one key block (positions
    // within each segment), its bf16 backward with the flash forward's lse
    std::vector<int32_t> seg(T), pos(T);
    for (int s = 0; s < 2; ++s)
      for (int32_t t = cu[s]; t < cu[s + 1]; ++t) {
        seg[t] = s;
        pos[t] = t - cu[s];
      }
    std::vector<float> delta(T * Hq);
    resolve_kernels("cpu", "fused").attention_block.softmax_delta(out.data(), dout.data(), delta.data(), T, Hq, D);
    same_rounding("attention_block", [&](const KernelTable& t) {
      std::vector<float> dq(T * Hq * D, 0.0f), dk(T * Hkv * D, 0.0f), dv(T * Hkv * D, 0.0f);
      t.attention_block.backward(q.data(), seg.data(), pos.data(), T, k.data(), v.data(), seg.data(), pos.data(), T,
                                 lse.data(), delta.data(), dout.data(), dq.data(), dk.data(), dv.data(), Hq, Hkv, D,
                                 scale, 0);
      return Outputs{{"dq", dq}, {"dk", dk}, {"dv", dv}};
    });
  }
}

// ---------------------------------------------------------------- the CUDA MoE ops vs the CPU fused kernels
// src/kernels/cuda/moe.cu runs the loops of the CPU kernels (src/kernels/cpu/moe_*.cpp) one token / row / slot /
// expert per thread, with the same operations in the same order; the shapes here are below the CPU kernels'
// OpenMP thresholds (one thread). Every output of the staged CUDA fused set is compared with the CPU fused
// set's on the same inputs, in three classes:
//   kExact    the same bits on a GPU too: integers (top-k indices, the routing plan, counts, keys), copies,
//             float / double sums in a fixed order, single IEEE operations then a rounding;
//   kEmulated the same bits in the host emulation (TWINKLE_CUDA_SHIM: the same glibc expf / exp / log); on a
//             GPU within 1e-6 of the tensor's max (the device's transcendental functions);
//   kHostFma  outputs of a CPU multiply-add that the host compiler may fuse into an FMA (GCC's default
//             -ffp-contract=fast with an FMA -march, as -march=native here; the emulated kernels are built
//             without -march and do not): within 1e-6 of the tensor's max (a few float ulps; printed as
//             bit-identical or not), on a GPU too (nvcc contracts as well).
enum class Bits { kExact, kEmulated, kHostFma };

struct Same {
  std::string what;
  Bits cls;
  bool bitwise = false;
  double rel = 0.0;  // max |cuda - cpu| / max |cpu| (floating outputs; 1 for differing integers)
};

template <typename T>
Same same_bits(const std::string& what, Bits cls, const std::vector<T>& cuda, const std::vector<T>& cpu) {
  Same r{what, cls};
  r.bitwise = cuda.size() == cpu.size() &&
              (cpu.empty() || std::memcmp(cuda.data(), cpu.data(), cpu.size() * sizeof(T)) == 0);
  if constexpr (std::is_floating_point_v<T>) {
    double mx = 1e-30, err = cuda.size() == cpu.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < cpu.size() && i < cuda.size(); ++i) {
      mx = std::max(mx, std::fabs(static_cast<double>(cpu[i])));
      const double e = std::fabs(static_cast<double>(cuda[i]) - cpu[i]);
      if (!(e <= err)) err = e;
    }
    r.rel = err / mx;
  } else {
    r.rel = r.bitwise ? 0.0 : 1.0;
  }
  return r;
}

TEST(CudaMoe, SameResultsAsTheCpuFusedKernels) {
  const int64_t T = 37, E = 16, K = 4, H = 301, R = T * K;
  auto logits = randn(T * E, 21, 1.5f);
  for (int64_t e = 0; e < E; ++e) logits[e] = 0.5f;               // token 0: all experts equal
  for (int64_t e : {2, 9, 11, 14}) logits[E + e] = 3.0f;          // token 1: a four-way tie filling the top-k
  logits[2 * E + 5] = 4.0f, logits[2 * E + 7] = logits[2 * E + 3] = 3.5f;  // token 2: a tie across the boundary
  logits[2 * E + 8] = logits[2 * E + 1] = 3.5f;
  const auto dw = randn(T * K, 22), dprobs = randn(T * E, 23, 0.3f), dextra = randn(T * E, 24, 0.2f),
             x = randn(T * H, 25), dperm = randn(R * H, 26), dx0 = randn(T * H, 27), y = randn(R * H, 28),
             dun = randn(T * H, 29), dprobs0 = randn(T * E, 30, 0.1f), dlogits0 = randn(T * E, 31, 0.01f);
  std::vector<uint8_t> mask(T, 1);
  mask[3] = mask[20] = mask[T - 1] = 0;
  std::vector<uint64_t> key(T);
  for (int64_t i = 0; i < T; ++i) key[i] = (static_cast<uint64_t>(i) + 7) * 0x9e3779b97f4a7c15ull;
  const std::vector<double> ps0 = [&] {
    std::vector<double> v(E);
    for (int64_t e = 0; e < E; ++e) v[e] = 0.1 * static_cast<double>(e) - 0.7;  // the host sums accumulate
    return v;
  }();
  // Every op after the router forward takes the CPU fused set's outputs as its inputs (probabilities, top-k,
  // plan, lse), so that each op is compared on the same inputs (on a GPU the forward's own outputs differ).
  const KernelTable host = resolve_kernels("cpu", "fused");
  struct Routed {
    std::vector<float> probs, w;
    std::vector<int32_t> idx;
  };
  Routed routed[2];  // norm_topk_prob, then raw
  for (int r = 0; r < 2; ++r) {
    routed[r] = {std::vector<float>(T * E), std::vector<float>(T * K), std::vector<int32_t>(T * K)};
    host.moe_router.forward(logits.data(), routed[r].probs.data(), routed[r].idx.data(), routed[r].w.data(), T, E, K,
                            r == 0);
  }
  const Routed& in = routed[0];
  std::vector<int64_t> counts_in(E);
  std::vector<int32_t> ros(R), sor(R);
  host.moe_permute.sort_by_expert(in.idx.data(), T, K, E, counts_in.data(), ros.data(), sor.data());
  std::vector<float> lse_in(T);
  host.moe_router_loss.z_loss_forward(logits.data(), mask.data(), T, E, lse_in.data());
  struct Run {
    std::vector<std::pair<std::string, std::vector<float>>> f;
    std::vector<std::pair<std::string, std::vector<int64_t>>> i;
    std::vector<std::pair<std::string, std::vector<double>>> d;
  };
  const auto run = [&](const KernelTable& t) {
    Run o;
    for (int r = 0; r < 2; ++r) {
      const bool norm = r == 0;
      const std::string n = norm ? " (norm)" : " (raw)";
      const Routed& ri = routed[r];
      std::vector<float> probs(T * E), w(T * K), dl(T * E);
      std::vector<int32_t> idx(T * K);
      t.moe_router.forward(logits.data(), probs.data(), idx.data(), w.data(), T, E, K, norm);
      o.f.push_back({"router probs" + n, probs});
      o.i.push_back({"router topk_idx" + n, widen(idx)});
      o.f.push_back({"router topk_w" + n, w});
      t.moe_router.backward(ri.probs.data(), ri.idx.data(), ri.w.data(), dw.data(), dprobs.data(), dextra.data(),
                            dl.data(), T, E, K, norm);
      o.f.push_back({"router dlogits" + n, dl});
      t.moe_router.backward(ri.probs.data(), ri.idx.data(), ri.w.data(), dw.data(), nullptr, nullptr, dl.data(), T, E,
                            K, norm);
      o.f.push_back({"router dlogits (dtopk_w only)" + n, dl});
    }
    std::vector<int64_t> counts(E);
    std::vector<int32_t> ros_t(R), sor_t(R);
    t.moe_permute.sort_by_expert(in.idx.data(), T, K, E, counts.data(), ros_t.data(), sor_t.data());
    o.i.push_back({"sort counts", counts});
    o.i.push_back({"sort row_of_slot", widen(ros_t)});
    o.i.push_back({"sort slot_of_row", widen(sor_t)});
    std::vector<float> out(R * H), dx(T * H), dxa = dx0, uo(T * H), dy(R * H), dtw(R);
    t.moe_permute.permute_forward(x.data(), sor.data(), out.data(), R, K, H);
    o.f.push_back({"permute fwd", out});
    t.moe_permute.permute_backward(dperm.data(), ros.data(), dx.data(), T, K, H, false);
    o.f.push_back({"permute bwd", dx});
    t.moe_permute.permute_backward(dperm.data(), ros.data(), dxa.data(), T, K, H, true);
    o.f.push_back({"permute bwd (accumulate)", dxa});
    t.moe_permute.unpermute_forward(y.data(), ros.data(), in.w.data(), uo.data(), T, K, H);
    o.f.push_back({"unpermute fwd", uo});
    t.moe_permute.unpermute_backward(y.data(), ros.data(), in.w.data(), dun.data(), dy.data(), dtw.data(), T, K, H);
    o.f.push_back({"unpermute bwd dy", dy});
    o.f.push_back({"unpermute bwd dtopk_w", dtw});
    std::vector<uint64_t> kout(R);
    t.moe_permute.permute_keys(key.data(), sor.data(), kout.data(), R, K);
    o.i.push_back({"permute_keys", std::vector<int64_t>(kout.begin(), kout.end())});
    for (const bool masked : {true, false}) {
      const std::string m = masked ? " (mask)" : " (no mask)";
      auto ps = ps0;
      std::vector<int64_t> c(E, 3);
      const int64_t nreal = t.moe_router_loss.routing_stats(in.probs.data(), in.idx.data(),
                                                            masked ? mask.data() : nullptr, T, E, K, ps.data(),
                                                            c.data());
      o.i.push_back({"stats real tokens" + m, {nreal}});
      o.i.push_back({"stats counts" + m, c});
      o.d.push_back({"stats prob_sum" + m, ps});
    }
    auto dp = dprobs0;
    t.moe_router_loss.aux_loss_backward(counts_in.data(), mask.data(), T, E, 0.0123, dp.data());
    o.f.push_back({"aux bwd", dp});
    std::vector<float> lse(T);
    const double zsum = t.moe_router_loss.z_loss_forward(logits.data(), mask.data(), T, E, lse.data());
    o.d.push_back({"z fwd sum (mask)", {zsum}});
    o.f.push_back({"z fwd lse", lse});
    auto dz = dlogits0;
    t.moe_router_loss.z_loss_backward(in.probs.data(), lse_in.data(), mask.data(), T, E, 1e-3 / 34, dz.data());
    o.f.push_back({"z bwd", dz});
    return o;
  };
  const Run gpu = run(staged::staged_table(resolve_kernels("cuda", "fused")));
  const Run cpu = run(host);
  const auto cls = [](const std::string& w) {
    for (const char* h : {"router dlogits", "unpermute fwd", "z fwd sum"})  // a CPU multiply-add (kHostFma)
      if (w.rfind(h, 0) == 0) return Bits::kHostFma;
    for (const char* e : {"router probs", "router topk_w", "z fwd lse"})  // expf / exp / log
      if (w.rfind(e, 0) == 0) return Bits::kEmulated;
    return Bits::kExact;
  };
  std::vector<Same> cmp;
  ASSERT_EQ(gpu.f.size(), cpu.f.size());
  ASSERT_EQ(gpu.i.size(), cpu.i.size());
  ASSERT_EQ(gpu.d.size(), cpu.d.size());
  for (size_t i = 0; i < cpu.f.size(); ++i)
    cmp.push_back(same_bits(cpu.f[i].first, cls(cpu.f[i].first), gpu.f[i].second, cpu.f[i].second));
  for (size_t i = 0; i < cpu.i.size(); ++i)
    cmp.push_back(same_bits(cpu.i[i].first, Bits::kExact, gpu.i[i].second, cpu.i[i].second));
  for (size_t i = 0; i < cpu.d.size(); ++i)
    cmp.push_back(same_bits(cpu.d[i].first, cls(cpu.d[i].first), gpu.d[i].second, cpu.d[i].second));
#ifdef TWINKLE_CUDA_SHIM
  const bool emulated = true;
#else
  const bool emulated = false;
#endif
  int identical = 0;
  for (const Same& c : cmp) {
    identical += c.bitwise;
    std::printf("  moe cuda vs cpu fused  %-36s %s (max rel %.2e)%s\n", c.what.c_str(),
                c.bitwise ? "bit-identical" : "differs", c.rel, c.cls == Bits::kHostFma ? " [host FMA]" : "");
    if (c.cls == Bits::kExact || (emulated && c.cls == Bits::kEmulated)) {
      EXPECT_TRUE(c.bitwise) << c.what << ": the CUDA fused set differs from the CPU fused set (max rel " << c.rel
                             << ")";
    } else {
      EXPECT_LE(c.rel, 1e-6) << c.what;
    }
  }
  std::printf("  moe cuda vs cpu fused: %d of %zu outputs bit-identical\n", identical, cmp.size());
}
#endif

// ---------------------------------------------------------------- a test of the test
#ifndef TWINKLE_CONFORMANCE_CUDA

void rms_fwd_off(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps) {
  twinkle::kernels::cpu::rmsnorm_forward(x, w, y, rstd, rows, dim, eps);
  y[rows * dim - 1] *= 1.0001f;  // one element 1e-4 off
}
void rms_bwd_overwrites_dw(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                           int64_t rows, int64_t dim) {
  std::vector<float> tmp(static_cast<size_t>(dim), 0.0f);  // the classic bug: dw = ... instead of dw += ...
  twinkle::kernels::cpu::rmsnorm_backward(x, w, rstd, dy, dx, dw ? tmp.data() : nullptr, rows, dim);
  if (dw) std::copy(tmp.begin(), tmp.end(), dw);
}

TEST(ConformanceSelfTest, BrokenKernelsRegisteredThroughAMappingFail) {
  Registry& reg = Registry::global();
  reg.add("cpu", "broken_forward", RmsNormOp{rms_fwd_off, twinkle::kernels::cpu::rmsnorm_backward});
  reg.add("cpu", "broken_backward", RmsNormOp{twinkle::kernels::cpu::rmsnorm_forward, rms_bwd_overwrites_dw});
  const auto f_fwd = run_op("rms_norm", resolve_kernels("cpu", "fused", {{"rms_norm", {{"cpu", "broken_forward"}}}}));
  const auto f_bwd = run_op("rms_norm", resolve_kernels("cpu", "fused", {{"rms_norm", {{"cpu", "broken_backward"}}}}));
  const auto f_ok = run_op("rms_norm", resolve_kernels("cpu", "fused"));
  reg.remove("rms_norm", "cpu", "broken_forward");
  reg.remove("rms_norm", "cpu", "broken_backward");
  ASSERT_FALSE(f_fwd.empty()) << "a forward 1e-4 off passed the conformance table";
  EXPECT_NE(join(f_fwd).find("fwd y"), std::string::npos) << join(f_fwd);
  ASSERT_FALSE(f_bwd.empty()) << "a backward that overwrites dw passed the conformance table";
  EXPECT_NE(join(f_bwd).find("bwd dw"), std::string::npos) << join(f_bwd);
  EXPECT_TRUE(f_ok.empty()) << join(f_ok);
  // the mapping only replaced rms_norm on the cpu: a mapping entry for another device is ignored
  const KernelTable other = resolve_kernels("cpu", "reference", {{"rms_norm", {{"npu", "broken_forward"}}}});
  EXPECT_EQ(other.impl("rms_norm"), "reference");
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef TWINKLE_CONFORMANCE_CUDA
  std::string why;
  if (twinkle::cuda::visible_device_count(&why) == 0) {
    std::printf("SKIPPED: no GPU visible (CUDA_VISIBLE_DEVICES=%s): %s\n",
                std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>", why.c_str());
    return 77;
  }
  twinkle::cuda::init();
  for (const auto& d : twinkle::cuda::device_info())
    std::printf("GPU %d: %s, %d SMs, %.1f GiB, sm_%d%d\n", d.ordinal, d.name.c_str(), d.sms,
                d.total_memory / 1073741824.0, d.cc_major, d.cc_minor);
#endif
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new kernels_ref::RefEnv("KERNELS_REF_DIR", "kernels_ref.py"));
  return RUN_ALL_TESTS();
}
