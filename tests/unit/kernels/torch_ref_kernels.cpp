// Kernels vs PyTorch autograd (float64) references written by tests/reference/kernels_ref.py.
//
// Registered by tests/kernels.cmake: the CTest fixture `kernels_ref_data` runs the python script once
// into ${CMAKE_BINARY_DIR}/kernels_ref and passes the directory in KERNELS_REF_DIR. Run standalone
// (KERNELS_REF_DIR unset), the binary runs the reference python (TWINKLE_REF_PYTHON) itself once into a temporary directory.
// Tolerance: max |got - ref| <= tol * max|ref| per tensor, tol per case below (all <= 1e-4).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ref_case.h"
#include "twinkle/kernels/cpu/adamw.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/embedding.h"
#include "twinkle/kernels/cpu/rmsnorm.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/cpu/swiglu.h"
#include "twinkle/core/error.h"

namespace fs = std::filesystem;
using namespace twinkle::kernels::cpu;

namespace {

using kernels_ref::Case;
using kernels_ref::expect_close;
using kernels_ref::RefEnv;

// ---------------------------------------------------------------- RMSNorm

void run_rmsnorm(const std::string& name) {
  Case c(name);
  const int64_t rows = c.pi("rows"), dim = c.pi("dim");
  const float eps = static_cast<float>(c.p("eps"));
  auto x = c.f("x"), w = c.f("w"), dy = c.f("dy");
  std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 0.5f);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, eps);
  expect_close(y, c.d("y"), 2e-6, name + " y");
  expect_close(rstd, c.d("rstd"), 2e-6, name + " rstd");
  rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, dim);
  expect_close(dx, c.d("dx"), 5e-6, name + " dx");
  auto dw_ref = c.d("dw");
  for (auto& v : dw_ref) v += 0.5;  // dw accumulates
  expect_close(dw, dw_ref, 5e-6, name + " dw (+=)");
  // dx may alias dy; dw may be null
  std::vector<float> inplace = dy;
  rmsnorm_backward(x.data(), w.data(), rstd.data(), inplace.data(), inplace.data(), nullptr, rows, dim);
  EXPECT_EQ(inplace, dx) << name << ": in-place backward differs";
}

TEST(KernelsTorchRef, RmsNorm) {
  for (const char* n : {"rmsnorm_96", "rmsnorm_qknorm_128", "rmsnorm_odd_50"}) run_rmsnorm(n);
}

// ---------------------------------------------------------------- RoPE

void run_rope(const std::string& name) {
  Case c(name);
  const int64_t tokens = c.pi("tokens"), heads = c.pi("heads"), D = c.pi("head_dim");
  RopeTable t = make_rope_table(c.pi("max_pos"), D, c.p("theta"));
  auto pos = c.i("pos");
  auto x = c.f("x"), dy = c.f("dy");
  rope_forward(x.data(), pos.data(), t, tokens, heads, D);
  expect_close(x, c.d("y"), 2e-6, name + " forward");
  rope_backward(dy.data(), pos.data(), t, tokens, heads, D);
  expect_close(dy, c.d("dx"), 2e-6, name + " backward");
}

TEST(KernelsTorchRef, Rope) {
  for (const char* n : {"rope_d32", "rope_d128", "rope_d64_theta1e4"}) run_rope(n);
}

// Scaled variants (transformers 5 modeling_rope_utils.py via tests/reference/qwen3_ref.py).
void run_rope_variant(const std::string& name) {
  Case c(name);
  const int64_t tokens = c.pi("tokens"), heads = c.pi("heads"), D = c.pi("head_dim");
  const auto& j = c.meta.at("params").at("variant");
  RopeVariant v;
  v.type = j.at("type").get<std::string>();
  v.factor = j.at("factor").get<double>();
  v.max_position_embeddings = c.pi("max_pos");
  if (v.type == "yarn") {
    v.original_max_position_embeddings = j.at("original_max_position_embeddings").get<int64_t>();
    if (!j.at("attention_factor").is_null()) v.attention_factor = j.at("attention_factor").get<double>();
    if (!j.at("mscale").is_null()) v.mscale = j.at("mscale").get<double>();
    if (!j.at("mscale_all_dim").is_null()) v.mscale_all_dim = j.at("mscale_all_dim").get<double>();
    v.beta_fast = j.at("beta_fast").get<double>();
    v.beta_slow = j.at("beta_slow").get<double>();
    v.truncate = j.at("truncate").get<bool>();
  }
  RopeTable t = make_rope_table(c.pi("max_pos"), D, c.p("theta"), v);
  auto pos = c.i("pos");
  auto x = c.f("x"), dy = c.f("dy");
  rope_forward(x.data(), pos.data(), t, tokens, heads, D);
  expect_close(x, c.d("y"), 2e-6, name + " forward");
  rope_backward(dy.data(), pos.data(), t, tokens, heads, D);
  expect_close(dy, c.d("dx"), 2e-6, name + " backward");
  auto [inv, att] = rope_frequencies(v, D, c.p("theta"), c.pi("seq_len"));
  expect_close(inv, c.d("inv_freq_seq_len"), 1e-6, name + " inv_freq(seq_len)");
  EXPECT_NEAR(att, c.d("att")[0], 1e-6) << name << " attention scaling";
}

