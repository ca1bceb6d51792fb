// bench/kernels_bench — throughput of twinkle's CPU kernels (see bench/README.md, section "CPU kernels").
//
//   build/bench/kernels_bench [--threads N] [--quick] [--cpu-time] [--fusions] [--lm-head]
//
// --cpu-time times with the process CPU clock instead of wall time: with --threads 1 on a shared,
// busy machine this removes time-slicing by other processes from the figures.
//
// Memory-bound kernels report GB/s = bytes that must move (each input read once, each output written
// once) / best time. Attention reports GFLOP/s with the FlashAttention convention: forward
// 4 * D * Hq * (causal pairs), backward 2.5x forward (5 matmuls instead of 2), causal pairs = L(L+1)/2
// per sequence. Times are the best of several repetitions after a warm-up.
// The "fusions" table times each fused op of the `fused` kernel set (twinkle/kernels/registry.h) against
// the unfused sequence of today's kernels it replaces, forward and backward; --fusions runs only it.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "twinkle/kernels/cpu/adamw.h"
#include "twinkle/kernels/cpu/add_rmsnorm.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/gate_up_swiglu.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/linear_cross_entropy.h"
#include "twinkle/kernels/cpu/qk_norm_rope.h"
#include "twinkle/kernels/cpu/reduce.h"
#include "twinkle/kernels/cpu/rmsnorm.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/cpu/swiglu.h"

using namespace twinkle::kernels::cpu;

