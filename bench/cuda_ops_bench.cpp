// cuda_ops_bench: per-op time of twinkle's CUDA kernels (device "cuda", set "fused") on the shapes of one
// Qwen3-0.6B-config training step (T = 4096 tokens as 2 packed sequences of 2048, hidden 1024, 16 query /
// 8 kv heads of 128, intermediate 3072, vocab 151936), fp32, with the achieved TFLOP/s (GEMM-like ops)
// or GB/s (memory-bound ops), next to the same ops in PyTorch eager (bench/cuda_ops_peer.py, same shapes,
// run first on the same GPU): ratio = torch ms / twinkle ms (> 1: twinkle faster).
//
//   build/bench/cuda_ops_bench [--peer torch.json] [--out twinkle.json] [--min-time S] [--quick]
//
// --out defaults to cuda_ops_twinkle.json in the working directory; --peer defaults to torch_ops.json there
// when that file exists. The peer script prints the same ratio table when it runs second (it reads
// cuda_ops_twinkle.json), so the table appears whichever of the two runs last.
// Each op: 2 warm-up calls, then repeated calls until --min-time seconds (default 0.3) and >= 5 calls,
// one stream synchronize at the end; the figure is the mean wall time per call. Inputs are zeros (or
// valid ids / positions / labels): time does not depend on the values. Without a GPU: prints why and
// exits 77; without the CUDA build: exits 77 too.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef TWINKLE_CUDA_BUILT
#include "twinkle/core/device_allocator.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/cuda/runtime.h"
#include "twinkle/kernels/registry.h"
#endif

int main(int argc, char** argv) {
  std::string peer_path, out_path = "cuda_ops_twinkle.json";
  double min_time = 0.3;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--peer") && i + 1 < argc) peer_path = argv[++i];
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    else if (!std::strcmp(argv[i], "--min-time") && i + 1 < argc) min_time = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else {
      std::fprintf(stderr, "usage: cuda_ops_bench [--peer torch.json] [--out twinkle.json] [--min-time S] [--quick]\n");
      return 2;
    }
  }
#ifndef TWINKLE_CUDA_BUILT
  (void)min_time;
  (void)quick;
  std::printf("SKIPPED: this build has no CUDA backend (configure with -DTWINKLE_CUDA=ON where nvcc exists)\n");
  return 77;
