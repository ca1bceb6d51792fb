// MoE kernels (router, permute / un-permute, grouped GEMM, aux / z losses, load statistics) vs
// PyTorch float64 autograd references written by tests/reference/moe_kernels_ref.py, whose
// semantics are tests/reference/qwen3_moe_ref.py's (transformers' Qwen3MoeSparseMoeBlock and
// load_balancing_loss_func, Megatron's switch_load_balancing_loss_func and z_loss_func).
//
// Registered by tests/moe.cmake: the fixture `moe_kernels_ref_data` runs the script once into
// ${CMAKE_BINARY_DIR}/moe_kernels_ref (MOE_KERNELS_REF_DIR). Standalone, the binary runs it itself.
// Tolerance: max |got - ref| <= tol * max|ref| per tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/grouped_gemm.h"
#include "twinkle/kernels/cpu/moe_aux_loss.h"
#include "twinkle/kernels/cpu/moe_permute.h"
#include "twinkle/kernels/cpu/moe_router.h"
#include "twinkle/kernels/cpu/swiglu.h"
#include "ref_case.h"

using namespace twinkle::kernels::cpu;

namespace {

using kernels_ref::Case;
using kernels_ref::expect_close;
using kernels_ref::RefEnv;

std::vector<uint8_t> mask_u8(const std::vector<int32_t>& m) {
  std::vector<uint8_t> r(m.size());
  for (size_t i = 0; i < m.size(); ++i) r[i] = m[i] ? 1 : 0;
  return r;
}

// ---------------------------------------------------------------- router

void run_router(const std::string& name) {
  Case c(name);
  const int64_t T = c.pi("T"), E = c.pi("E"), k = c.pi("k");
  const bool norm = c.pi("norm") != 0;
  auto logits = c.f("logits"), dw = c.f("dw"), dprobs = c.f("dprobs");
  std::vector<float> probs(T * E), w(T * k), dl(T * E, 7.0f);
  std::vector<int32_t> sel(T * k, -1);
  moe_router_forward(logits.data(), probs.data(), sel.data(), w.data(), T, E, k, norm);
  EXPECT_EQ(sel, c.i("sel")) << name << ": selected experts (ties to the lower index)";
  expect_close(probs, c.d("probs"), 1e-6, name + " probs");
  expect_close(w, c.d("w"), 1e-6, name + " topk weights");
  moe_router_backward(probs.data(), sel.data(), w.data(), dw.data(), dprobs.data(), nullptr, dl.data(), T, E, k, norm);
  expect_close(dl, c.d("dlogits"), 2e-6, name + " dlogits");
  // dlogits may alias dprobs; an extra logits gradient is added after the softmax backward
  std::vector<float> alias = dprobs;
  moe_router_backward(probs.data(), sel.data(), w.data(), dw.data(), alias.data(), nullptr, alias.data(), T, E, k, norm);
  EXPECT_EQ(alias, dl) << name << ": in-place backward differs";
  std::vector<float> extra(T * E, 0.25f), dl2(T * E);
  moe_router_backward(probs.data(), sel.data(), w.data(), dw.data(), dprobs.data(), extra.data(), dl2.data(), T, E, k,
                      norm);
  for (int64_t i = 0; i < T * E; ++i) ASSERT_NEAR(dl2[i], dl[i] + 0.25f, 1e-6) << "extra gradient, element " << i;
}

TEST(MoeKernelsTorchRef, RouterNormTopkWithTies) { run_router("moe_router_norm"); }
TEST(MoeKernelsTorchRef, RouterRawProbabilitiesWithTies) { run_router("moe_router_raw"); }
TEST(MoeKernelsTorchRef, RouterE16K4) { run_router("moe_router_e16_k4"); }

TEST(MoeKernelsTorchRef, RouterTieOrderIsLowerIndex) {
  // independent of torch: four equal logits, k = 3 -> experts 1, 2, 3 (the lowest indices)
  const float logits[5] = {0.5f, 1.0f, 1.0f, 1.0f, 1.0f};
  float probs[5], w[3];
  int32_t sel[3];
  moe_router_forward(logits, probs, sel, w, 1, 5, 3, true);
  EXPECT_EQ(sel[0], 1);
  EXPECT_EQ(sel[1], 2);
  EXPECT_EQ(sel[2], 3);
  for (float v : w) EXPECT_FLOAT_EQ(v, 1.0f / 3.0f);
  EXPECT_THROW(moe_router_forward(logits, probs, sel, w, 1, 5, 6, true), twinkle::Error);
}

// ---------------------------------------------------------------- the whole expert block

void run_experts(const std::string& name) {
  Case c(name);
  const int64_t T = c.pi("T"), H = c.pi("H"), I = c.pi("I"), E = c.pi("E"), k = c.pi("k");
  const bool norm = c.pi("norm") != 0;
  const int64_t R = T * k;
  auto x = c.f("x"), logits = c.f("logits"), dout = c.f("dout"), wg = c.f("wg"), wu = c.f("wu"), wd = c.f("wd");
  // forward: router -> sort -> permute -> grouped gate/up -> SwiGLU -> grouped down -> combine
  std::vector<float> probs(T * E), w(T * k);
  std::vector<int32_t> sel(T * k), row_of_slot(R), slot_of_row(R);
  std::vector<int64_t> counts(E);
  moe_router_forward(logits.data(), probs.data(), sel.data(), w.data(), T, E, k, norm);
  EXPECT_EQ(sel, c.i("sel"));
  expect_close(w, c.d("w"), 1e-6, name + " combine weights");
  moe_sort_by_expert(sel.data(), T, k, E, counts.data(), row_of_slot.data(), slot_of_row.data());
  const int64_t empty = c.pi("empty_expert");
  if (empty >= 0) {
    EXPECT_EQ(counts[empty], 0) << "the case must leave expert " << empty << " without tokens";
  }
  int64_t total = 0;
  for (auto n : counts) total += n;
  EXPECT_EQ(total, R);
  std::vector<float> xp(R * H), g(R * I), u(R * I), h(R * I), y(R * H), out(T * H);
  moe_permute_forward(x.data(), slot_of_row.data(), xp.data(), R, k, H);
  grouped_linear_forward(xp.data(), wg.data(), I * H, counts.data(), E, g.data(), I, H);
  grouped_linear_forward(xp.data(), wu.data(), I * H, counts.data(), E, u.data(), I, H);
  swiglu_forward(g.data(), u.data(), h.data(), R * I);
  grouped_linear_forward(h.data(), wd.data(), H * I, counts.data(), E, y.data(), H, I);
  moe_unpermute_forward(y.data(), row_of_slot.data(), w.data(), out.data(), T, k, H);
  expect_close(out, c.d("out"), 2e-6, name + " out");
  // backward
  std::vector<float> dy(R * H), dw(T * k), dh(R * I), dg(R * I), du(R * I), dxp(R * H), dx(T * H), dl(T * E);
  std::vector<float> dwg(E * I * H, 0.0f), dwu(E * I * H, 0.0f), dwd(E * H * I, 0.0f);
  moe_unpermute_backward(y.data(), row_of_slot.data(), w.data(), dout.data(), dy.data(), dw.data(), T, k, H);
  grouped_linear_backward(h.data(), wd.data(), H * I, counts.data(), E, dy.data(), dh.data(), dwd.data(), H, I);
  swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), R * I);
  grouped_linear_backward(xp.data(), wg.data(), I * H, counts.data(), E, dg.data(), dxp.data(), dwg.data(), I, H);
  grouped_linear_backward(xp.data(), wu.data(), I * H, counts.data(), E, du.data(), dxp.data(), dwu.data(), I, H,
                          /*accumulate_dx=*/true);
  moe_permute_backward(dxp.data(), row_of_slot.data(), dx.data(), T, k, H);
  moe_router_backward(probs.data(), sel.data(), w.data(), dw.data(), nullptr, nullptr, dl.data(), T, E, k, norm);
  expect_close(dx, c.d("dx"), 5e-6, name + " dx");
  expect_close(dl, c.d("dlogits"), 5e-6, name + " dlogits (through the combine weights)");
  expect_close(dwg, c.d("dwg"), 5e-6, name + " d gate_proj (all experts)");
  expect_close(dwu, c.d("dwu"), 5e-6, name + " d up_proj");
  expect_close(dwd, c.d("dwd"), 5e-6, name + " d down_proj");
  if (empty >= 0) {
    for (int64_t i = 0; i < I * H; ++i) ASSERT_EQ(dwg[empty * I * H + i], 0.0f) << "empty expert's gradient";
  }
}