namespace {

bool g_cpu_time = false;  // --cpu-time: process CPU time instead of wall time (1 thread on a busy machine)

double now_s() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double best_seconds(const std::function<void()>& fn, int reps) {
  fn();  // warm-up (page faults, caches)
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    fn();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

std::vector<float> randv(size_t n, unsigned seed, float scale = 1.0f) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return v;
}

void report_bw(const char* name, const std::string& shape, double bytes, double sec) {
  std::printf("%-22s %-28s %9.3f ms %8.1f GB/s\n", name, shape.c_str(), sec * 1e3, bytes / sec / 1e9);
}

void report_fusion(const char* name, const std::string& shape, double unfused, double fused) {
  std::printf("%-26s %-24s %9.3f ms %9.3f ms %7.2fx\n", name, shape.c_str(), unfused * 1e3, fused * 1e3,
              unfused / fused);
}

// Each fused op against the unfused sequence of kernels it replaces (the model's calls before the fusion).
void bench_fusions(int reps) {
  std::printf("\n%-26s %-24s %12s %12s %8s\n", "fusion", "shape", "unfused", "fused", "gain");
  {  // residual add + RMSNorm: h = x + r; y = rmsnorm(h)   |  backward: rmsnorm bwd, then += residual grad
    const int64_t rows = 2048, dim = 1024, n = rows * dim;
    auto x = randv(n, 1), r = randv(n, 2), w = randv(dim, 3), dy = randv(n, 4), dres = randv(n, 5);
    std::vector<float> h(n), y(n), rstd(rows), dh(n), dw(dim);
    const std::string sh = "[2048,1024]";
    report_fusion("add+rmsnorm fwd", sh, best_seconds([&] {
                    add_out(h.data(), x.data(), r.data(), n);
                    rmsnorm_forward(h.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-6f);
                  }, reps),
                  best_seconds([&] {
                    add_rmsnorm_forward(x.data(), r.data(), h.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-6f);
                  }, reps));
    report_fusion("add+rmsnorm bwd", sh, best_seconds([&] {
                    rmsnorm_backward(h.data(), w.data(), rstd.data(), dy.data(), dh.data(), dw.data(), rows, dim);
                    add_inplace(dh.data(), dres.data(), n);
                  }, reps),
                  best_seconds([&] {
                    add_rmsnorm_backward(h.data(), w.data(), rstd.data(), dy.data(), dres.data(), dh.data(), dw.data(),
                                         rows, dim);
                  }, reps));
  }
  {  // q/k per-head RMSNorm + RoPE
    const int64_t T = 2048, Hh = 16, D = 128, n = T * Hh * D;
    RopeTable tab = make_rope_table(4096, D, 1e6);
    std::vector<int32_t> pos(T);
    for (int64_t i = 0; i < T; ++i) pos[i] = static_cast<int32_t>(i);
    auto x = randv(n, 6), w = randv(D, 7), dy = randv(n, 8);
    std::vector<float> y(n), rstd(T * Hh), dx(n), dw(D);
    const std::string sh = "[2048,16,128]";
    report_fusion("qk_norm+rope fwd", sh, best_seconds([&] {
                    rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), T * Hh, D, 1e-6f);
                    rope_forward(y.data(), pos.data(), tab, T, Hh, D);
                  }, reps),
                  best_seconds([&] {
                    qk_norm_rope_forward(x.data(), w.data(), y.data(), rstd.data(), pos.data(), tab, T, Hh, D, 1e-6f);
                  }, reps));
    report_fusion("qk_norm+rope bwd", sh, best_seconds([&] {
                    std::memcpy(dx.data(), dy.data(), n * 4);  // the unfused path rotates in place
                    rope_backward(dx.data(), pos.data(), tab, T, Hh, D);
                    rmsnorm_backward(x.data(), w.data(), rstd.data(), dx.data(), dx.data(), dw.data(), T * Hh, D);
                  }, reps),
                  best_seconds([&] {
                    qk_norm_rope_backward(x.data(), w.data(), rstd.data(), pos.data(), tab, dy.data(), dx.data(),
                                          dw.data(), T, Hh, D);
                  }, reps));
  }
  {  // gate/up as one GEMM + SwiGLU, bench config (b)'s MLP: T = 1024 tokens, H = 1024, I = 2816
    const int64_t T = 1024, H = 1024, I = 2816;
    auto x = randv(T * H, 9), wgu = randv(2 * I * H, 10, 0.03f), da = randv(T * I, 11);
    std::vector<float> g(T * I), u(T * I), a(T * I), gu(T * 2 * I), dg(T * I), du(T * I), dgu(T * 2 * I), dx(T * H),
        dw(2 * I * H);
    const std::string sh = "T1024 H1024 I2816";
    const float* wg = wgu.data();
    const float* wu = wgu.data() + I * H;
    report_fusion("gate/up+swiglu fwd", sh, best_seconds([&] {
                    linear_forward(x.data(), wg, g.data(), T, I, H);
                    linear_forward(x.data(), wu, u.data(), T, I, H);
                    swiglu_forward(g.data(), u.data(), a.data(), T * I);
                  }, reps),
                  best_seconds([&] { gate_up_swiglu_forward(x.data(), wgu.data(), gu.data(), a.data(), T, I, H); }, reps));
    report_fusion("gate/up+swiglu bwd", sh, best_seconds([&] {
                    swiglu_backward(g.data(), u.data(), da.data(), dg.data(), du.data(), T * I);
                    linear_backward(x.data(), wg, dg.data(), dx.data(), dw.data(), T, I, H);
                    linear_backward(x.data(), wu, du.data(), dx.data(), dw.data() + I * H, T, I, H, true);
                  }, reps),
                  best_seconds([&] {
                    gate_up_swiglu_backward(x.data(), wgu.data(), gu.data(), da.data(), dgu.data(), dx.data(),
                                            dw.data(), T, I, H, false);
                  }, reps));
  }
}