#else
  using namespace twinkle;
  std::string why;
  if (cuda::visible_device_count(&why) == 0) {
    std::printf("SKIPPED: no GPU visible: %s\n", why.c_str());
    return 77;
  }
  const auto k = kernels::resolve_kernels("cuda");
  const auto info = cuda::device_info();
  std::printf("GPU: %s (%d SMs); twinkle CUDA kernels, fp32, cuBLAS without TF32\n", info[0].name.c_str(),
              info[0].sms);

  const int64_t T = quick ? 1024 : 4096, S = T / 2, H = 1024, Hq = 16, Hkv = 8, D = 128, I = 3072,
                V = quick ? 32000 : 151936, NP = quick ? 10'000'000 : 150'000'000;
  auto dev = [](const Shape& s, DType dt = DType::F32) { return Tensor::zeros(s, dt, Device::CUDA); };
  auto ints = [](const std::vector<int32_t>& v) {
    Tensor h = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::I32);
    std::copy(v.begin(), v.end(), h.data<int32_t>());
    return h.to(Device::CUDA);
  };
  std::vector<int32_t> ids_h(T), pos_h(T), lab_h(T);
  for (int64_t t = 0; t < T; ++t) {
    ids_h[t] = static_cast<int32_t>((t * 7919) % V);
    pos_h[t] = static_cast<int32_t>(t % S);
    lab_h[t] = t % 16 == 0 ? -100 : static_cast<int32_t>((t * 104729) % V);
  }
  Tensor ids = ints(ids_h), pos = ints(pos_h), labels = ints(lab_h), cu = ints({0, static_cast<int32_t>(S),
                                                                               static_cast<int32_t>(T)});
  const auto rope = kernels::cpu::make_rope_table(S, D, 1000000.0);

  struct Row {
    std::string op;
    double ms;
    double work;  // flops or bytes
    bool flops;
  };
  std::vector<Row> rows;
  auto bench = [&](const std::string& op, double work, bool flops, const std::function<void()>& fn) {
    fn();
    fn();
    cuda::synchronize();
    int n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    do {
      fn();
      ++n;
      if (n % 5 == 0) {
        cuda::synchronize();
        el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    } while (n < 5 || el < min_time);
    rows.push_back({op, 1e3 * el / n, work, flops});
    std::printf("  %-30s %9.3f ms\n", op.c_str(), 1e3 * el / n);
    std::fflush(stdout);
  };
  const double f4 = 4.0;  // bytes per float

  {  // embedding
    Tensor table = dev({V, H}), out = dev({T, H}), dt = dev({V, H});
    bench("embedding_fwd", f4 * 2 * T * H, false,
          [&] { k.embedding.forward(table.f32(), ids.data<int32_t>(), out.f32(), T, H, 0, V); });
    bench("embedding_bwd", f4 * 3 * T * H, false,
          [&] { k.embedding.backward(out.f32(), ids.data<int32_t>(), dt.f32(), T, H, 0, V); });
  }
  {  // norms
    Tensor x = dev({T, H}), r = dev({T, H}), h = dev({T, H}), y = dev({T, H}), w = dev({H}), rs = dev({T}),
           dx = dev({T, H}), dw = dev({H});
    bench("rms_norm_fwd", f4 * 2 * T * H, false, [&] { k.rms_norm.forward(x.f32(), w.f32(), y.f32(), rs.f32(), T, H, 1e-6f); });
    bench("rms_norm_bwd", f4 * 3 * T * H, false,
          [&] { k.rms_norm.backward(x.f32(), w.f32(), rs.f32(), y.f32(), dx.f32(), dw.f32(), T, H); });
    bench("add_rms_norm_fwd", f4 * 4 * T * H, false,
          [&] { k.add_rms_norm.forward(x.f32(), r.f32(), h.f32(), w.f32(), y.f32(), rs.f32(), T, H, 1e-6f); });
    bench("add_rms_norm_bwd", f4 * 4 * T * H, false, [&] {
      k.add_rms_norm.backward(h.f32(), w.f32(), rs.f32(), y.f32(), r.f32(), dx.f32(), dw.f32(), T, H);
    });
  }
  {  // q norm + rope
    Tensor x = dev({T, Hq, D}), y = dev({T, Hq, D}), w = dev({D}), rs = dev({T * Hq}), dw = dev({D});
    bench("qk_norm_rope_fwd", f4 * 2 * T * Hq * D, false, [&] {
      k.qk_norm_rope.forward(x.f32(), w.f32(), y.f32(), rs.f32(), pos.data<int32_t>(), rope, T, Hq, D, 1e-6f);
    });
    bench("qk_norm_rope_bwd", f4 * 3 * T * Hq * D, false, [&] {
      k.qk_norm_rope.backward(x.f32(), w.f32(), rs.f32(), pos.data<int32_t>(), rope, y.f32(), y.f32(), dw.f32(), T, Hq,
                              D);
    });
  }
  {  // swiglu and gate|up
    Tensor g = dev({T, I}), u = dev({T, I}), a = dev({T, I}), dg = dev({T, I}), du = dev({T, I});
    bench("swiglu_fwd", f4 * 3 * T * I, false, [&] { k.swiglu.forward(g.f32(), u.f32(), a.f32(), T * I); });
    bench("swiglu_bwd", f4 * 5 * T * I, false,
          [&] { k.swiglu.backward(g.f32(), u.f32(), a.f32(), dg.f32(), du.f32(), T * I); });
    Tensor x = dev({T, H}), wgu = dev({2 * I, H}), gu = dev({T, 2 * I}), dgu = dev({T, 2 * I}), dx = dev({T, H}),
           dw = dev({2 * I, H});
    bench("gate_up_swiglu_fwd", 2.0 * T * 2 * I * H, true,
          [&] { k.gate_up_swiglu.forward(x.f32(), wgu.f32(), gu.f32(), a.f32(), T, I, H); });
    bench("gate_up_swiglu_bwd", 4.0 * T * 2 * I * H, true, [&] {
      k.gate_up_swiglu.backward(x.f32(), wgu.f32(), gu.f32(), a.f32(), dgu.f32(), dx.f32(), dw.f32(), T, I, H, false);
    });
  }
  {  // linear (q_proj shape)
    const int64_t N = Hq * D;
    Tensor x = dev({T, H}), w = dev({N, H}), y = dev({T, N}), dx = dev({T, H}), dw = dev({N, H});
    bench("linear_fwd", 2.0 * T * N * H, true, [&] { k.linear.forward(x.f32(), w.f32(), y.f32(), T, N, H, false); });
    bench("linear_bwd", 4.0 * T * N * H, true,
          [&] { k.linear.backward(x.f32(), w.f32(), y.f32(), dx.f32(), dw.f32(), T, N, H, false); });
  }
  {  // attention: 2 causal sequences of S; flops of QK^T and PV over the causal half
    Tensor q = dev({T, Hq, D}), kk = dev({T, Hkv, D}), v = dev({T, Hkv, D}), o = dev({T, Hq, D}), lse = dev({T, Hq}),
           dq = dev({T, Hq, D}), dk = dev({T, Hkv, D}), dv = dev({T, Hkv, D});
    const double fwd = 2.0 * 2.0 * (static_cast<double>(S) * S / 2) * D * Hq * 2;  // 2 GEMMs, 2 sequences
    const float sc = 1.0f / std::sqrt(static_cast<float>(D));
    bench("attention_fwd", fwd, true, [&] {
      k.attention.forward(q.f32(), kk.f32(), v.f32(), o.f32(), lse.f32(), cu.data<int32_t>(), 2, Hq, Hkv, D, sc, 0);
    });
    bench("attention_bwd", 2.5 * fwd, true, [&] {
      k.attention.backward(q.f32(), kk.f32(), v.f32(), o.f32(), lse.f32(), o.f32(), dq.f32(), dk.f32(), dv.f32(),
                           cu.data<int32_t>(), 2, Hq, Hkv, D, sc, 0);
    });
  }
  {  // lm head + cross entropy, forward and backward
    Tensor x = dev({T, H}), w = dev({V, H}), lse = dev({T}), dx = dev({T, H}), dw = dev({V, H});
    bench("linear_cross_entropy_fwdbwd", 6.0 * T * V * H, true, [&] {
      (void)k.linear_cross_entropy.forward_backward(x.f32(), w.f32(), labels.data<int32_t>(), T, V, H, 1.0f / T,
                                                    lse.f32(), dx.f32(), dw.f32(), 0);
    });
  }
  {  // optimizer and grad norm
    Tensor p = dev({NP}), g = dev({NP}), m = dev({NP}), v = dev({NP});
    int64_t step = 0;
    bench("adamw", f4 * 7 * NP, false, [&] {
      k.adamw.step(p.f32(), g.f32(), m.f32(), v.f32(), NP, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step, 1.0f);
    });
    bench("sum_squares", f4 * NP, false, [&] { (void)k.norms.sum_squares(g.f32(), NP); });
  }

  nlohmann::json peer;
  if (peer_path.empty() && std::ifstream("torch_ops.json")) peer_path = "torch_ops.json";
  if (!peer_path.empty()) {
    std::ifstream f(peer_path);
    if (f) peer = nlohmann::json::parse(f, nullptr, false);
    if (peer.is_discarded() || !peer.is_object()) {
      std::printf("peer file %s unreadable: no ratios\n", peer_path.c_str());
      peer = nlohmann::json::object();
    }
  }
  std::printf("\n%-30s %10s %14s %10s %14s %8s\n", "op", "twinkle ms", "twinkle rate", "torch ms", "torch rate",
              "ratio");
  nlohmann::json out = nlohmann::json::object();
  for (const auto& r : rows) {
    auto rate = [&](double ms) {
      char b[32];
      std::snprintf(b, sizeof b, r.flops ? "%.2f TFLOP/s" : "%.0f GB/s", r.flops ? r.work / ms / 1e9 : r.work / ms / 1e6);
      return std::string(b);
    };
    out[r.op] = r.ms;
    const bool has = peer.contains("ops") && peer["ops"].contains(r.op);
    const double pm = has ? peer["ops"][r.op].get<double>() : 0.0;
    if (has)
      std::printf("%-30s %10.3f %14s %10.3f %14s %7.2fx\n", r.op.c_str(), r.ms, rate(r.ms).c_str(), pm,
                  rate(pm).c_str(), pm / r.ms);
    else
      std::printf("%-30s %10.3f %14s %10s %14s %8s\n", r.op.c_str(), r.ms, rate(r.ms).c_str(), "-", "-", "-");
  }
  std::printf("shapes: T=%lld (2 x %lld packed), H=%lld, Hq=%lld, Hkv=%lld, D=%lld, I=%lld, V=%lld, adamw n=%lld; "
              "ratio = torch ms / twinkle ms\n",
              static_cast<long long>(T), static_cast<long long>(S), static_cast<long long>(H),
              static_cast<long long>(Hq), static_cast<long long>(Hkv), static_cast<long long>(D),
              static_cast<long long>(I), static_cast<long long>(V), static_cast<long long>(NP));
  std::printf("allocator: %s\n", device_allocator(Device::CUDA).describe().c_str());
  if (!out_path.empty()) std::ofstream(out_path) << nlohmann::json{{"ops", out}}.dump(2) << "\n";
  return 0;
#endif
}
