// Single-process engine smoke tests: the loss of a fixed batch falls under AdamW, micro-batch
// splits do not change loss or gradients, packing equals padding. Exact numerics against
// PyTorch are checked in tests/train.cmake (tests/reference/check_train.py).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "twinkle/dist/parallel_state.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/train/engine.h"

using namespace twinkle;

namespace {

ModelConfig tiny_config(bool tied) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 301;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 128;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<EncodedRow> rows(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<EncodedRow> out;
  for (int i = 0; i < n; ++i) {
    EncodedRow r;
    int L = 6 + static_cast<int>(g() % 12);
    for (int t = 0; t < L; ++t) {
      r.input_ids.push_back(static_cast<int32_t>(g() % 301));
      r.labels.push_back(t < 2 ? -100 : r.input_ids.back());
      r.position_ids.push_back(t);
    }
    r.length = L;
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST(Engine, LossFallsOnAFixedBatch) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(true), ps);
  model.init_random(1);
  Engine eng(model);
  OptimizerConfig oc;
  oc.lr = 3e-3;
  DistributedOptimizer opt(model.store(), ps, oc);
  auto r = rows(4, 7);
  std::vector<MicroBatch> mbs{collate_padded(r, 0)};
  double first = 0, last = 0;
  for (int s = 0; s < 20; ++s) {
    auto res = eng.forward_backward(mbs);
    ASSERT_TRUE(std::isfinite(res.loss));
    if (s == 0) first = res.loss;
    last = res.loss;
    opt.step(oc.lr);
  }
  EXPECT_NEAR(first, std::log(301.0), 0.2);  // near-uniform predictions at init
  EXPECT_LT(last, first - 1.0);
}

TEST(Engine, MicroBatchSplitAndPackingDoNotChangeLossOrGrads) {
  auto ps = dist::make_single_process_state();
  auto r = rows(4, 11);
  auto run = [&](std::vector<MicroBatch> mbs, std::vector<float>& grads) {
    Qwen3Model model(tiny_config(false), ps);
    model.init_random(3);
    Engine eng(model);
    double loss = eng.forward_backward(mbs).loss;
    grads = model.store().flat_grads().to_vector();
    return loss;
  };
  std::vector<float> g1, g2, g3;
  double l1 = run({collate_padded(r, 0)}, g1);
  double l2 = run({collate_padded({r[0]}, 0), collate_padded({r[1], r[2]}, 0), collate_padded({r[3]}, 0)}, g2);
  double l3 = run({collate_packed(r)}, g3);
  EXPECT_NEAR(l1, l2, 1e-5 * l1);
  EXPECT_NEAR(l1, l3, 1e-5 * l1);
  float gmax = 0;
  for (float v : g1) gmax = std::max(gmax, std::fabs(v));
  ASSERT_GT(gmax, 0.0f);
  for (size_t i = 0; i < g1.size(); ++i) {
    ASSERT_NEAR(g1[i], g2[i], 1e-5f * gmax) << i;
    ASSERT_NEAR(g1[i], g3[i], 1e-5f * gmax) << i;
  }
}

// A step skipped for a non-finite gradient norm (DistributedOptimizer::step -> discard_gradients)
// leaves nothing behind: the next step's gradients, update and step count are
// those of a run that never saw the bad step (its weights were not touched), bit for bit. A discard
// that kept the gradient buffer adds the NaN (and the old batch's gradient) onto the next step's.
// (train_nonfinite_stops_or_skips cannot see it: every step after its first bad one is bad too.)
TEST(Engine, AStepSkippedForANonFiniteGradientLeavesNoGradientBehind) {
  auto ps = dist::make_single_process_state();
  const std::vector<MicroBatch> bad{collate_padded(rows(3, 21), 0)}, good{collate_padded(rows(4, 22), 0)};
  OptimizerConfig oc;
  oc.lr = 1e-3;
  auto run = [&](bool with_bad_step, std::vector<float>& grads, std::vector<float>& params, int64_t& steps) {
    Qwen3Model model(tiny_config(true), ps);
    model.init_random(5);
    Engine eng(model);
    DistributedOptimizer opt(model.store(), ps, oc);
    if (with_bad_step) {
      eng.forward_backward(bad);
      model.store().flat_grads().f32()[7] = std::numeric_limits<float>::quiet_NaN();
      const StepStats st = opt.step(oc.lr);
      EXPECT_TRUE(st.skipped);
      EXPECT_TRUE(std::isnan(st.grad_norm));
    }
    eng.forward_backward(good);
    grads = model.store().flat_grads().to_vector();
    const StepStats st = opt.step(oc.lr);
    EXPECT_FALSE(st.skipped);
    EXPECT_TRUE(std::isfinite(st.grad_norm));
    params = model.store().flat_params().to_vector();
    steps = opt.steps();
  };
  std::vector<float> g_ref, p_ref, g, p;
  int64_t s_ref = 0, s = 0;
  run(false, g_ref, p_ref, s_ref);
  run(true, g, p, s);
  ASSERT_EQ(g.size(), g_ref.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], g_ref[i]) << "gradient " << i << " after the skipped step";
  for (size_t i = 0; i < p.size(); ++i) ASSERT_EQ(p[i], p_ref[i]) << "parameter " << i << " after the next step";
  EXPECT_EQ(s, s_ref);
  EXPECT_EQ(s, 1);
}