// The lm head + cross entropy of bench configs a (hidden 256, vocab 151,936, 2048 tokens in chunks of
// 1024) and b (hidden 1024, vocab 32,000, 1024 tokens): linear_cross_entropy against the sequence it
// replaced per chunk (logits GEMM over the whole vocabulary, cross_entropy_forward, ce_backward in
// place, the dX and dW GEMMs). GFLOP/s counts the three GEMMs (6 T V H).
void bench_lm_head(const char* name, int64_t T, int64_t V, int64_t H, int64_t chunk, int reps) {
  auto x = randv(T * H, 20), w = randv(V * H, 21, 0.05f);
  std::vector<int32_t> lab(T);
  for (int64_t t = 0; t < T; ++t) lab[t] = static_cast<int32_t>((t * 7919) % V);
  std::vector<float> lse(T), dx(T * H), dw(V * H), scale(chunk, 1.0f / T);
  std::vector<float> logits;
  const double flops = 6.0 * T * V * H;
  const int r = std::max(2, reps / 3);
  const double unfused = best_seconds([&] {
    logits.resize(static_cast<size_t>(chunk * V));
    for (int64_t c0 = 0; c0 < T; c0 += chunk) {
      linear_forward(x.data() + c0 * H, w.data(), logits.data(), chunk, V, H);
      cross_entropy_forward(logits.data(), lab.data() + c0, chunk, V, lse.data() + c0);
      ce_backward(logits.data(), lab.data() + c0, lse.data() + c0, chunk, V, V, 0, scale.data(), logits.data());
      linear_backward(x.data() + c0 * H, w.data(), logits.data(), dx.data() + c0 * H, dw.data(), chunk, V, H);
    }
  }, r);
  std::vector<float>().swap(logits);  // give it back before the fused kernel takes its own
  const double fused = best_seconds([&] {
    linear_cross_entropy(x.data(), w.data(), lab.data(), T, V, H, 1.0f / T, lse.data(), dx.data(), dw.data(), chunk);
  }, r);
  const std::string shape = "T" + std::to_string(T) + " V" + std::to_string(V) + " H" + std::to_string(H);
  report_fusion(name, shape, unfused, fused);
  std::printf("%-26s %-24s %9.1f GF/s %7.1f GF/s (the three GEMMs' 6TVH)\n", "", "", flops / unfused / 1e9,
              flops / fused / 1e9);
}

