// bench/gdn_bench — the gated delta rule of a Gated DeltaNet layer on the CPU: twinkle's chunked kernel
// (the "fused" set, twinkle/kernels/cpu/gated_delta_rule.h) and its token recurrence (the "reference" set,
// double), forward and forward + backward. bench/gdn_bench.py runs it next to transformers'
// torch_chunk_gated_delta_rule on the same shapes and threads and prints the ratios (bench/README.md,
// section "Gated delta rule").
//
//   build/bench/gdn_bench [--threads N] [--tokens T] [--seqs S] [--hk HK] [--hv HV] [--dk D] [--dv D]
//                         [--reps R] [--no-reference]
//
// Prints one JSON line per (implementation, pass): best seconds of R repetitions after a warm-up.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "twinkle/kernels/registry.h"

namespace {

double best_seconds(const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, reps = 3;
  int64_t T = 2048, S = 1, Hk = 2, Hv = 4, Dk = 128, Dv = 128;
  bool reference = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (a == "--threads") threads = static_cast<int>(next());
    else if (a == "--tokens") T = next();
    else if (a == "--seqs") S = next();
    else if (a == "--hk") Hk = next();
    else if (a == "--hv") Hv = next();
    else if (a == "--dk") Dk = next();
    else if (a == "--dv") Dv = next();
    else if (a == "--reps") reps = static_cast<int>(next());
    else if (a == "--no-reference") reference = false;
    else {
      std::fprintf(stderr, "unknown option %s (see the header of bench/gdn_bench.cpp)\n", a.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);
  std::vector<int32_t> cu(S + 1);
  for (int64_t s = 0; s <= S; ++s) cu[s] = static_cast<int32_t>(T * s / S);
  std::mt19937 gen(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto randv = [&](int64_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(gen);
    return v;
  };
  auto q = randv(T * Hk * Dk), k = randv(T * Hk * Dk), v = randv(T * Hv * Dv), dout = randv(T * Hv * Dv);
  std::vector<float> g(T * Hv), beta(T * Hv);
  for (int64_t i = 0; i < T * Hv; ++i) {  // the layer's gates at its initialisation (A ~ U(0.01, 16), dt_bias 1)
    const float A = 0.01f + 15.99f * std::uniform_real_distribution<float>(0.0f, 1.0f)(gen);
    g[i] = -0.05f * A * std::log1p(std::exp(nd(gen) + 1.0f));  // x 0.05: a state that lives across chunks
    beta[i] = 1.0f / (1.0f + std::exp(-nd(gen)));
  }
  std::vector<float> out(T * Hv * Dv), dq(T * Hk * Dk), dk(T * Hk * Dk), dv(T * Hv * Dv), dg(T * Hv), db(T * Hv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  for (const char* impl : {"fused", "reference"}) {
    if (!reference && std::string(impl) == "reference") continue;
    const auto t = twinkle::kernels::resolve_kernels("cpu", impl);
    const auto& op = t.gated_delta_rule;
    auto fwd = [&] {
      op.forward(q.data(), k.data(), v.data(), g.data(), beta.data(), nullptr, out.data(), nullptr, cu.data(), S, Hk,
                 Hv, Dk, Dv, scale, true);
    };
    auto fwd_bwd = [&] {
      fwd();
      op.backward(q.data(), k.data(), v.data(), g.data(), beta.data(), nullptr, dout.data(), nullptr, dq.data(),
                  dk.data(), dv.data(), dg.data(), db.data(), nullptr, cu.data(), S, Hk, Hv, Dk, Dv, scale, true);
    };
    const int r = std::string(impl) == "reference" ? 1 : reps;
    const double f = best_seconds(fwd, r), fb = best_seconds(fwd_bwd, r);
    for (int pass = 0; pass < 2; ++pass)
      std::printf("{\"engine\": \"twinkle\", \"impl\": \"%s\", \"pass\": \"%s\", \"threads\": %d, \"tokens\": %lld, "
                  "\"seqs\": %lld, \"hk\": %lld, \"hv\": %lld, \"dk\": %lld, \"dv\": %lld, \"seconds\": %.6f}\n",
                  impl, pass ? "fwd+bwd" : "fwd", threads, static_cast<long long>(T), static_cast<long long>(S),
                  static_cast<long long>(Hk), static_cast<long long>(Hv), static_cast<long long>(Dk),
                  static_cast<long long>(Dv), pass ? fb : f);
  }
  return 0;
}