TEST(KernelsTorchRef, RopeScaledVariants) {
  for (const char* n : {"rope_yarn_d64", "rope_yarn_mscale_notrunc_d32", "rope_yarn_attn_factor_d32", "rope_linear_d32",
                        "rope_dynamic_d32"})
    run_rope_variant(n);
}

TEST(KernelsTorchRef, RopeRefusesOtherTypes) {
  RopeVariant v;
  v.type = "llama3";
  v.factor = 8.0;
  try {
    (void)make_rope_table(16, 8, 1e4, v);
    FAIL() << "llama3 accepted";
  } catch (const twinkle::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'llama3' is not supported"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- SwiGLU

TEST(KernelsTorchRef, SwiGlu) {
  Case c("swiglu");
  const int64_t rows = c.pi("rows"), cols = c.pi("cols"), n = rows * cols;
  auto g = c.f("gate"), u = c.f("up"), dh = c.f("dh");
  std::vector<float> h(n), dg(n), du(n);
  swiglu_forward(g.data(), u.data(), h.data(), n);
  expect_close(h, c.d("h"), 1e-6, "swiglu h");
  swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
  expect_close(dg, c.d("dgate"), 1e-6, "swiglu dgate");
  expect_close(du, c.d("dup"), 1e-6, "swiglu dup");

  // strided: gate|up fused in one [rows, 2*cols] buffer, h/dh/dgate/dup with padded rows
  const int64_t ldf = 2 * cols, ldh = cols + 5;
  std::vector<float> fused(rows * ldf), hs(rows * ldh, -7.0f), dhs(rows * ldh), dfused(rows * ldf, -7.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      fused[r * ldf + j] = g[r * cols + j];
      fused[r * ldf + cols + j] = u[r * cols + j];
      dhs[r * ldh + j] = dh[r * cols + j];
    }
  swiglu_forward_rows(fused.data(), ldf, fused.data() + cols, ldf, hs.data(), ldh, rows, cols);
  swiglu_backward_rows(fused.data(), ldf, fused.data() + cols, ldf, dhs.data(), ldh, dfused.data(), ldf,
                       dfused.data() + cols, ldf, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      ASSERT_EQ(hs[r * ldh + j], h[r * cols + j]) << "row " << r << " col " << j;
      ASSERT_EQ(dfused[r * ldf + j], dg[r * cols + j]);
      ASSERT_EQ(dfused[r * ldf + cols + j], du[r * cols + j]);
    }
    for (int64_t j = cols; j < ldh; ++j) ASSERT_EQ(hs[r * ldh + j], -7.0f) << "padding overwritten";
  }
}

// ---------------------------------------------------------------- attention

void run_attention(const std::string& name) {
  Case c(name);
  const int64_t Hq = c.pi("Hq"), Hkv = c.pi("Hkv"), D = c.pi("D"), T = c.pi("T"), ns = c.pi("n_seqs");
  const float scale = static_cast<float>(c.p("scale"));
  auto cu = c.i("cu_seqlens");
  auto q = c.f("q"), k = c.f("k"), v = c.f("v"), dout = c.f("dout");
  const int64_t window = c.meta.at("params").value("window", int64_t{0});
  std::vector<float> out(T * Hq * D, 99.0f), lse(T * Hq, 99.0f);
  flash_attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), cu.data(), ns, Hq, Hkv, D, scale,
                          window);
  expect_close(out, c.d("out"), 1e-5, name + " out");
  expect_close(lse, c.d("lse"), 1e-6, name + " lse");
  const auto dq_ref = c.d("dq"), dk_ref = c.d("dk"), dv_ref = c.d("dv");
  const struct {
    AttnBwdSchedule s;
    const char* n;
  } scheds[] = {{AttnBwdSchedule::Auto, "auto"},
                {AttnBwdSchedule::PerKvHead, "per-kv-head"},
                {AttnBwdSchedule::PerKeyTile, "per-key-tile"}};
  for (const auto& s : scheds) {
    std::vector<float> dq(T * Hq * D, 99.0f), dk(T * Hkv * D, 99.0f), dv(T * Hkv * D, 99.0f);
    flash_attention_backward_ex(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                                dk.data(), dv.data(), cu.data(), ns, Hq, Hkv, D, scale, s.s, window);
    const std::string tag = name + " " + s.n;
    // floor 1: with window 1 every softmax has one key, so dq = dk = 0 exactly and only rounding remains
    expect_close(dq.data(), dq_ref, 1e-5, tag + " dq", 1.0);
    expect_close(dk.data(), dk_ref, 1e-5, tag + " dk", 1.0);
    expect_close(dv, dv_ref, 1e-5, tag + " dv");
  }
}

