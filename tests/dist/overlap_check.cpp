// Overlapped data-parallel communication (DistributedOptimizer overlap_grad_reduce /
// overlap_param_gather, wired by Engine::set_optimizer) changes when the bucket collectives run,
// not what they compute: on any layout the losses, grad norms, reduced gradients and updated
// parameters of 3 steps are bit-identical (memcmp) with the switches off, grad-only and both on.
// So that the test cannot pass with an overlap that does nothing, the "on" runs must have started
// gradient buckets during the backward (CommOverlapStats::grad_buckets_early > 0 on every rank
// that ran a backward with a dp group) and, with the distributed optimizer, waited for
// parameter all-gathers inside a forward (param_buckets_forward > 0); the "off" run none.
// Small buckets (4 KiB) put several buckets in every stage and cut parameters across buckets.
//
// Usage: overlap_check [--tp N] [--pp N] [--dp N] [--ep N] [--etp N] [--sp] [--moe] [--no-distopt]
//                      [--short]   (--short: one row in the global batch, so a dp replica runs
//                                   no micro-batch and reports its gradients only in finalize)
//   (world size = tp * pp * dp; prints "overlap_check OK ..." on rank 0)
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
  std::vector<float> grads, params;  // the last step's reduced gradients / the final parameters
  CommOverlapStats stats;
  size_t mbs = 0;
};

ModelConfig config(bool moe) {
  ModelConfig c;
  c.model_type = moe ? "qwen3_moe" : "qwen3";
  c.vocab_size = 301; c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 4;
  c.num_attention_heads = 4; c.num_key_value_heads = 2; c.head_dim = 16; c.tie_word_embeddings = true;
  c.max_position_embeddings = 256; c.rope_theta = 1e6;
  if (moe) {
    c.num_experts = 4; c.num_experts_per_tok = 2; c.moe_intermediate_size = 24; c.norm_topk_prob = true;
    c.mlp_only_layers = {1};
  }
  return c;
}

