// cp_attention_bench — one attention step (forward + backward) of context parallelism: ring (p2p)
// and Ulysses (a2a) on cp = world ranks, next to the cp = 1 flash-attention kernel, for one long
// sequence.
//
//   mpirun -np {1,2,4} build/bench/cp_attention_bench [--tokens=4096,8192] [--heads=8] [--kv-heads=4]
//       [--head-dim=32] [--steps=3]
//
// Defaults are the attention of the bench "small" config (hidden 256, 8 q / 4 kv heads of 32).
// Per algorithm and length it prints (slowest rank, best of --steps):
//   wall  — forward+backward wall time; cpu — the same on the process CPU clock (on an
//           oversubscribed machine wall time includes waiting for a core, cpu time does not);
//   bytes — bytes this rank sent through the cp group in one step (ProcessGroup::bytes_sent),
//           next to the analytic volume;
//   act   — attention activation bytes per rank held between forward and backward: q, k, v, out
//           (and lse) of the local tokens, plus the algorithm's own saved tensors (Ulysses keeps its
//           head-sharded copies); it falls as 1/cp;
//   rss   — peak resident set of the rank (getrusage), for the whole process.
// Inputs are random, allocated and touched once; buffers are reused across steps.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/parallel/cp_split.h"
#include "twinkle/parallel/ring_attention.h"
#include "twinkle/parallel/ulysses_attention.h"

using namespace twinkle;
using namespace twinkle::parallel;

namespace {

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int64_t> parse_list(const std::string& v) {
  std::vector<int64_t> out;
  std::stringstream ss(v);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(std::stoll(x));
  return out;
}

int body(int argc, char** argv) {
  std::vector<int64_t> lens = {4096, 8192};
  int64_t Hq = 8, Hkv = 4, D = 32, steps = 3;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const auto eq = s.find('=');
    const std::string k = s.substr(0, eq), v = eq == std::string::npos ? "" : s.substr(eq + 1);
    if (k == "--tokens") lens = parse_list(v);
    else if (k == "--heads") Hq = std::stoll(v);
    else if (k == "--kv-heads") Hkv = std::stoll(v);
    else if (k == "--head-dim") D = std::stoll(v);
    else if (k == "--steps") steps = std::stoll(v);
    else throw Error("cp_attention_bench: unknown argument '" + s + "' (--tokens=, --heads=, --kv-heads=, --head-dim=, --steps=)");
  }
  MeshSizes ms;
  ms.cp = world_size();
  InitOptions o;
  o.global_device_mesh = DeviceMesh::from_sizes(ms);
  initialize(o);
  auto& st = parallel_state();
  auto cpg = st.cp;
  const int cp = cpg->size(), r = cpg->rank();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  if (r == 0)
    std::printf("| tokens | cp | algorithm | wall s | cpu s | bytes/rank/step | analytic | act MiB/rank | peak RSS MiB |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
  RingAttention ring(cpg);
  UlyssesAttention uly(cpg);
  for (int64_t L : lens) {
    MicroBatch mb;
    mb.batch = 1;
    mb.seq = L;
    mb.input_ids.assign(static_cast<size_t>(L), 1);
    mb.labels.assign(static_cast<size_t>(L), 1);
    for (int64_t t = 0; t < L; ++t) mb.position_ids.push_back(static_cast<int32_t>(t));
    mb.cu_seqlens = {0, static_cast<int32_t>(L)};
    const CpShard sh = cp_split_micro_batch(mb, cp, r);
    const CpLayout lay = CpLayout::from_shard(sh);
    const int64_t T = sh.tokens();
    std::mt19937 g(static_cast<unsigned>(7 + r));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto rnd = [&](int64_t n) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& e : x) e = u(g);
      return x;
    };
    const auto q = rnd(T * Hq * D), k = rnd(T * Hkv * D), v = rnd(T * Hkv * D), dout = rnd(T * Hq * D);
    std::vector<float> out(q.size()), lse(static_cast<size_t>(T * Hq)), dq(q.size()), dk(k.size()), dv(v.size());
    const double local_act = double(4 * (2 * T * Hq * D + 2 * T * Hkv * D + T * Hq));  // q, k, v, out, lse
    for (int algo = 0; algo < 3; ++algo) {
      if (algo == 0 && cp != 1) continue;  // the plain flash kernel is the cp = 1 baseline
      if (algo == 2 && (Hq % cp || Hkv % cp)) continue;
      double best_w = 1e30, best_c = 1e30;
      int64_t bytes = 0;
      for (int64_t s = 0; s < steps; ++s) {
        cpg->barrier();
        cpg->reset_bytes_sent();
        const double w0 = wall_now(), c0 = cpu_now();
        if (algo == 0) {
          kernels::cpu::flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(),
                                                sh.global_cu_seqlens.data(), 1, Hq, Hkv, D, scale);
          kernels::cpu::flash_attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                                                 dq.data(), dk.data(), dv.data(), sh.global_cu_seqlens.data(), 1, Hq,
                                                 Hkv, D, scale);
        } else if (algo == 1) {
          ring.forward(lay, q.data(), k.data(), v.data(), out.data(), lse.data(), Hq, Hkv, D, scale);
          ring.backward(lay, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                        dv.data(), Hq, Hkv, D, scale);
        } else {
          uly.forward(lay, q.data(), k.data(), v.data(), out.data(), Hq, Hkv, D, scale);
          uly.backward(lay, dout.data(), dq.data(), dk.data(), dv.data(), Hq, Hkv, D, scale);
        }
        double wc[2] = {wall_now() - w0, cpu_now() - c0};
        bytes = cpg->bytes_sent();
        cpg->all_reduce_f64(wc, 2, dist::ReduceOp::Max);
        best_w = std::min(best_w, wc[0]);
        best_c = std::min(best_c, wc[1]);
      }
      const int64_t analytic = algo == 1   ? RingAttention::forward_bytes(cp, T, Hkv, D) +
                                                 RingAttention::backward_bytes(cp, T, Hkv, D)
                               : algo == 2 ? UlyssesAttention::forward_bytes(cp, T, Hq, Hkv, D) +
                                                 UlyssesAttention::backward_bytes(cp, T, Hq, Hkv, D)
                                           : 0;
      // Ulysses keeps head-sharded q, k, v, out, lse of the whole sequence: the same volume as the local ones
      const double act = algo == 2 ? 2 * local_act : local_act;
      rusage ru;
      getrusage(RUSAGE_SELF, &ru);
      double rss = ru.ru_maxrss / 1024.0;
      cpg->all_reduce_f64(&rss, 1, dist::ReduceOp::Max);
      if (r == 0)
        std::printf("| %lld | %d | %s | %.3f | %.3f | %lld | %lld | %.2f | %.0f |\n", (long long)L, cp,
                    algo == 0 ? "flash (cp1 kernel)" : algo == 1 ? "ring p2p" : "ulysses a2a", best_w, best_c,
                    (long long)bytes, (long long)analytic, act / (1 << 20), rss);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
