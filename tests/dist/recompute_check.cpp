// Activation recompute (model/qwen3_activations.h Recompute) changes memory, not results: on any
// layout, "selective" and "full" give the bit-identical losses, grad norms, gradients and updated
// parameters of "none" over several steps, and save fewer activation bytes (full < selective <
// none, so a recompute that silently kept everything fails). Each mode runs from the same seeded
// init on the same rows (bench/layout_bench's generator); the comparison is memcmp.
//
// Usage: recompute_check [--tp N] [--pp N] [--dp N] [--cp N] [--sp] [--moe]
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
#include "twinkle/model/qwen3_model.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/train/engine.h"

using namespace twinkle;

namespace {

struct Run {
  std::vector<double> losses, norms;
  std::vector<float> grads, params;  // after the last step's backward / optimizer step
  size_t saved = 0;
};

ModelConfig config(bool moe) {
  ModelConfig c;
  c.model_type = moe ? "qwen3_moe" : "qwen3";
  c.vocab_size = 301; c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 4;
  c.num_attention_heads = 4; c.num_key_value_heads = 2; c.head_dim = 16; c.tie_word_embeddings = true;
  c.max_position_embeddings = 256; c.rope_theta = 1e6;
  if (moe) {
    c.num_experts = 4; c.num_experts_per_tok = 2; c.moe_intermediate_size = 24; c.norm_topk_prob = true;
    c.mlp_only_layers = {1};  // one dense layer among the MoE ones: recomputed under full
  }
  return c;
}

std::vector<MicroBatch> batches(int64_t dp, int64_t dp_rank) {
  std::mt19937_64 g(11);
  std::vector<EncodedRow> rows;
  for (int i = 0; i < 8; ++i) {
    EncodedRow r;
    const int64_t L = 12 + static_cast<int64_t>(g() % 20);
    for (int64_t t = 0; t < L; ++t) {
      r.input_ids.push_back(static_cast<int32_t>(g() % 301));
      r.labels.push_back(t < 3 ? -100 : r.input_ids.back());
      r.position_ids.push_back(static_cast<int32_t>(t));
    }
    r.length = L;
    rows.push_back(r);
  }
  std::vector<EncodedRow> mine(rows.begin() + dp_rank * 8 / dp, rows.begin() + (dp_rank + 1) * 8 / dp);
  std::vector<MicroBatch> out;
  for (size_t i = 0; i < mine.size(); i += 2)
    out.push_back(collate_padded(std::vector<EncodedRow>(mine.begin() + static_cast<long>(i),
                                                         mine.begin() + static_cast<long>(std::min(i + 2, mine.size()))),
                                 0));
  return out;
}

Run run(const std::string& mode, bool moe) {
  auto& st = parallel_state();
  auto ps = std::shared_ptr<dist::ParallelState>(&st, [](dist::ParallelState*) {});
  Qwen3ModelOptions mo;
  mo.recompute_granularity = mode;
  mo.moe_aux_loss_type = "per_layer";
  mo.moe_aux_loss_coeff = moe ? 0.01 : 0.0;
  Qwen3Model m(config(moe), ps, mo);
  m.init_random(3);
  Engine eng(m);
  OptimizerConfig oc;
  DistributedOptimizer opt(m.store(), ps, oc);
  const auto mbs = batches(st.mesh.dp_size(), st.coord.dp);
  Run r;
  for (int s = 0; s < 3; ++s) {
    StepResult res = eng.forward_backward(mbs);
    r.losses.push_back(res.loss);
    if (s == 2) {
      const Tensor& g = m.store().flat_grads();
      r.grads.assign(g.f32(), g.f32() + g.numel());
    }
    r.norms.push_back(opt.step(1e-3, 1.0).grad_norm);
  }
  const Tensor& p = m.store().flat_params();
  r.params.assign(p.f32(), p.f32() + p.numel());
  r.saved = m.saved_activation_bytes();
  return r;
}

int body(int argc, char** argv) {
  MeshSizes ms;
  bool moe = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::stoi(i + 1 < argc ? argv[++i] : "1"); };
    if (a == "--tp") ms.tp = next();
    else if (a == "--pp") ms.pp = next();
    else if (a == "--dp") ms.dp = next();
    else if (a == "--cp") ms.cp = next();
    else if (a == "--sp") ms.sequence_parallel = true;
    else if (a == "--moe") moe = true;
    else throw Error("recompute_check: unknown option " + a);
  }
  initialize({.global_device_mesh = DeviceMesh::from_sizes(ms)});
  auto& world = *parallel_state().world;
  const Run none = run("none", moe), sel = run("selective", moe), full = run("full", moe);
  int64_t bad = 0;
  auto same = [&](const Run& r, const char* name) {
    auto fail = [&](const std::string& what) {
      std::printf("rank %d: %s differs from none in %s\n", world.rank(), name, what.c_str());
      ++bad;
    };
    if (std::memcmp(r.losses.data(), none.losses.data(), none.losses.size() * sizeof(double))) fail("the losses");
    if (std::memcmp(r.norms.data(), none.norms.data(), none.norms.size() * sizeof(double))) fail("the grad norms");
    if (r.grads.size() != none.grads.size() ||
        std::memcmp(r.grads.data(), none.grads.data(), none.grads.size() * sizeof(float)))
      fail("the gradients");
    if (r.params.size() != none.params.size() ||
        std::memcmp(r.params.data(), none.params.data(), none.params.size() * sizeof(float)))
      fail("the parameters");
  };
  same(sel, "selective");
  same(full, "full");
  if (!(full.saved < sel.saved && sel.saved < none.saved)) {
    std::printf("rank %d: saved activation bytes not full < selective < none: %zu %zu %zu\n", world.rank(), full.saved,
                sel.saved, none.saved);
    ++bad;
  }
  world.all_reduce(&bad, 1);
  if (world.rank() == 0 && bad == 0)
    std::printf("recompute_check OK: %d ranks%s, 3 steps bit-identical, saved activations rank 0: none %zu, "
                "selective %zu, full %zu bytes, losses %.9f %.9f %.9f\n",
                world.size(), moe ? " (MoE)" : "", none.saved, sel.saved, full.saved, none.losses[0], none.losses[1],
                none.losses[2]);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, body); }
