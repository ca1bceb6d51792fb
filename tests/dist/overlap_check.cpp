// Overlapped data-parallel communication (DistributedOptimizer overlap_grad_reduce /
// overlap_param_gather, wired by Engine::set_optimizer) changes when the bucket collectives run,
// not what they compute: on any layout the losses, grad norms, reduced gradients and updated
// parameters of 3 steps are bit-identical (memcmp) with the switches off, grad-only and both on.
// So that the test cannot pass with an overlap that does nothing, the "on" runs must have started
// gradient buckets during the backward (CommOverlapStats::grad_buckets_early > 0 on every rank
// that ran a backward with a dp group) and, with the distributed optimizer, waited for
// parameter all-gathers inside a forward (param_buckets_forward > 0); the "off" run none.
// Small buckets (4 KiB) put several buckets in every stage and cut parameters across buckets.
// A second forward_backward before the step under overlap_grad_reduce (its buckets already started)
// must be refused with the error naming the option, not reduce a partial sum, on EVERY rank before
// any communication: on every layout (pp included, where only the last stage used to throw, from
// its backward, while stage 0 waited for that gradient forever; and a replica without a
// micro-batch). The job must then go on: the step and one more forward_backward + step.
// With --device cuda the model, its gradients and parameters live on the device and the bucket
// collectives are the CUDA groups' non-blocking ones (src/dist/cuda: ordered on the backend's stream;
// on the emulated device, tests/cuda.cmake overlap_check_cuda_emu, host-staged through MPI).
//
// Usage: overlap_check [--tp N] [--pp N] [--dp N] [--ep N] [--etp N] [--sp] [--moe] [--no-distopt]
//                      [--device cpu|cuda] [--short]   (--short: one row in the global batch, so a dp replica runs
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
#include "bitwise_layout.h"

using namespace twinkle;

namespace {

struct Run {
  testutil::StepTrace trace;
  CommOverlapStats stats;
  size_t mbs = 0;
};

Qwen3ModelOptions model_options(bool moe) {
  Qwen3ModelOptions mo;
  mo.moe_aux_loss_type = "per_layer";
  mo.moe_aux_loss_coeff = moe ? 0.01 : 0.0;
  return mo;
}

Qwen3Model& seeded(Qwen3Model& m) {
  m.init_random(5);
  return m;
}

// The tiny layout model (seed 5) with its engine, its optimizer (4 KiB buckets, the overlap switches
// given) and this dp rank's micro-batches of a global batch of rows_n rows.
struct Setup {
  std::shared_ptr<dist::ParallelState> ps{&parallel_state(), [](dist::ParallelState*) {}};
  Qwen3Model m;
  Engine eng;
  DistributedOptimizer opt;
  std::vector<MicroBatch> mbs;
  Setup(bool grad_overlap, bool param_overlap, bool moe, bool distopt, int64_t rows_n)
      : m(testutil::tiny_layout_config(moe), ps, model_options(moe)),
        eng(seeded(m)),
        opt(m.store(), ps,
            OptimizerConfig{.use_distributed_optimizer = distopt,
                            .bucket_bytes = 4096,
                            .overlap_grad_reduce = grad_overlap,
                            .overlap_param_gather = param_overlap}),
        mbs(testutil::seeded_micro_batches(ps->mesh.dp_size(), ps->coord.dp, rows_n, 17)) {
    opt.set_kernels(m.kernels());  // the model's device (cpu, or cuda with --device cuda)
    eng.set_optimizer(&opt);
  }
};

Run run(bool grad_overlap, bool param_overlap, bool moe, bool distopt, int64_t rows_n) {
  Setup su(grad_overlap, param_overlap, moe, distopt, rows_n);
  Qwen3Model& m = su.m;
  Engine& eng = su.eng;
  DistributedOptimizer& opt = su.opt;
  const std::vector<MicroBatch>& mbs = su.mbs;
  Run r;
  r.mbs = mbs.size();
  for (int s = 0; s < 3; ++s) {
    StepResult res = eng.forward_backward(mbs);
    r.trace.losses.push_back(res.loss);
    if (s == 2) {
      opt.reduce_gradients();
      const Tensor g = m.store().flat_grads().to(Device::CPU);
      r.trace.grads.assign(g.f32(), g.f32() + g.numel());
    }
    r.trace.norms.push_back(opt.step(1e-3, 1.0).grad_norm);
  }
  opt.finish_param_sync();
  const Tensor p = m.store().flat_params().to(Device::CPU);
  r.trace.params.assign(p.f32(), p.f32() + p.numel());
  r.stats = opt.comm_stats();
  return r;
}

// overlap_grad_reduce with a second forward_backward before the step: the buckets the first call
// started would miss the second call's gradients. Returns the error text (empty: nothing refused).
// The refusal must leave every rank where it was: the first call's step, then one more
// forward_backward and step run on every rank (a rank left in a collective would hang them).
std::string second_forward_backward_error(bool moe, bool distopt, int64_t rows_n) {
  Setup su(/*grad_overlap=*/true, /*param_overlap=*/false, moe, distopt, rows_n);
  su.eng.forward_backward(su.mbs);
  std::string err;
  try {
    su.eng.forward_backward(su.mbs);
  } catch (const Error& e) {
    err = e.what();
  }
  su.opt.step(1e-3, 1.0);
  su.eng.forward_backward(su.mbs);
  su.opt.step(1e-3, 1.0);
  su.opt.finish_param_sync();
  return err;
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
    else if (a == "--device" && i + 1 < argc) ms.device_type = argv[++i];
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
    bad += testutil::count_bitwise_differences(world.rank(), r.trace, name, off.trace, "off");
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
  // Every rank the same way, on every layout (pp, a replica without a micro-batch): the refusal
  // comes before any communication.
  {
    const std::string err = second_forward_backward_error(moe, distopt, rows_n);
    expect(err.find("a second forward_backward before the optimizer step with overlap_grad_reduce on") !=
                   std::string::npos &&
               err.find("refused on every rank before any communication") != std::string::npos,
           "a second forward_backward before the step under overlap_grad_reduce was not refused here (error: '" +
               err + "')");
  }
  world.all_reduce(&bad, 1);
  if (world.rank() == 0 && bad == 0)
    std::printf("overlap_check OK: %d ranks on %s%s%s, 3 steps bit-identical off / grad / grad+param; rank 0: %lld of %lld "
                "gradient buckets started in the backward, %lld of %lld all-gathers waited in the forward; "
                "losses %.9f %.9f %.9f\n",
                world.size(), ms.device_type.c_str(), moe ? " (MoE)" : "", distopt ? "" : " (no distributed optimizer)",
                static_cast<long long>(both.stats.grad_buckets_early), static_cast<long long>(both.stats.grad_buckets),
                static_cast<long long>(both.stats.param_buckets_forward), static_cast<long long>(both.stats.param_buckets),
                off.trace.losses[0], off.trace.losses[1], off.trace.losses[2]);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, body); }
