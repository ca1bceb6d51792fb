// A save that fails on rank 0 must fail on every rank: MegatronModel::save writes on rank 0
// only, so an error there (a non-finite weight, an unwritable directory) has to reach the
// other ranks before any of them throws — otherwise a caller that catches twinkle::Error leaves
// ranks 1..n-1 waiting in a collective for ever (the ctest TIMEOUT then fails this test).
// Usage: mpi_save_failure MODEL_DIR SCRATCH_DIR   (dp = world size; prints "save failure OK")
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "mpi_check.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/train/megatron_model.h"

namespace fs = std::filesystem;

static int body(int argc, char** argv) {
  twinkle::check(argc >= 3, "usage: mpi_save_failure MODEL_DIR SCRATCH_DIR");
  twinkle::InitOptions o;
  twinkle::MeshSizes sz;
  sz.dp = twinkle::world_size();
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(sz);
  twinkle::initialize(o);
  auto& world = *twinkle::parallel_state().world;
  const fs::path scratch = fs::path(argv[2]) / ("save_failure_" + std::to_string(world.size()));
  if (world.rank() == 0) {
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    std::ofstream(scratch / "a_file") << "not a directory\n";
  }
  world.barrier();
  twinkle::MegatronModel m(argv[1]);
  int failures_seen = 0;
  auto expect_error = [&](const std::string& what, const std::string& out_dir) {
    try {
      m.save("", {.output_dir = out_dir});
      std::printf("[rank %d] CHECK FAILED: %s: save returned normally\n", world.rank(), what.c_str());
    } catch (const twinkle::Error& e) {
      ++failures_seen;
      if (world.rank() == 0) std::printf("%s: %s\n", what.c_str(), e.what());
    }
  };
  // 1. The output directory cannot be created (its parent is a regular file).
  expect_error("unwritable directory", (scratch / "a_file" / "ckpt").string());
  // 2. A non-finite weight (the final norm) on every rank: refused before any file is written.
  twinkle::Param* p = m.model().store().find("model.norm.weight");
  twinkle::check(p != nullptr, "model.norm.weight not found");
  p->data.f32()[0] = std::numeric_limits<float>::quiet_NaN();
  expect_error("non-finite weight", (scratch / "nan_ckpt").string());
  // Every rank got both errors and is still in step with the others.
  int64_t total = failures_seen;
  world.all_reduce(&total, 1);
  twinkle::check(total == 2 * world.size(), "expected both saves to fail on every rank, got " + std::to_string(total));
  twinkle::check(!fs::exists(scratch / "nan_ckpt" / "model.safetensors"), "a non-finite checkpoint was written");
  world.barrier();
  if (world.rank() == 0) std::printf("save failure OK on %d ranks\n", world.size());
  return 0;
}

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
