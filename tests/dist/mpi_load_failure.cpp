// Loading that fails on some ranks only must fail on every rank: on pp2 each stage reads only its
// own layers' tensors, so a checkpoint missing the last layer's tensors is refused by stage 1
// while stage 0 finds everything it needs. Before, stage 1 threw and stage 0 went on (into the
// next collective: job_peak_flops' all-reduce after the constructor, the step after load()), so a
// caller that catches twinkle::Error left the ranks out of step (the ctest TIMEOUT then fails this
// test). Cases: the constructor, MegatronModel::load (which must also leave stage 0's parameters
// untouched: the checks are agreed before any rank loads), and load_adapter. After them a training
// step still runs on both ranks.
// Usage: mpi_load_failure MODEL_DIR SCRATCH_DIR   (2 ranks, pp = 2; prints "load failure OK")
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "synthetic_rows.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/train/megatron_model.h"

namespace fs = std::filesystem;

namespace {

using twinkle_test::synthetic_row;

// Copies `src_file` to `dst_file` without the tensors whose name contains `drop`, each value
// shifted by `shift` (so a rank that loaded it would hold different parameters).
void copy_without(const fs::path& src_file, const fs::path& dst_file, const std::string& drop, float shift) {
  const twinkle::SafetensorsFile f = twinkle::SafetensorsFile::open(src_file.string());
  std::vector<std::pair<std::string, twinkle::Tensor>> kept;
  for (const auto& n : f.names()) {
    if (n.find(drop) != std::string::npos) continue;
    twinkle::Tensor t = f.load_f32(n);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] += shift;
    kept.emplace_back(n, t);
  }
  fs::create_directories(dst_file.parent_path());
  twinkle::save_safetensors(dst_file.string(), kept);
}

double param_sum(twinkle::MegatronModel& m) {
  const twinkle::Tensor& flat = m.model().trainable_store().flat_params();
  double s = 0;
  for (int64_t i = 0; i < flat.numel(); ++i) s += flat.f32()[i];
  return s;
}

}  // namespace

static int body(int argc, char** argv) {
  twinkle::check(argc >= 3, "usage: mpi_load_failure MODEL_DIR SCRATCH_DIR");
  twinkle::InitOptions o;
  twinkle::MeshSizes sz;
  sz.pp = 2;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(sz);
  twinkle::initialize(o);
  auto& world = *twinkle::parallel_state().world;
  const fs::path scratch = fs::path(argv[2]) / "load_failure";
  if (world.rank() == 0) {
    fs::remove_all(scratch);
    fs::create_directories(scratch);
  }
  world.barrier();
  // A full checkpoint and a LoRA adapter of the tiny model, written by the model itself.
  twinkle::MegatronModel good(argv[1]);
  const int64_t L = good.model().config().num_hidden_layers;
  const std::string last_layer = "layers." + std::to_string(L - 1) + ".";
  const std::string full = good.save("", {.output_dir = (scratch / "full").string()});
  {
    twinkle::MegatronModel lora(full);
    lora.add_adapter_to_model("default", twinkle::LoraConfig{.r = 4, .lora_alpha = 8});
    lora.save("", {.output_dir = (scratch / "adapter").string()});
  }
  const fs::path missing = scratch / "missing", missing_adapter = scratch / "missing_adapter";
  if (world.rank() == 0) {
    copy_without(fs::path(full) / "model.safetensors", missing / "model.safetensors", last_layer, 1.0f);
    fs::copy_file(fs::path(full) / "config.json", missing / "config.json");
    copy_without(scratch / "adapter" / "adapter_model.safetensors", missing_adapter / "adapter_model.safetensors",
                 last_layer, 0.0f);
    fs::copy_file(scratch / "adapter" / "adapter_config.json", missing_adapter / "adapter_config.json");
  }
  world.barrier();

  int refused = 0;
  auto expect_refusal = [&](const char* what, auto&& f) {
    std::string err;
    try {
      f();
    } catch (const twinkle::Error& e) {
      err = e.what();
    }
    MPI_CHECK(err.rfind("world rank 1: ", 0) == 0 && err.find("has no tensor") != std::string::npos &&
                  err.find(last_layer) != std::string::npos,
              what << ": not refused as expected here (error: '" << err << "')");
    if (!err.empty()) ++refused;
    if (world.rank() == 0) std::printf("%s: %s\n", what, err.c_str());
  };
  // 1. The constructor.
  expect_refusal("constructor", [&] { twinkle::MegatronModel m(missing.string()); });
  // 2. load(): stage 0 holds every tensor it needs, and must still not load them.
  twinkle::MegatronModel m(full);
  const double before = param_sum(m);
  expect_refusal("load", [&] { m.load(missing.string()); });
  MPI_CHECK(param_sum(m) == before, "load: a refused checkpoint changed this rank's parameters (sum " << before
                                                                                                     << " -> " << param_sum(m) << ")");
  // 3. load_adapter.
  twinkle::MegatronModel a(full);
  expect_refusal("load_adapter", [&] { a.load_adapter(missing_adapter.string()); });
  // The ranks are still in step: every refusal seen everywhere, and a step runs on both.
  int64_t total = refused;
  world.all_reduce(&total, 1);
  MPI_CHECK(total == 3 * world.size(), "expected 3 refusals on every rank, got " << total << " in all");
  m.set_optimizer("default", {.lr = 1e-4});
  const double loss = m.forward_backward(std::vector<twinkle::EncodedRow>{synthetic_row(12, 1), synthetic_row(9, 2)});
  const twinkle::StepStats st = m.clip_grad_and_step();
  MPI_CHECK(std::isfinite(loss) && loss > 0 && !st.skipped && st.step == 1,
            "the step after the refusals: loss " << loss << ", step " << st.step);
  int64_t bad = twinkle_test::failures();
  world.all_reduce(&bad, 1);
  if (world.rank() == 0 && bad == 0) std::printf("load failure OK on %d ranks\n", world.size());
  world.barrier();
  if (world.rank() == 0) fs::remove_all(scratch);
  return bad == 0 ? 0 : 1;
}

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