void bench_lm_heads(int reps) {
  std::printf("\n%-26s %-24s %12s %12s %8s\n", "lm head + cross entropy", "shape", "unfused", "fused", "gain");
  bench_lm_head("fwd+bwd (config a)", 2048, 151936, 256, 1024, reps);
  bench_lm_head("fwd+bwd (config b)", 1024, 32000, 1024, 1024, reps);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  bool quick = false, fusions_only = false, lm_head_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--cpu-time")) g_cpu_time = true;
    else if (!std::strcmp(argv[i], "--fusions")) fusions_only = true;
    else if (!std::strcmp(argv[i], "--lm-head")) lm_head_only = true;
    else {
      std::fprintf(stderr, "usage: kernels_bench [--threads N] [--quick] [--cpu-time] [--fusions] [--lm-head]\n");
      return 2;
    }
  }
  if (threads > 0) omp_set_num_threads(threads);
  std::printf("kernels_bench: %d OpenMP thread(s), %s\n", omp_get_max_threads(),
              g_cpu_time ? "process CPU time" : "wall time");
  const int reps = quick ? 3 : 10;
  if (fusions_only || lm_head_only) {
    if (fusions_only) bench_fusions(reps);
    bench_lm_heads(reps);
    return 0;
  }

  {  // RMSNorm: tokens x hidden
    const int64_t rows = 2048, dim = 1024, n = rows * dim;
    auto x = randv(n, 1), w = randv(dim, 2), dy = randv(n, 3);
    std::vector<float> y(n), rstd(rows), dx(n), dw(dim);
    const std::string sh = "[2048,1024]";
    report_bw("rmsnorm fwd", sh, 2.0 * n * 4,
              best_seconds([&] { rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-6f); }, reps));
    report_bw("rmsnorm bwd", sh, 3.0 * n * 4, best_seconds([&] {
                rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, dim);
              }, reps));
  }
  {  // SwiGLU: tokens x intermediate
    const int64_t n = 2048 * 3072;
    auto g = randv(n, 4, 3.0f), u = randv(n, 5), dh = randv(n, 6);
    std::vector<float> h(n), dg(n), du(n);
    const std::string sh = "[2048,3072]";
    report_bw("swiglu fwd", sh, 3.0 * n * 4, best_seconds([&] { swiglu_forward(g.data(), u.data(), h.data(), n); }, reps));
    report_bw("swiglu bwd", sh, 5.0 * n * 4, best_seconds([&] {
                swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
              }, reps));
  }
  {  // RoPE: tokens x heads x head_dim, in place
    const int64_t T = 2048, H = 16, D = 128, n = T * H * D;
    RopeTable tab = make_rope_table(4096, D, 1e6);
    std::vector<int32_t> pos(T);
    for (int64_t i = 0; i < T; ++i) pos[i] = static_cast<int32_t>(i);
    auto x = randv(n, 7);
    const std::string sh = "[2048,16,128]";
    report_bw("rope fwd (in place)", sh, 2.0 * n * 4,
              best_seconds([&] { rope_forward(x.data(), pos.data(), tab, T, H, D); }, reps));
    report_bw("rope bwd (in place)", sh, 2.0 * n * 4,
              best_seconds([&] { rope_backward(x.data(), pos.data(), tab, T, H, D); }, reps));
  }
  {  // AdamW: 16M parameters (p, g, m, v read; p, m, v written)
    const int64_t n = 16 << 20;
    auto p = randv(n, 8), g = randv(n, 9);
    std::vector<float> m(n), v(n);
    int64_t step = 0;
    report_bw("adamw step", "n=16M", 7.0 * n * 4, best_seconds([&] {
                adamw_step(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step);
              }, reps));
  }
  {  // cross entropy: forward (max + sumexp) and backward over [T, V]
    const int64_t T = 2048, V = 32000, n = T * V;
    auto x = randv(n, 10, 4.0f);
    std::vector<int32_t> lab(T);
    for (int64_t t = 0; t < T; ++t) lab[t] = static_cast<int32_t>((t * 7919) % V);
    std::vector<float> lse(T), d(n), scale(T, 1.0f / T);
    const std::string sh = "[2048,32000]";
    report_bw("cross_entropy fwd", sh, 1.0 * n * 4,
              best_seconds([&] { cross_entropy_forward(x.data(), lab.data(), T, V, lse.data()); }, reps));
    report_bw("cross_entropy bwd", sh, 2.0 * n * 4, best_seconds([&] {
                ce_backward(x.data(), lab.data(), lse.data(), T, V, V, 0, scale.data(), d.data());
              }, reps));
  }

  // Attention: one packed batch of sequences of length L filling T tokens.
  std::printf("\n%-10s %5s %5s %4s %4s %4s %10s %10s %10s %10s\n", "attention", "T", "L", "Hq", "Hkv", "D", "fwd ms",
              "fwd GF/s", "bwd ms", "bwd GF/s");
  struct A {
    int64_t T, L, Hq, Hkv, D;
  };
  std::vector<A> cfgs = {{512, 512, 8, 4, 32},    {512, 512, 8, 4, 64},    {1024, 1024, 8, 4, 64},
                         {2048, 2048, 8, 4, 32},  {2048, 2048, 8, 4, 64},  {2048, 2048, 8, 4, 128},
                         {2048, 512, 8, 4, 64}};
  if (quick) cfgs = {{512, 512, 8, 4, 64}, {2048, 2048, 8, 4, 64}};
  for (const A& a : cfgs) {
    const int64_t ns = a.T / a.L;
    std::vector<int32_t> cu(ns + 1);
    for (int64_t i = 0; i <= ns; ++i) cu[i] = static_cast<int32_t>(i * a.L);
    auto q = randv(a.T * a.Hq * a.D, 11), k = randv(a.T * a.Hkv * a.D, 12), v = randv(a.T * a.Hkv * a.D, 13),
         dout = randv(a.T * a.Hq * a.D, 14);
    std::vector<float> out(a.T * a.Hq * a.D), lse(a.T * a.Hq), dq(q.size()), dk(k.size()), dv(v.size());
    const float scale = 1.0f / std::sqrt(static_cast<float>(a.D));
    const double pairs = static_cast<double>(ns) * a.L * (a.L + 1) / 2.0;
    const double ffl = 4.0 * a.D * a.Hq * pairs, bfl = 2.5 * ffl;
    const int r = std::max(1, reps / 2);
    const double tf = best_seconds([&] {
      flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), cu.data(), ns, a.Hq, a.Hkv, a.D,
                              scale);
    }, r);
    const double tb = best_seconds([&] {
      flash_attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                               dv.data(), cu.data(), ns, a.Hq, a.Hkv, a.D, scale);
    }, r);
    std::printf("%-10s %5ld %5ld %4ld %4ld %4ld %10.2f %10.1f %10.2f %10.1f\n", "", static_cast<long>(a.T),
                static_cast<long>(a.L), static_cast<long>(a.Hq), static_cast<long>(a.Hkv), static_cast<long>(a.D),
                tf * 1e3, ffl / tf / 1e9, tb * 1e3, bfl / tb / 1e9);
  }
  bench_fusions(reps);
  bench_lm_heads(reps);
  return 0;
}