std::vector<MicroBatch> batches(int64_t dp, int64_t dp_rank, int64_t rows_n) {
  std::mt19937_64 g(17);
  std::vector<EncodedRow> rows;
  for (int64_t i = 0; i < rows_n; ++i) {
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
  std::vector<EncodedRow> mine(rows.begin() + dp_rank * rows_n / dp, rows.begin() + (dp_rank + 1) * rows_n / dp);
  std::vector<MicroBatch> out;
  for (size_t i = 0; i < mine.size(); i += 2)
    out.push_back(collate_padded(std::vector<EncodedRow>(mine.begin() + static_cast<long>(i),
                                                         mine.begin() + static_cast<long>(std::min(i + 2, mine.size()))),
                                 0));
  return out;
}

Run run(bool grad_overlap, bool param_overlap, bool moe, bool distopt, int64_t rows_n) {
  auto& st = parallel_state();
  auto ps = std::shared_ptr<dist::ParallelState>(&st, [](dist::ParallelState*) {});
  Qwen3ModelOptions mo;
  mo.moe_aux_loss_type = "per_layer";
  mo.moe_aux_loss_coeff = moe ? 0.01 : 0.0;
  Qwen3Model m(config(moe), ps, mo);
  m.init_random(5);
  Engine eng(m);
  OptimizerConfig oc;
  oc.use_distributed_optimizer = distopt;
  oc.bucket_bytes = 4096;
  oc.overlap_grad_reduce = grad_overlap;
  oc.overlap_param_gather = param_overlap;
  DistributedOptimizer opt(m.store(), ps, oc);
  eng.set_optimizer(&opt);
  const auto mbs = batches(st.mesh.dp_size(), st.coord.dp, rows_n);
  Run r;
  r.mbs = mbs.size();
  for (int s = 0; s < 3; ++s) {
    StepResult res = eng.forward_backward(mbs);
    r.losses.push_back(res.loss);
    if (s == 2) {
      opt.reduce_gradients();
      const Tensor& g = m.store().flat_grads();
      r.grads.assign(g.f32(), g.f32() + g.numel());
    }
    r.norms.push_back(opt.step(1e-3, 1.0).grad_norm);
  }
  opt.finish_param_sync();
  const Tensor& p = m.store().flat_params();
  r.params.assign(p.f32(), p.f32() + p.numel());
  r.stats = opt.comm_stats();
  return r;
}

int body(int argc, char** argv) {
  MeshSizes ms;
  bool moe = false, distopt = true, short_batch = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return std::stoi(i + 1 < argc ? argv[++i] : "1"); };
    if (a == "--tp") ms.tp = next();
    else if (a == "--pp") ms.pp = next();
    else if (a == "--dp") ms.dp = next();
    else if (a == "--ep") ms.ep = next();
    else if (a == "--etp") ms.etp = next();
    else if (a == "--sp") ms.sequence_parallel = true;
    else if (a == "--moe") moe = true;
    else if (a == "--no-distopt") distopt = false;
    else if (a == "--short") short_batch = true;
    else throw Error("overlap_check: unknown option " + a);
  }
  initialize({.global_device_mesh = DeviceMesh::from_sizes(ms)});
  auto& st = parallel_state();
  auto& world = *st.world;
  const int64_t rows_n = short_batch ? 1 : 8;
  const Run off = run(false, false, moe, distopt, rows_n), grad = run(true, false, moe, distopt, rows_n),
            both = run(true, true, moe, distopt, rows_n);
  int64_t bad = 0;
  auto same = [&](const Run& r, const char* name) {
    auto fail = [&](const std::string& what) {
      std::printf("rank %d: %s differs from off in %s\n", world.rank(), name, what.c_str());
      ++bad;
    };
    if (std::memcmp(r.losses.data(), off.losses.data(), off.losses.size() * sizeof(double))) fail("the losses");
    if (std::memcmp(r.norms.data(), off.norms.data(), off.norms.size() * sizeof(double))) fail("the grad norms");
    if (r.grads.size() != off.grads.size() ||
        std::memcmp(r.grads.data(), off.grads.data(), off.grads.size() * sizeof(float)))
      fail("the reduced gradients");
    if (r.params.size() != off.params.size() ||
        std::memcmp(r.params.data(), off.params.data(), off.params.size() * sizeof(float)))
      fail("the parameters");
  };
  same(grad, "overlap_grad_reduce");
  same(both, "overlap_grad_reduce + overlap_param_gather");
  // The overlap must have happened: buckets exist when a dp (or expert-dp) group has > 1 rank.
  const bool has_buckets = st.dp_cp->size() > 1 || (st.edp && st.edp->size() > 1);
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::printf("rank %d: %s\n", world.rank(), what.c_str());
      ++bad;
    }
  };
  expect(off.stats.grad_buckets_early == 0 && off.stats.param_buckets_forward == 0,
         "the off run overlapped something (" + std::to_string(off.stats.grad_buckets_early) + " early buckets)");
  if (has_buckets && off.mbs > 0) {
    expect(grad.stats.grad_buckets_early > 0, "overlap_grad_reduce started no bucket during the backward");
    expect(both.stats.grad_buckets_early > 0, "overlap_grad_reduce + param gather started no bucket during the backward");
    if (distopt)
      expect(both.stats.param_buckets_forward > 0, "overlap_param_gather: no all-gather was waited for in a forward");
  }
  expect(grad.stats.param_buckets_forward == 0, "overlap_grad_reduce alone deferred a parameter all-gather");
  world.all_reduce(&bad, 1);
  if (world.rank() == 0 && bad == 0)
    std::printf("overlap_check OK: %d ranks%s%s, 3 steps bit-identical off / grad / grad+param; rank 0: %lld of %lld "
                "gradient buckets started in the backward, %lld of %lld all-gathers waited in the forward; "
                "losses %.9f %.9f %.9f\n",
                world.size(), moe ? " (MoE)" : "", distopt ? "" : " (no distributed optimizer)",
                static_cast<long long>(both.stats.grad_buckets_early), static_cast<long long>(both.stats.grad_buckets),
                static_cast<long long>(both.stats.param_buckets_forward), static_cast<long long>(both.stats.param_buckets),
                off.losses[0], off.losses[1], off.losses[2]);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, body); }
