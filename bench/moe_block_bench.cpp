// bench/moe_block_bench.cpp — one Qwen3-MoE sparse block, forward + backward, twinkle's CPU
// kernels: gate GEMM -> top-k softmax router -> permute by expert -> grouped GEMM gate/up ->
// SwiGLU -> grouped GEMM down -> probability-weighted combine, and the whole backward (router
// gradient through the full softmax, every expert weight gradient). Same shapes and work as
// bench/moe_peer.py (transformers' loop over experts in PyTorch eager); scripts/bench-moe runs
// both in one run and prints the ratio. Buffers are allocated once, outside the timed steps.
//   build/bench/moe_block_bench --config a30b --threads 1 [--steps 3 --warmup 1]
// Prints one JSON line: config, threads, tokens, step_s, tokens_per_s, gflops (expert and gate
// GEMM FLOPs: 3 x 2*T*k*H*I + 2*T*H*E forward, twice that backward).
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/grouped_gemm.h"
#include "twinkle/kernels/cpu/moe_permute.h"
#include "twinkle/kernels/cpu/moe_router.h"
#include "twinkle/kernels/cpu/swiglu.h"

using namespace twinkle::kernels::cpu;

int main(int argc, char** argv) {
  std::string config = "a30b";
  int threads = 1, steps = 3, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--config") config = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--warmup") warmup = std::stoi(next());
    else {
      std::fprintf(stderr, "usage: moe_block_bench [--config a30b|tiny] [--threads N] [--steps K] [--warmup W]\n");
      return 2;
    }
  }
  int64_t T = 2048, H, I, E, K;
  if (config == "a30b") {  // Qwen3-30B-A3B's routing (128 experts, top-8, I/H = 0.375) at hidden 512
    H = 512, I = 192, E = 128, K = 8;
  } else if (config == "tiny") {  // models/qwen3-moe-tiny's block
    H = 128, I = 64, E = 8, K = 2;
  } else {
    std::fprintf(stderr, "unknown --config %s (a30b, tiny)\n", config.c_str());
    return 2;
  }
  omp_set_num_threads(threads);
  const int64_t R = T * K;
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto randv = [&](int64_t n, float s) {
    std::vector<float> v(n);
    for (auto& x : v) x = s * nd(g);
    return v;
  };
  auto x = randv(T * H, 1.0f), dout = randv(T * H, 1.0f), wr = randv(E * H, 0.02f);
  auto wg = randv(E * I * H, 0.02f), wu = randv(E * I * H, 0.02f), wd = randv(E * H * I, 0.02f);
  std::vector<float> logits(T * E), probs(T * E), tw(T * K), xp(R * H), gt(R * I), up(R * I), h(R * I), y(R * H),
      out(T * H), dy(R * H), dtw(T * K), dh(R * I), dg(R * I), du(R * I), dxp(R * H), dx(T * H), dl(T * E),
      dwr(E * H), dwg(E * I * H), dwu(E * I * H), dwd(E * H * I);
  std::vector<int32_t> sel(T * K), ros(R), sor(R);
  std::vector<int64_t> counts(E);
  auto step = [&]() {
    linear_forward(x.data(), wr.data(), logits.data(), T, E, H);
    moe_router_forward(logits.data(), probs.data(), sel.data(), tw.data(), T, E, K, true);
    moe_sort_by_expert(sel.data(), T, K, E, counts.data(), ros.data(), sor.data());
    moe_permute_forward(x.data(), sor.data(), xp.data(), R, K, H);
    grouped_linear_forward(xp.data(), wg.data(), I * H, counts.data(), E, gt.data(), I, H);
    grouped_linear_forward(xp.data(), wu.data(), I * H, counts.data(), E, up.data(), I, H);
    swiglu_forward(gt.data(), up.data(), h.data(), R * I);
    grouped_linear_forward(h.data(), wd.data(), H * I, counts.data(), E, y.data(), H, I);
    moe_unpermute_forward(y.data(), ros.data(), tw.data(), out.data(), T, K, H);
    moe_unpermute_backward(y.data(), ros.data(), tw.data(), dout.data(), dy.data(), dtw.data(), T, K, H);
    grouped_linear_backward(h.data(), wd.data(), H * I, counts.data(), E, dy.data(), dh.data(), dwd.data(), H, I);
    swiglu_backward(gt.data(), up.data(), dh.data(), dg.data(), du.data(), R * I);
    grouped_linear_backward(xp.data(), wg.data(), I * H, counts.data(), E, dg.data(), dxp.data(), dwg.data(), I, H);
    grouped_linear_backward(xp.data(), wu.data(), I * H, counts.data(), E, du.data(), dxp.data(), dwu.data(), I, H,
                            true);
    moe_permute_backward(dxp.data(), ros.data(), dx.data(), T, K, H);
    moe_router_backward(probs.data(), sel.data(), tw.data(), dtw.data(), nullptr, nullptr, dl.data(), T, E, K, true);
    linear_backward(x.data(), wr.data(), dl.data(), dx.data(), dwr.data(), T, E, H, /*accumulate_dx=*/true);
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double sum = 0;
  for (double t : times) sum += t;
  const double step_s = sum / static_cast<double>(times.size());
  const double flops = 3.0 * (3.0 * 2.0 * R * H * I + 2.0 * T * H * E);
  std::printf("{\"engine\": \"twinkle\", \"config\": \"%s\", \"threads\": %d, \"tokens\": %lld, \"step_s\": %.6f, "
              "\"tokens_per_s\": %.1f, \"gflops\": %.1f}\n",
              config.c_str(), threads, static_cast<long long>(T), step_s, T / step_s, flops / step_s / 1e9);
  return 0;
}
