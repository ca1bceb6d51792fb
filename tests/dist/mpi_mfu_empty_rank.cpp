// MFU uses the global batch's mean sequence length on every rank, also on a data-parallel rank
// that has no row this step (a short last batch): before, such a rank kept the previous
// step's local mean (and every rank used its own local mean). The FLOPs of a step are
// recovered from the public metrics (fl = mfu * step_time_s * peak) and compared with
// flops_per_token(S) * tokens, S computed here from the rows each rank was given. The peak
// itself is rank 0's on every rank, also where rank 1's environment lacks it.
// Usage: mpi_mfu_empty_rank MODEL_DIR   (2 ranks, dp = 2; TWINKLE_PEAK_GFLOPS set; prints "mfu OK")
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "synthetic_rows.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/train/megatron_model.h"

namespace {

using twinkle_test::synthetic_row;

}  // namespace

static int body(int argc, char** argv) {
  twinkle::check(argc >= 2, "usage: mpi_mfu_empty_rank MODEL_DIR");
  twinkle::check(twinkle::world_size() == 2, "mpi_mfu_empty_rank runs on 2 ranks");
  twinkle::InitOptions o;
  twinkle::MeshSizes sz;
  sz.dp = 2;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(sz);
  twinkle::initialize(o);
  auto& world = *twinkle::parallel_state().world;
  const int rank = world.rank();
  // The peak is rank 0's: rank 1 sees neither TWINKLE_PEAK_GFLOPS nor a peak file (as a second
  // node without them would). Before, rank 1 went to measure (a world barrier) while rank 0
  // returned the environment's figure: the job hung in the constructor.
  if (rank == 1) {
    ::unsetenv("TWINKLE_PEAK_GFLOPS");
    ::setenv("TWINKLE_HOME", "/nonexistent/twinkle-home-of-rank-1", 1);
  }
  twinkle::MegatronModel m(argv[1]);
  if (m.peak_flops() != 1e9) {
    std::printf("[rank %d] CHECK FAILED: peak %.9g FLOP/s, want rank 0's TWINKLE_PEAK_GFLOPS=1 (1e9)\n", rank,
                m.peak_flops());
    return 1;
  }
  m.set_optimizer("default", {.lr = 1e-4});
  // per step: the row lengths of rank 0 and rank 1, and the global mean S
  struct Step {
    std::vector<int64_t> r0, r1;
    double mean;
  };
  const std::vector<Step> steps = {
      {{10, 30}, {50}, 30.0},  // rank 0's local mean 20 differs from the global 30
      {{6}, {}, 6.0},          // rank 1 has no row: its previous mean was 50
      {{}, {12, 4}, 8.0},      // rank 0 has no row
  };
  int failures = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    std::vector<twinkle::EncodedRow> rows;
    for (int64_t len : rank == 0 ? steps[k].r0 : steps[k].r1) rows.push_back(synthetic_row(len, static_cast<int32_t>(k * 7 + len)));
    // global tokens: micro-batches of min(2, local rows) rows, each padded to its longest
    int64_t tokens = 0;
    for (const auto* rs : {&steps[k].r0, &steps[k].r1})
      for (size_t i = 0; i < rs->size(); i += 2) {
        int64_t mx = 0, n = 0;
        for (size_t j = i; j < std::min(rs->size(), i + 2); ++j, ++n) mx = std::max(mx, (*rs)[j]);
        tokens += mx * n;
      }
    m.forward_backward(rows);
    m.clip_grad_and_step();
    const auto& mt = m.last_metrics();
    const double got = mt.mfu * mt.step_time_s * m.peak_flops();
    const double want = m.flops_per_token(steps[k].mean) * static_cast<double>(tokens);
    if (mt.tokens != tokens || !(std::abs(got - want) <= 1e-9 * want)) {
      ++failures;
      std::printf("[rank %d] CHECK FAILED: step %zu: FLOPs %.9g (tokens %lld) vs %.9g at mean length %.1f (tokens %lld)\n",
                  rank, k + 1, got, static_cast<long long>(mt.tokens), want, steps[k].mean,
                  static_cast<long long>(tokens));
    }
  }
  int64_t total = failures;
  world.all_reduce(&total, 1);
  twinkle::check(total == 0, std::to_string(total) + " MFU mismatches");
  if (rank == 0) std::printf("mfu OK: %zu steps, global mean length on every rank\n", steps.size());
  return 0;
}

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
