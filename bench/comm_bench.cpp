// comm_bench — latency and bandwidth of the MPI collectives behind ProcessGroup.
//
//   build/bin/twinkle-run --nproc_per_node=8 build/bench/comm_bench [--min-bytes=8]
//       [--max-bytes=67108864] [--ops=all_reduce,all_gather,reduce_scatter,all_to_all]
//       [--seconds=0.2]
//
// "size" follows nccl-tests: the bytes of one rank's largest buffer (all_reduce: the
// buffer; all_gather: the gathered output; reduce_scatter: the input; all_to_all: the
// send buffer). time = mean over iterations of the slowest rank; algbw = size / time;
// busbw = algbw * 2(n-1)/n for all_reduce and (n-1)/n for the others (the bytes each
// rank must move in any algorithm, comparable across ops and rank counts).
// Buffers are allocated and touched once, then reused (no page faults in the loop).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"

using Clock = std::chrono::steady_clock;
using twinkle::DType;

namespace {

struct Args {
  int64_t min_bytes = 8, max_bytes = int64_t(64) << 20;
  double seconds = 0.2;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"};
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto eq = s.find('=');
    std::string k = s.substr(0, eq), v = eq == std::string::npos ? "" : s.substr(eq + 1);
    if (k == "--min-bytes") a.min_bytes = std::stoll(v);
    else if (k == "--max-bytes") a.max_bytes = std::stoll(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--ops") {
      a.ops.clear();
      std::stringstream ss(v);
      std::string op;
      while (std::getline(ss, op, ',')) a.ops.push_back(op);
    } else {
      throw twinkle::Error("comm_bench: unknown argument '" + s +
                           "' (--min-bytes=, --max-bytes=, --ops=, --seconds=)");
    }
  }
  twinkle::check(a.min_bytes >= 4 && a.max_bytes >= a.min_bytes, "comm_bench: need 4 <= --min-bytes <= --max-bytes");
  return a;
}

std::string human(int64_t b) {
  char buf[32];
  if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%lld MiB", (long long)(b >> 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%lld KiB", (long long)(b >> 10));
  else std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

int body(int argc, char** argv) {
  Args args = parse(argc, argv);
  twinkle::MeshSizes ms;
  ms.dp = twinkle::world_size();
  twinkle::InitOptions o;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(ms);
  twinkle::initialize(o);
  auto& g = *twinkle::parallel_state().world;
  const int n = g.size(), me = g.rank();
  // Buffers for the largest size, touched once.
  const int64_t max_elems = std::max<int64_t>(args.max_bytes / 4, n);
  std::vector<float> a(max_elems + n, 1.f), b(max_elems + n, 0.f);
  if (me == 0) {
    const char* mm = std::getenv("MALLOC_MMAP_MAX_");
    const char* omp = std::getenv("OMP_NUM_THREADS");
    std::printf("comm_bench: %d ranks, MALLOC_MMAP_MAX_=%s OMP_NUM_THREADS=%s\n", n, mm ? mm : "(unset)",
                omp ? omp : "(unset)");
    std::printf("%-15s %10s %8s %12s %12s %12s\n", "op", "size", "iters", "time (us)", "algbw GB/s", "busbw GB/s");
  }
  for (const auto& op : args.ops) {
    twinkle::check(op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" || op == "all_to_all",
                   "comm_bench: unknown op '" + op + "'");
    for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 8) {
      // elements per rank-block; size rounds down to a multiple of 4*n for the split ops
      int64_t elems = std::max<int64_t>(bytes / 4, 1);
      int64_t block = std::max<int64_t>(elems / n, 1);
      std::vector<int64_t> cnt(n, block), displ(n);
      for (int i = 0; i < n; ++i) displ[i] = i * block;
      int64_t size_bytes = op == "all_reduce" ? elems * 4 : block * n * 4;
      auto once = [&] {
        if (op == "all_reduce") g.all_reduce(a.data(), elems, DType::F32);
        else if (op == "all_gather") g.all_gather(a.data(), b.data(), block, DType::F32);
        else if (op == "reduce_scatter") g.reduce_scatter(a.data(), b.data(), block);
        else g.all_to_all_v(a.data(), cnt, displ, b.data(), cnt, displ, DType::F32);
      };
      // warm up, then pick the iteration count from the slowest rank's first timing
      once();
      g.barrier();
      auto t0 = Clock::now();
      once();
      double first = std::chrono::duration<double>(Clock::now() - t0).count();
      g.all_reduce_f64(&first, 1, twinkle::dist::ReduceOp::Max);
      int iters = static_cast<int>(std::clamp(args.seconds / std::max(first, 1e-7), 3.0, 2000.0));
      g.barrier();
      t0 = Clock::now();
      for (int it = 0; it < iters; ++it) once();
      double t = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
      g.all_reduce_f64(&t, 1, twinkle::dist::ReduceOp::Max);
      if (me == 0) {
        double alg = size_bytes / t / 1e9;
        double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
        std::printf("%-15s %10s %8d %12.1f %12.3f %12.3f\n", op.c_str(), human(size_bytes).c_str(), iters, t * 1e6,
                    alg, alg * factor);
        std::fflush(stdout);
      }
      if (bytes > args.max_bytes / 8 && bytes != args.max_bytes && bytes * 8 > args.max_bytes) {
        bytes = args.max_bytes / 8;  // make sure max_bytes itself is measured
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