TEST(KernelsTorchRef, AttentionGqaD32) { run_attention("attn_gqa_d32"); }
TEST(KernelsTorchRef, AttentionGqaD64) { run_attention("attn_gqa_d64"); }
TEST(KernelsTorchRef, AttentionMhaD40LeadingTokens) { run_attention("attn_mha_d40_lead"); }
TEST(KernelsTorchRef, AttentionGqa4D128) { run_attention("attn_gqa4_d128"); }
// Sliding windows (transformers masking_utils: a query sees `window` keys including itself),
// with whole key tiles skipped in both passes.
TEST(KernelsTorchRef, AttentionWindow3) { run_attention("attn_win3_gqa_d32"); }
TEST(KernelsTorchRef, AttentionWindow70SkipsTiles) { run_attention("attn_win70_gqa_d64"); }
TEST(KernelsTorchRef, AttentionWindow64LeadingTokens) { run_attention("attn_win64_mha_d32_lead"); }
TEST(KernelsTorchRef, AttentionWindow1) { run_attention("attn_win1_d16"); }

// ---------------------------------------------------------------- cross entropy

TEST(KernelsTorchRef, CrossEntropySingleShard) {
  Case c("ce_v50");
  const int64_t T = c.pi("T"), V = c.pi("V");
  auto x = c.f("logits");
  auto lab = c.i("labels");
  std::vector<float> lse(T);
  const double loss = cross_entropy_forward(x.data(), lab.data(), T, V, lse.data());
  const double loss_ref = c.d("loss_sum")[0];
  std::printf("  loss %.9g ref %.9g\n", loss, loss_ref);
  EXPECT_NEAR(loss, loss_ref, 1e-6 * std::fabs(loss_ref));
  expect_close(lse, c.d("lse"), 3e-7, "ce lse");
  const int64_t nv = count_valid_labels(lab.data(), T);
  std::vector<float> scale(T, 1.0f / static_cast<float>(nv)), dl(T * V);
  ce_backward(x.data(), lab.data(), lse.data(), T, V, V, 0, scale.data(), dl.data());
  expect_close(dl, c.d("dlogits"), 1e-6, "ce dlogits");
  // in place
  std::vector<float> xi = x;
  ce_backward(xi.data(), lab.data(), lse.data(), T, V, V, 0, scale.data(), xi.data());
  EXPECT_EQ(xi, dl);
}