TEST(MoeKernelsTorchRef, ExpertsNormTopkWithAnEmptyExpert) { run_experts("moe_experts_norm"); }
TEST(MoeKernelsTorchRef, ExpertsRawProbabilitiesTop3) { run_experts("moe_experts_raw_k3"); }

TEST(MoeKernelsTorchRef, PermutationOrderIsMegatrons) {
  // rows sorted by expert, tokens ascending inside an expert (independent of torch)
  const int32_t sel[] = {2, 0, 0, 1, 2, 1};  // T = 3, k = 2
  std::vector<int64_t> counts(3);
  std::vector<int32_t> ros(6), sor(6);
  moe_sort_by_expert(sel, 3, 2, 3, counts.data(), ros.data(), sor.data());
  EXPECT_EQ(counts, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(sor, (std::vector<int32_t>{1, 2, 3, 5, 0, 4}));  // e0: t0,t1  e1: t1,t2  e2: t0,t2
  for (int s = 0; s < 6; ++s) EXPECT_EQ(sor[ros[s]], s);
  const int32_t dup[] = {1, 1};
  EXPECT_THROW(moe_sort_by_expert(dup, 1, 2, 3, counts.data(), ros.data(), sor.data()), twinkle::Error);
  const int32_t out_of_range[] = {0, 3};
  EXPECT_THROW(moe_sort_by_expert(out_of_range, 1, 2, 3, counts.data(), ros.data(), sor.data()), twinkle::Error);
}

// ---------------------------------------------------------------- aux losses

TEST(MoeKernelsTorchRef, AuxLossGlobalIsTransformersLoadBalancingLoss) {
  Case c("moe_aux_global");
  const int64_t L = c.pi("layers"), B = c.pi("B"), S = c.pi("S"), E = c.pi("E"), k = c.pi("k"), T = B * S;
  auto logits = c.f("logits");
  auto mask = mask_u8(c.i("mask"));
  std::vector<float> probs(L * T * E), w(L * T * k), dl(L * T * E);
  std::vector<int32_t> sel(L * T * k);
  std::vector<double> psum(E, 0.0);
  std::vector<int64_t> counts(E, 0);
  int64_t n = 0;
  for (int64_t l = 0; l < L; ++l) {
    moe_router_forward(logits.data() + l * T * E, probs.data() + l * T * E, sel.data() + l * T * k,
                       w.data() + l * T * k, T, E, k, true);
    n += moe_routing_stats(probs.data() + l * T * E, sel.data() + l * T * k, mask.data(), T, E, k, psum.data(),
                           counts.data());
  }
  const double scale = moe_aux_scale_global(E, n);
  const double aux = moe_aux_loss_value(psum.data(), counts.data(), E, scale);
  const double ref = c.d("aux")[0];
  std::printf("  aux %.12g ref %.12g\n", aux, ref);
  EXPECT_NEAR(aux, ref, 1e-6 * std::fabs(ref));
  std::vector<float> dprobs(L * T * E, 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    moe_aux_loss_backward(counts.data(), mask.data(), T, E, scale, dprobs.data() + l * T * E);
    moe_router_backward(probs.data() + l * T * E, sel.data() + l * T * k, w.data() + l * T * k, nullptr,
                        dprobs.data() + l * T * E, nullptr, dl.data() + l * T * E, T, E, k, true);
  }
  expect_close(dl, c.d("dlogits"), 2e-6, "aux global dlogits (padding rows 0)");
}

TEST(MoeKernelsTorchRef, AuxLossPerLayerIsMegatrons) {
  Case c("moe_aux_per_layer");
  const int64_t T = c.pi("T"), E = c.pi("E"), k = c.pi("k");
  const double coeff = c.p("coeff");
  auto logits = c.f("logits");
  auto mask = mask_u8(c.i("mask"));
  std::vector<float> probs(T * E), w(T * k), dprobs(T * E, 0.0f), dl(T * E);
  std::vector<int32_t> sel(T * k);
  std::vector<double> psum(E, 0.0);
  std::vector<int64_t> counts(E, 0);
  moe_router_forward(logits.data(), probs.data(), sel.data(), w.data(), T, E, k, false);
  // the statistics of two shards of the same tokens (as tp/cp would split them) add up
  const int64_t T0 = 8;
  int64_t n = moe_routing_stats(probs.data(), sel.data(), mask.data(), T0, E, k, psum.data(), counts.data());
  n += moe_routing_stats(probs.data() + T0 * E, sel.data() + T0 * k, mask.data() + T0, T - T0, E, k, psum.data(),
                         counts.data());
  const double scale = moe_aux_scale_per_layer(E, k, n);
  const double aux = coeff * moe_aux_loss_value(psum.data(), counts.data(), E, scale);
  const double ref = c.d("aux")[0];
  std::printf("  aux %.12g ref %.12g\n", aux, ref);
  EXPECT_NEAR(aux, ref, 1e-6 * std::fabs(ref));
  moe_aux_loss_backward(counts.data(), mask.data(), T, E, coeff * scale, dprobs.data());
  moe_router_backward(probs.data(), sel.data(), w.data(), nullptr, dprobs.data(), nullptr, dl.data(), T, E, k, false);
  expect_close(dl, c.d("dlogits"), 2e-6, "aux per_layer dlogits");
}

TEST(MoeKernelsTorchRef, ZLoss) {
  Case c("moe_z_loss");
  const int64_t T = c.pi("T"), E = c.pi("E");
  const double coeff = c.p("coeff");
  auto logits = c.f("logits");
  auto mask = mask_u8(c.i("mask"));
  std::vector<float> lse(T), probs(T * E), w(T), dl(T * E, 0.0f);
  std::vector<int32_t> sel(T);
  int64_t n = 0;
  for (auto m : mask) n += m;
  const double z = coeff * moe_z_loss_forward(logits.data(), mask.data(), T, E, lse.data()) / static_cast<double>(n);
  const double ref = c.d("z")[0];
  std::printf("  z %.12g ref %.12g\n", z, ref);
  EXPECT_NEAR(z, ref, 1e-6 * std::fabs(ref));
  moe_router_forward(logits.data(), probs.data(), sel.data(), w.data(), T, E, 1, false);
  moe_z_loss_backward(probs.data(), lse.data(), mask.data(), T, E, coeff / static_cast<double>(n), dl.data());
  expect_close(dl, c.d("dlogits"), 2e-6, "z-loss dlogits");
}

TEST(MoeKernels, ExpertLoadShares) {
  const int64_t counts[4] = {6, 2, 0, 4};
  ExpertLoad l = moe_expert_load(counts, 4);
  EXPECT_DOUBLE_EQ(l.max_share, 0.5);
  EXPECT_DOUBLE_EQ(l.min_share, 0.0);
  const int64_t even[3] = {5, 5, 5};
  l = moe_expert_load(even, 3);
  EXPECT_DOUBLE_EQ(l.max_share, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(l.min_share, 1.0 / 3.0);
  const int64_t none[2] = {0, 0};
  l = moe_expert_load(none, 2);
  EXPECT_EQ(l.max_share, 0.0);
  EXPECT_EQ(l.min_share, 0.0);
}

TEST(MoeKernels, GroupedLinearRejectsBadSizes) {
  const int64_t bad[2] = {1, -1};
  float x[4] = {}, wt[4] = {}, y[4] = {};
  EXPECT_THROW(grouped_linear_forward(x, wt, 1, bad, 2, y, 1, 1), twinkle::Error);
  const int64_t ok[2] = {1, 1};
  EXPECT_THROW(grouped_linear_forward(x, wt, 0, ok, 2, y, 1, 1), twinkle::Error);  // stride < N*K
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new RefEnv("MOE_KERNELS_REF_DIR", "moe_kernels_ref.py"));
  return RUN_ALL_TESTS();
}
