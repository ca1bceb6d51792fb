// The Qwen3-MoE block (model/qwen3_moe_block.h) with fixed router logits: the router weight is
// [I_E | 0], so router_logits[t] = x[t, :E] exactly, and x's first E columns are chosen by hand
// (ties inside the top-k, at its boundary, all equal, a dominant expert). The per-token combine
// weights and selected experts the block saves, its output, d(x) and d(gate.weight) are checked
// against PyTorch float64 (tests/reference/moe_kernels_ref.py block_fixed_router_case, the
// semantics of transformers' Qwen3MoeSparseMoeBlock in tests/reference/qwen3_moe_ref.py), for
// norm_topk_prob true and false; rows whose weights follow from the logits alone are also
// checked against closed-form values (independent of torch).
//
// Registered by tests/moe.cmake on the fixture moe_kernels_ref (MOE_KERNELS_REF_DIR); standalone
// the binary runs the script itself into a temporary directory.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../kernels/ref_case.h"
#include "twinkle/core/workspace.h"
#include "twinkle/io/model_config.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/qwen3_moe_block.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/param_store.h"
#include "twinkle/parallel/tensor_table.h"

using namespace twinkle;

namespace {

using kernels_ref::expect_close;

struct Result {
  std::vector<float> w, out, dx, dgate;
  std::vector<int32_t> sel;
};

// The block on the case's weights and tokens: forward, then backward of dout.
Result run_block(const kernels_ref::Case& c) {
  const int64_t T = c.pi("T"), H = c.pi("H"), E = c.pi("E"), k = c.pi("k"), I = c.pi("I");
  ModelConfig cfg;
  cfg.model_type = "qwen3_moe";
  cfg.hidden_size = H;
  cfg.num_experts = E;
  cfg.num_experts_per_tok = k;
  cfg.moe_intermediate_size = I;
  cfg.norm_topk_prob = c.pi("norm") != 0;
  parallel::TensorTable table;
  parallel::TensorParallel tp;
  Qwen3MoeBlock blk(table, tp, nullptr, cfg, 0);
  ParamStore store;
  table.materialize(0, store);
  store.finalize();
  store.zero_grad();
  auto set = [&](const std::string& name, const float* src, int64_t n) {
    Param* p = store.find(name);
    EXPECT_NE(p, nullptr) << name;
    EXPECT_EQ(p->data.numel(), n) << name;
    std::copy(src, src + n, p->data.f32());
  };
  const auto gate = c.f("gate"), wg = c.f("wg"), wu = c.f("wu"), wd = c.f("wd"), x = c.f("x"), dout = c.f("dout");
  set("model.layers.0.mlp.gate.weight", gate.data(), E * H);
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    set(p + "gate_proj.weight", wg.data() + e * I * H, I * H);
    set(p + "up_proj.weight", wu.data() + e * I * H, I * H);
    set(p + "down_proj.weight", wd.data() + e * H * I, H * I);
  }
  StageBatch b;
  b.T = T;
  b.token_mask.assign(static_cast<size_t>(T), 1);
  b.num_real = T;
  MoeActivations a;
  Workspace ws;
  Result r;
  const float* out = blk.forward(x.data(), b, a, ws);
  r.out.assign(out, out + T * H);
  r.w.assign(a.topk_w, a.topk_w + T * blk.top_k());
  r.sel.assign(a.topk_idx, a.topk_idx + T * blk.top_k());
  const float* dx = blk.backward(dout.data(), b, a, ws);
  r.dx.assign(dx, dx + T * H);
  const float* dg = store.find("model.layers.0.mlp.gate.weight")->grad.f32();
  r.dgate.assign(dg, dg + E * H);
  return r;
}

void check_case(const std::string& name, bool norm) {
  kernels_ref::Case c(name);
  ASSERT_EQ(c.pi("norm") != 0, norm);
  const Result r = run_block(c);
  // the selection: torch's top-k with ties to the lower index, and the hand-chosen expectation
  EXPECT_EQ(r.sel, c.i("sel")) << name << ": selected experts";
  const std::vector<int32_t> want_sel = {0, 1, 1, 2, 0, 2, 0, 1, 2, 3, 3, 0, 0, 2, 0, 3};
  EXPECT_EQ(r.sel, want_sel) << name << ": selected experts vs the hand-worked ties";
  expect_close(r.w.data(), c.d("w"), 1e-6, name + " combine weights [T, k]");
  expect_close(r.out.data(), c.d("out"), 2e-6, name + " block output [T, H]");
  expect_close(r.dx.data(), c.d("dx"), 5e-6, name + " d(x) [T, H]");
  expect_close(r.dgate.data(), c.d("dgate"), 5e-6, name + " d(gate.weight) [E, H]");
  // closed forms, independent of torch: row 0 has four equal logits (p = 1/4 each), row 1 two
  // equal maxima 2 among {0.5, 2, 2, -1}, row 2 three equal maxima 3 and one 0.
  const double p1 = 1.0 / (2.0 + std::exp(-1.5) + std::exp(-3.0));  // row 1: each of the two maxima
  const double p2 = 1.0 / (3.0 + std::exp(-3.0));                     // row 2: each of the three maxima
  const double want[3] = {norm ? 0.5 : 0.25, norm ? 0.5 : p1, norm ? 0.5 : p2};
  for (int t = 0; t < 3; ++t)
    for (int j = 0; j < 2; ++j)
      EXPECT_NEAR(r.w[static_cast<size_t>(t * 2 + j)], want[t], 1e-7) << name << ": row " << t << " slot " << j;
}

}  // namespace

TEST(MoeBlockFixedRouter, NormTopkProbCombineWeightsAndOutput) { check_case("moe_block_fixed_router_norm", true); }
TEST(MoeBlockFixedRouter, RawTopkProbCombineWeightsAndOutput) { check_case("moe_block_fixed_router_raw", false); }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new kernels_ref::RefEnv("MOE_KERNELS_REF_DIR", "moe_kernels_ref.py"));
  return RUN_ALL_TESTS();
}
