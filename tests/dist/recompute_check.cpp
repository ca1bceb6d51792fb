// Activation recompute (model/qwen3_activations.h Recompute) changes memory, not results: on any
// layout, "selective" and "full" give the bit-identical losses, grad norms, gradients and updated
// parameters of "none" over several steps, and save fewer activation bytes (full < selective <
// none, so a recompute that silently kept everything fails). Each mode runs from the same seeded
// init on the same rows (bench/layout_bench's generator); the comparison is memcmp.
//
// --lora adds a LoRA adapter (r 4, random A and B, dropout 0.1 on every linear module): the trained
// tensors are then the adapter's, and the recomputed forwards must draw the forward's dropout masks.
// --bf16 runs the mixed-precision kernel set (bf16 GEMMs, bf16 attention backward).
// --vpp N: N model chunks per pipeline rank (the interleaved schedule; the chunks share the rank's
// recompute buffers). Without --lora, each mode's forward_only loss before the first step equals the
// first step's forward_backward loss bit for bit (the forward-only schedule runs the same forwards).
//
// Usage: recompute_check [--tp N] [--pp N] [--vpp N] [--dp N] [--cp N] [--sp] [--moe] [--lora] [--bf16]
//   (world size = tp * pp * dp * cp; prints "recompute_check OK ..." on rank 0)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/data/batch.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/model/lora_config.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/train/engine.h"
#include "bitwise_layout.h"

using namespace twinkle;

namespace {

struct Run {
  testutil::StepTrace trace;  // after the last step's backward / optimizer step
  size_t saved = 0;
  double forward_only_loss = 0;  // before the first step
};

struct Flags {
  bool moe = false, lora = false, bf16 = false;
};

Run run(const std::string& mode, const Flags& f) {
  const bool moe = f.moe;
  auto& st = parallel_state();
  auto ps = std::shared_ptr<dist::ParallelState>(&st, [](dist::ParallelState*) {});
  Qwen3ModelOptions mo;
  mo.recompute_granularity = mode;
  mo.moe_aux_loss_type = "per_layer";
  mo.moe_aux_loss_coeff = moe ? 0.01 : 0.0;
  if (f.bf16) mo.mixed_precision = "bf16";
  Qwen3Model m(testutil::tiny_layout_config(moe), ps, mo);
  m.init_random(3);
  if (f.lora) {
    LoraConfig lc;
    lc.r = 4;
    lc.lora_alpha = 8;
    lc.lora_dropout = 0.1;
    lc.init_lora_weights = "false";  // B random too: every adapter tensor has a gradient at step 1
    m.add_adapter(lc, 5);
  }
  Engine eng(m);
  OptimizerConfig oc;
  DistributedOptimizer opt(m.trainable_store(), ps, oc);
  const auto mbs = testutil::seeded_micro_batches(st.mesh.dp_size(), st.coord.dp, 8, 11);
  Run r;
  r.forward_only_loss = eng.forward_only(mbs).loss;
  for (int s = 0; s < 3; ++s) {
    m.set_lora_dropout_step(s);
    StepResult res = eng.forward_backward(mbs);
    r.trace.losses.push_back(res.loss);
    if (s == 2) {
      const Tensor& g = m.trainable_store().flat_grads();
      r.trace.grads.assign(g.f32(), g.f32() + g.numel());
    }
    r.trace.norms.push_back(opt.step(1e-3, 1.0).grad_norm);
  }
  const Tensor& p = m.trainable_store().flat_params();
  r.trace.params.assign(p.f32(), p.f32() + p.numel());
  r.saved = m.saved_activation_bytes();
  return r;
}

int body(int argc, char** argv) {
  MeshSizes ms;
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::stoi(i + 1 < argc ? argv[++i] : "1"); };
    if (a == "--tp") ms.tp = next();
    else if (a == "--pp") ms.pp = next();
    else if (a == "--vpp") ms.vpp = next();
    else if (a == "--dp") ms.dp = next();
    else if (a == "--cp") ms.cp = next();
    else if (a == "--sp") ms.sequence_parallel = true;
    else if (a == "--moe") f.moe = true;
    else if (a == "--lora") f.lora = true;
    else if (a == "--bf16") f.bf16 = true;
    else throw Error("recompute_check: unknown option " + a);
  }
  initialize({.global_device_mesh = DeviceMesh::from_sizes(ms)});
  auto& world = *parallel_state().world;
  const Run none = run("none", f), sel = run("selective", f), full = run("full", f);
  int64_t bad = 0;
  auto same = [&](const Run& r, const char* name) {
    bad += testutil::count_bitwise_differences(world.rank(), r.trace, name, none.trace, "none");
  };
  same(sel, "selective");
  same(full, "full");
  if (!(full.saved < sel.saved && sel.saved < none.saved)) {
    std::printf("rank %d: saved activation bytes not full < selective < none: %zu %zu %zu\n", world.rank(), full.saved,
                sel.saved, none.saved);
    ++bad;
  }
  for (const Run* r : {&none, &sel, &full})
    if (!f.lora && std::memcmp(&r->forward_only_loss, &r->trace.losses[0], sizeof(double)) != 0) {
      std::printf("rank %d: forward_only loss %.17g != the first step's loss %.17g\n", world.rank(), r->forward_only_loss,
                  r->trace.losses[0]);
      ++bad;
    }
  world.all_reduce(&bad, 1);
  std::string tag = std::string(f.moe ? " MoE" : "") + (f.lora ? " LoRA" : "") + (f.bf16 ? " bf16" : "");
  if (!tag.empty()) tag = " (" + tag.substr(1) + ")";
  if (world.rank() == 0 && bad == 0)
    std::printf("recompute_check OK: %d ranks%s, 3 steps bit-identical, saved activations rank 0: none %zu, "
                "selective %zu, full %zu bytes, losses %.9f %.9f %.9f\n",
                world.size(), tag.c_str(), none.saved, sel.saved, full.saved, none.trace.losses[0], none.trace.losses[1],
                none.trace.losses[2]);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, body); }