TEST(KernelsTorchRef, CrossEntropyVocabParallelTwoShards) {
  Case c("ce_v50");
  const int64_t T = c.pi("T"), V = c.pi("V");
  auto x = c.f("logits");
  auto lab = c.i("labels");
  // shard s holds global ids [vstart, vstart + valid) in a [T, Vl] buffer padded with huge garbage
  const int64_t Vl = 32;
  const int64_t vstart[2] = {0, 25}, valid[2] = {25, V - 25};
  std::vector<float> shard[2];
  for (int s = 0; s < 2; ++s) {
    shard[s].assign(T * Vl, 1e4f);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < valid[s]; ++j) shard[s][t * Vl + j] = x[t * V + vstart[s] + j];
  }
  std::vector<float> mx[2], se[2], tg[2];
  for (int s = 0; s < 2; ++s) {
    mx[s].resize(T);
    ce_local_max(shard[s].data(), T, Vl, valid[s], mx[s].data());
  }
  std::vector<float> gmax(T);
  for (int64_t t = 0; t < T; ++t) gmax[t] = std::max(mx[0][t], mx[1][t]);  // all-reduce MAX
  for (int s = 0; s < 2; ++s) {
    se[s].resize(T);
    tg[s].resize(T);
    ce_local_sumexp_target(shard[s].data(), lab.data(), gmax.data(), T, Vl, valid[s], vstart[s], se[s].data(),
                           tg[s].data());
  }
  std::vector<float> lse(T);
  double loss = 0.0;
  for (int64_t t = 0; t < T; ++t) {  // all-reduce SUM, then Megatron's loss = log(sum_exp) + max - target
    lse[t] = gmax[t] + std::log(se[0][t] + se[1][t]);
    if (lab[t] != kIgnoreIndex) loss += static_cast<double>(lse[t]) - (tg[0][t] + tg[1][t]);
  }
  const double loss_ref = c.d("loss_sum")[0];
  EXPECT_NEAR(loss, loss_ref, 1e-6 * std::fabs(loss_ref));
  expect_close(lse, c.d("lse"), 3e-7, "ce 2-shard lse");
  // single-shard result equals the composition
  std::vector<float> lse1(T);
  const double loss1 = cross_entropy_forward(x.data(), lab.data(), T, V, lse1.data());
  EXPECT_NEAR(loss, loss1, 1e-6 * std::fabs(loss1));

  const int64_t nv = count_valid_labels(lab.data(), T);
  std::vector<float> scale(T, 1.0f / static_cast<float>(nv));
  const auto dref = c.d("dlogits");
  for (int s = 0; s < 2; ++s) {
    std::vector<float> d(T * Vl, 5.0f);
    ce_backward(shard[s].data(), lab.data(), lse.data(), T, Vl, valid[s], vstart[s], scale.data(), d.data());
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < valid[s]; ++j) {
        got.push_back(d[t * Vl + j]);
        ref.push_back(dref[t * V + vstart[s] + j]);
      }
      for (int64_t j = valid[s]; j < Vl; ++j) EXPECT_EQ(d[t * Vl + j], 0.0f) << "padded column " << j;
    }
    expect_close(got, ref, 1e-6, "ce shard " + std::to_string(s) + " dlogits");
  }
}

// ---------------------------------------------------------------- embedding

TEST(KernelsTorchRef, EmbeddingFullAndSharded) {
  Case c("embedding");
  const int64_t V = c.pi("V"), H = c.pi("H"), T = c.pi("T");
  auto table = c.f("table"), dout = c.f("dout");
  auto ids = c.i("ids");
  check_token_ids(ids.data(), T, V);
  std::vector<float> out(T * H, 3.0f), dt(V * H, 1.0f);
  embedding_forward(table.data(), ids.data(), out.data(), T, H, 0, V);
  expect_close(out, c.d("out"), 0.0, "embedding out");
  embedding_backward(dout.data(), ids.data(), dt.data(), T, H, 0, V);
  auto dref = c.d("dtable");
  for (auto& d : dref) d += 1.0;
  expect_close(dt, dref, 5e-7, "embedding dtable (+=)");
  // two shards of 10 rows: outputs sum to the full lookup, gradients land in the owning shard
  std::vector<float> sum(T * H, 0.0f), dsh(V * H, 1.0f);
  for (int s = 0; s < 2; ++s) {
    std::vector<float> o(T * H, 3.0f);
    embedding_forward(table.data() + s * 10 * H, ids.data(), o.data(), T, H, s * 10, 10);
    for (int64_t i = 0; i < T * H; ++i) sum[i] += o[i];
    embedding_backward(dout.data(), ids.data(), dsh.data() + s * 10 * H, T, H, s * 10, 10);
  }
  expect_close(sum, c.d("out"), 0.0, "embedding 2-shard out");
  expect_close(dsh, dref, 5e-7, "embedding 2-shard dtable");
}

// ---------------------------------------------------------------- AdamW

void run_adamw(const std::string& name) {
  Case c(name);
  const int64_t n = c.pi("n"), steps = c.pi("steps");
  auto p = c.f("p0");
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  for (int64_t s = 0; s < steps; ++s) {
    auto g = c.f("g" + std::to_string(s));
    adamw_step(p.data(), g.data(), m.data(), v.data(), n, static_cast<float>(c.p("lr")),
               static_cast<float>(c.p("beta1")), static_cast<float>(c.p("beta2")), static_cast<float>(c.p("eps")),
               static_cast<float>(c.p("weight_decay")), s + 1, c.f("gs" + std::to_string(s))[0]);
    expect_close(p, c.d("p" + std::to_string(s + 1)), 1e-6, name + " p after step " + std::to_string(s + 1));
  }
  expect_close(m, c.d("m"), 1e-6, name + " exp_avg");
  expect_close(v, c.d("v"), 1e-6, name + " exp_avg_sq");
}

TEST(KernelsTorchRef, AdamW) {
  run_adamw("adamw");
  run_adamw("adamw_default");
  run_adamw("adamw_clipped");
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new RefEnv("KERNELS_REF_DIR", "kernels_ref.py"));
  return RUN_ALL_TESTS();
}
