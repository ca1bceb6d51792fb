// Self-contained kernel checks (no python): errors raised, aliasing, thread-count invariance,
// algebraic identities, finite differences in double against the fp32 kernels, and vmath accuracy.
// Numerical agreement with PyTorch is in torch_ref_kernels.cpp (tests/kernels.cmake).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "error_of.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/adamw.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/embedding.h"
#include "twinkle/kernels/cpu/reduce.h"
#include "twinkle/kernels/cpu/rmsnorm.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/cpu/swiglu.h"
#include "twinkle/kernels/cpu/vmath.h"

using namespace twinkle;
using namespace twinkle::kernels::cpu;

using twinkle::test_support::error_of;

namespace {

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 7u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return v;
}

// Runs fn with the given OpenMP thread count, restoring the previous one.
template <typename F>
void with_threads(int n, F&& fn) {
  const int old = omp_get_max_threads();
  omp_set_num_threads(n);
  fn();
  omp_set_num_threads(old);
}

}  // namespace

// ---------------------------------------------------------------- vmath

TEST(KernelsVMath, ExpAndExp2Accuracy) {
  double worst = 0.0, worst2 = 0.0;
  for (int i = -870000; i <= 883700; ++i) {
    const float x = static_cast<float>(i) * 1e-4f;
    const double ref = std::exp(static_cast<double>(x));
    if (ref < 1.2e-38) continue;  // flushed range
    worst = std::max(worst, std::fabs(vmath::exp(x) - ref) / ref);
  }
  for (int i = -1260000; i <= 1270000; ++i) {
    const float x = static_cast<float>(i) * 1e-4f;
    const double ref = std::exp2(static_cast<double>(x));
    worst2 = std::max(worst2, std::fabs(vmath::exp2(x) - ref) / ref);
  }
  std::printf("  vmath::exp max rel err %.3e, vmath::exp2 max rel err %.3e\n", worst, worst2);
  EXPECT_LT(worst, 2e-7);
  EXPECT_LT(worst2, 2e-7);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vmath::exp(-inf), 0.0f);
  EXPECT_EQ(vmath::exp(-1000.0f), 0.0f);
  EXPECT_EQ(vmath::exp2(-inf), 0.0f);
  EXPECT_EQ(vmath::exp(0.0f), 1.0f);
  EXPECT_EQ(vmath::exp2(3.0f), 8.0f);
  EXPECT_TRUE(std::isinf(vmath::exp(100.0f)));
  EXPECT_TRUE(std::isinf(vmath::exp(88.5f)));
  EXPECT_TRUE(std::isinf(vmath::exp2(200.0f)));
  EXPECT_TRUE(std::isinf(vmath::exp(inf)));
  EXPECT_TRUE(std::isnan(vmath::exp(std::nanf(""))));
  EXPECT_EQ(vmath::sigmoid(-200.0f), 0.0f);
  EXPECT_EQ(vmath::sigmoid(200.0f), 1.0f);
  EXPECT_NEAR(vmath::sigmoid(0.7f), 1.0 / (1.0 + std::exp(-0.7)), 1e-7);
}

#ifdef __AVX512F__
TEST(KernelsVMath, SixteenLaneFormsMatchLibm) {
  double worst = 0.0, worst2 = 0.0, worst_s = 0.0;
  alignas(64) float in[16], o1[16], o2[16], o3[16];
  for (int i = -870000; i <= 887000; i += 16) {
    for (int l = 0; l < 16; ++l) in[l] = static_cast<float>(i + l) * 1e-4f;
    _mm512_store_ps(o1, vmath::exp16(_mm512_load_ps(in)));
    _mm512_store_ps(o2, vmath::exp2_16(_mm512_load_ps(in)));
    _mm512_store_ps(o3, vmath::sigmoid16(_mm512_load_ps(in)));
    for (int l = 0; l < 16; ++l) {
      const double x = in[l], e = std::exp(x), e2 = std::exp2(x), sg = 1.0 / (1.0 + std::exp(-x));
      if (e > 1.2e-38) worst = std::max(worst, std::fabs(o1[l] - e) / e);
      if (e2 > 1.2e-38) worst2 = std::max(worst2, std::fabs(o2[l] - e2) / e2);
      if (sg > 1.2e-38) worst_s = std::max(worst_s, std::fabs(o3[l] - sg) / sg);
    }
  }
  std::printf("  exp16 %.3e  exp2_16 %.3e  sigmoid16 %.3e (max rel err)\n", worst, worst2, worst_s);
  EXPECT_LT(worst, 2e-7);
  EXPECT_LT(worst2, 2e-7);
  EXPECT_LT(worst_s, 4e-7);
  const float inf = std::numeric_limits<float>::infinity();
  for (int l = 0; l < 16; ++l) in[l] = l % 4 == 0 ? -inf : l % 4 == 1 ? inf : l % 4 == 2 ? std::nanf("") : 200.0f;
  _mm512_store_ps(o1, vmath::exp16(_mm512_load_ps(in)));
  _mm512_store_ps(o2, vmath::exp2_16(_mm512_load_ps(in)));
  for (int l = 0; l < 16; l += 4) {
    EXPECT_EQ(o1[l], 0.0f);
    EXPECT_EQ(o2[l], 0.0f);
    EXPECT_TRUE(std::isinf(o1[l + 1]) && std::isinf(o2[l + 1]));
    EXPECT_TRUE(std::isnan(o1[l + 2]) && std::isnan(o2[l + 2]));
    EXPECT_TRUE(std::isinf(o1[l + 3]) && std::isinf(o2[l + 3]));
  }
  EXPECT_EQ(vmath::tail_mask(0), 0);
  EXPECT_EQ(vmath::tail_mask(3), 0x7);
  EXPECT_EQ(vmath::tail_mask(40), 0xFFFF);
}
#endif

// ---------------------------------------------------------------- RMSNorm

TEST(KernelsRmsNorm, FiniteDifferenceAndThreadInvariance) {
  const int64_t rows = 300, dim = 77;  // rows*dim > parallel threshold
  auto x = randv(rows * dim, 1, 2.0f), w = randv(dim, 2), dy = randv(rows * dim, 3);
  std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 0.0f);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-6f);
  rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, dim);
  // directional derivative of L = sum(dy * y) in double, along a random direction
  auto loss = [&](const std::vector<double>& xd, const std::vector<double>& wd) {
    double l = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int64_t j = 0; j < dim; ++j) ss += xd[r * dim + j] * xd[r * dim + j];
      const double rs = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int64_t j = 0; j < dim; ++j) l += dy[r * dim + j] * wd[j] * xd[r * dim + j] * rs;
    }
    return l;
  };
  auto ux = randv(rows * dim, 4), uw = randv(dim, 5);
  const double h = 1e-4;
  std::vector<double> xp(x.begin(), x.end()), xm = xp, wp(w.begin(), w.end()), wm = wp;
  for (size_t i = 0; i < xp.size(); ++i) xp[i] += h * ux[i], xm[i] -= h * ux[i];
  for (size_t i = 0; i < wp.size(); ++i) wp[i] += h * uw[i], wm[i] -= h * uw[i];
  const double fd = (loss(xp, wp) - loss(xm, wm)) / (2 * h);
  double an = 0.0;
  for (size_t i = 0; i < ux.size(); ++i) an += static_cast<double>(dx[i]) * ux[i];
  for (size_t i = 0; i < uw.size(); ++i) an += static_cast<double>(dw[i]) * uw[i];
  EXPECT_NEAR(an, fd, 1e-5 * std::fabs(fd) + 1e-6);

  std::vector<float> y1(rows * dim), r1(rows), dx1(rows * dim), dw1(dim, 0.0f);
  with_threads(1, [&] {
    rmsnorm_forward(x.data(), w.data(), y1.data(), r1.data(), rows, dim, 1e-6f);
    rmsnorm_backward(x.data(), w.data(), r1.data(), dy.data(), dx1.data(), dw1.data(), rows, dim);
  });
  EXPECT_EQ(y1, y);
  EXPECT_EQ(dx1, dx);
  for (int64_t j = 0; j < dim; ++j) EXPECT_NEAR(dw1[j], dw[j], 1e-5 * (1 + std::fabs(dw[j])));
}

// ---------------------------------------------------------------- RoPE

TEST(KernelsRope, ErrorsAndInverse) {
  EXPECT_NE(error_of([] { make_rope_table(16, 7, 1e6); }).find("even"), std::string::npos);
  RopeTable t = make_rope_table(16, 8, 1e6);
  EXPECT_EQ(t.cos.size(), 16u * 4u);
  std::vector<float> x = randv(3 * 2 * 8, 6), x0 = x;
  std::vector<int32_t> pos = {0, 15, 7};
  rope_forward(x.data(), pos.data(), t, 3, 2, 8);
  // position 0 is the identity
  for (int i = 0; i < 16; ++i) EXPECT_EQ(x[i], x0[i]);
  // rotation preserves each pair's norm; backward undoes it
  for (int64_t tok = 0; tok < 3; ++tok)
    for (int64_t i = 0; i < 4; ++i) {
      const float* a = x.data() + tok * 16;
      const float* b = x0.data() + tok * 16;
      EXPECT_NEAR(a[i] * a[i] + a[i + 4] * a[i + 4], b[i] * b[i] + b[i + 4] * b[i + 4], 1e-5);
    }
  rope_backward(x.data(), pos.data(), t, 3, 2, 8);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], x0[i], 1e-6);
  std::vector<int32_t> bad = {0, 16, 1};
  const std::string e = error_of([&] { rope_forward(x.data(), bad.data(), t, 3, 2, 8); });
  EXPECT_NE(e.find("position 16 of token 1"), std::string::npos) << e;
  bad[1] = -1;
  EXPECT_NE(error_of([&] { rope_backward(x.data(), bad.data(), t, 3, 2, 8); }).find("token 1"), std::string::npos);
  EXPECT_NE(error_of([&] { rope_forward(x.data(), pos.data(), t, 3, 2, 16); }).find("head_dim"), std::string::npos);
}

// ---------------------------------------------------------------- SwiGLU

TEST(KernelsSwiGlu, FiniteDifferenceInPlaceAndLargeN) {
  const int64_t n = 70001;  // > parallel threshold, odd tail
  auto g = randv(n, 7, 6.0f), u = randv(n, 8), dh = randv(n, 9);
  std::vector<float> h(n), dg(n), du(n);
  swiglu_forward(g.data(), u.data(), h.data(), n);
  swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
  for (int64_t i = 0; i < n; i += 997) {
    const double gd = g[i], s = 1.0 / (1.0 + std::exp(-gd));
    EXPECT_NEAR(h[i], gd * s * u[i], 1e-6 * (1 + std::fabs(gd * s * u[i])));
    auto f = [&](double gg) { return gg / (1.0 + std::exp(-gg)) * u[i] * dh[i]; };
    const double fd = (f(gd + 1e-5) - f(gd - 1e-5)) / 2e-5;
    EXPECT_NEAR(dg[i], fd, 1e-5 * (1 + std::fabs(fd))) << i;
    EXPECT_NEAR(du[i], gd * s * dh[i], 1e-6 * (1 + std::fabs(gd * s * dh[i])));
  }
  // outputs may alias inputs
  std::vector<float> ga = g, ua = u, dha = dh;
  swiglu_backward(ga.data(), ua.data(), dha.data(), ga.data(), ua.data(), n);
  EXPECT_EQ(ga, dg);
  EXPECT_EQ(ua, du);
  std::vector<float> gb = g;
  swiglu_forward(gb.data(), u.data(), gb.data(), n);
  EXPECT_EQ(gb, h);
}

// ---------------------------------------------------------------- attention

namespace {

struct AttnProblem {
  std::vector<int32_t> cu;
  int64_t Hq, Hkv, D, T;
  std::vector<float> q, k, v, dout;
  AttnProblem(std::vector<int32_t> c, int64_t hq, int64_t hkv, int64_t d) : cu(std::move(c)), Hq(hq), Hkv(hkv), D(d) {
    T = cu.back();
    q = randv(T * Hq * D, 11);
    k = randv(T * Hkv * D, 12);
    v = randv(T * Hkv * D, 13);
    dout = randv(T * Hq * D, 14);
  }
  int64_t ns() const { return static_cast<int64_t>(cu.size()) - 1; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
};

// Reference forward in double (explicit softmax per query).
void attn_ref(const AttnProblem& p, std::vector<double>& out, std::vector<double>& lse) {
  out.assign(p.T * p.Hq * p.D, 0.0);
  lse.assign(p.T * p.Hq, 0.0);
  const int64_t grp = p.Hq / p.Hkv;
  for (int64_t s = 0; s < p.ns(); ++s)
    for (int64_t t = p.cu[s]; t < p.cu[s + 1]; ++t)
      for (int64_t h = 0; h < p.Hq; ++h) {
        const int64_t g = h / grp;
        std::vector<double> sc;
        double mx = -1e300;
        for (int64_t u = p.cu[s]; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < p.D; ++i) d += double(p.q[(t * p.Hq + h) * p.D + i]) * p.k[(u * p.Hkv + g) * p.D + i];
          sc.push_back(d * p.scale());
          mx = std::max(mx, sc.back());
        }
        double z = 0;
        for (double x : sc) z += std::exp(x - mx);
        lse[t * p.Hq + h] = mx + std::log(z);
        for (int64_t u = p.cu[s]; u <= t; ++u) {
          const double w = std::exp(sc[u - p.cu[s]] - mx) / z;
          for (int64_t i = 0; i < p.D; ++i) out[(t * p.Hq + h) * p.D + i] += w * p.v[(u * p.Hkv + g) * p.D + i];
        }
      }
}

}  // namespace

TEST(KernelsAttention, Errors) {
  std::vector<float> x(64);
  std::vector<int32_t> cu = {0, 2};
  auto fwd = [&](int64_t hq, int64_t hkv, int64_t d) {
    flash_attention_forward(x.data(), x.data(), x.data(), x.data(), x.data(), cu.data(), 1, hq, hkv, d, 1.0f);
  };
  EXPECT_NE(error_of([&] { fwd(3, 2, 4); }).find("multiple of Hkv"), std::string::npos);
  EXPECT_NE(error_of([&] { fwd(2, 2, 0); }).find("positive"), std::string::npos);
  cu = {0, 3, 2};
  const std::string e = error_of([&] {
    flash_attention_backward(x.data(), x.data(), x.data(), x.data(), x.data(), x.data(), x.data(), x.data(), x.data(),
                             cu.data(), 2, 1, 1, 4, 1.0f);
  });
  EXPECT_NE(e.find("decreasing at index 2"), std::string::npos) << e;
}

TEST(KernelsAttention, LongSegmentVsDoubleReference) {
  // 300 tokens in one segment plus a few short ones: several key tiles, partial last tile, D=80 (padded).
  AttnProblem p({0, 300, 301, 360}, 2, 1, 80);
  std::vector<float> out(p.T * p.Hq * p.D), lse(p.T * p.Hq);
  flash_attention_forward(p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), p.cu.data(), p.ns(), p.Hq, p.Hkv,
                          p.D, p.scale());
  std::vector<double> ro, rl;
  attn_ref(p, ro, rl);
  double eo = 0, el = 0;
  for (size_t i = 0; i < ro.size(); ++i) eo = std::max(eo, std::fabs(out[i] - ro[i]));
  for (size_t i = 0; i < rl.size(); ++i) el = std::max(el, std::fabs(lse[i] - rl[i]));
  EXPECT_LT(eo, 2e-6);
  EXPECT_LT(el, 2e-6);
}

TEST(KernelsAttention, BackwardFiniteDifference) {
  // d/de of L(q + e*uq, k + e*uk, v + e*uv) with L = sum(dout * out), central differences in double
  // on the double reference forward, against the fp32 backward.
  AttnProblem p({0, 70, 75}, 4, 2, 32);
  std::vector<float> out(p.T * p.Hq * p.D), lse(p.T * p.Hq), dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  flash_attention_forward(p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), p.cu.data(), p.ns(), p.Hq, p.Hkv,
                          p.D, p.scale());
  flash_attention_backward(p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), p.dout.data(), dq.data(),
                           dk.data(), dv.data(), p.cu.data(), p.ns(), p.Hq, p.Hkv, p.D, p.scale());
  auto uq = randv(p.q.size(), 21), uk = randv(p.k.size(), 22), uv = randv(p.v.size(), 23);
  // The reference takes float inputs, so the perturbed inputs are rounded to float (relative error
  // ~6e-8 of a 1e-3 step: far below the tolerance).
  auto L = [&](double e) {
    AttnProblem pp = p;
    for (size_t i = 0; i < pp.q.size(); ++i) pp.q[i] += static_cast<float>(e * uq[i]);
    for (size_t i = 0; i < pp.k.size(); ++i) pp.k[i] += static_cast<float>(e * uk[i]);
    for (size_t i = 0; i < pp.v.size(); ++i) pp.v[i] += static_cast<float>(e * uv[i]);
    std::vector<double> o, l;
    attn_ref(pp, o, l);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * p.dout[i];
    return s;
  };
  const double h = 1e-3;
  const double fd = (L(h) - L(-h)) / (2 * h);
  double an = 0;
  for (size_t i = 0; i < uq.size(); ++i) an += double(dq[i]) * uq[i];
  for (size_t i = 0; i < uk.size(); ++i) an += double(dk[i]) * uk[i];
  for (size_t i = 0; i < uv.size(); ++i) an += double(dv[i]) * uv[i];
  std::printf("  attention directional derivative: analytic %.8g, finite difference %.8g\n", an, fd);
  EXPECT_NEAR(an, fd, 2e-3 * std::fabs(fd) + 1e-3);
}

TEST(KernelsAttention, SchedulesAgreeAndPerKvHeadIsDeterministic) {
  AttnProblem p({0, 1, 200, 264, 265, 400}, 4, 2, 64);
  std::vector<float> out(p.T * p.Hq * p.D), lse(p.T * p.Hq);
  flash_attention_forward(p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), p.cu.data(), p.ns(), p.Hq, p.Hkv,
                          p.D, p.scale());
  auto bwd = [&](AttnBwdSchedule s, int threads) {
    std::vector<float> g(p.q.size() + 2 * p.k.size());
    with_threads(threads, [&] {
      flash_attention_backward_ex(p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), p.dout.data(), g.data(),
                                  g.data() + p.q.size(), g.data() + p.q.size() + p.k.size(), p.cu.data(), p.ns(),
                                  p.Hq, p.Hkv, p.D, p.scale(), s);
    });
    return g;
  };
  const auto a1 = bwd(AttnBwdSchedule::PerKvHead, 1), a2 = bwd(AttnBwdSchedule::PerKvHead, 2);
  EXPECT_EQ(a1, a2) << "PerKvHead must be bitwise independent of the thread count";
  const auto b2 = bwd(AttnBwdSchedule::PerKeyTile, 2);
  double err = 0, mx = 0;
  for (size_t i = 0; i < a1.size(); ++i) err = std::max(err, double(std::fabs(a1[i] - b2[i]))), mx = std::max(mx, double(std::fabs(a1[i])));
  EXPECT_LT(err, 1e-6 * mx);
  // the forward is deterministic across thread counts too
  std::vector<float> out1(out.size()), lse1(lse.size());
  with_threads(1, [&] {
    flash_attention_forward(p.q.data(), p.k.data(), p.v.data(), out1.data(), lse1.data(), p.cu.data(), p.ns(), p.Hq,
                            p.Hkv, p.D, p.scale());
  });
  EXPECT_EQ(out1, out);
  EXPECT_EQ(lse1, lse);
}

TEST(KernelsAttention, EmptySegmentsAndLeadingTokens) {
  AttnProblem p({2, 2, 5, 5}, 2, 2, 16);  // tokens 0,1 precede the first segment; two empty segments
  std::vector<float> out(p.T * p.Hq * p.D, 7.0f), lse(p.T * p.Hq, 7.0f);
  flash_attention_forward(p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), p.cu.data(), p.ns(), p.Hq, p.Hkv,
                          p.D, p.scale());
  for (int64_t i = 0; i < 2 * p.Hq * p.D; ++i) EXPECT_EQ(out[i], 0.0f);
  // token 2 is the first of its segment: attends only to itself -> out = v, lse = score
  for (int64_t h = 0; h < p.Hq; ++h)
    for (int64_t d = 0; d < p.D; ++d) EXPECT_NEAR(out[(2 * p.Hq + h) * p.D + d], p.v[(2 * p.Hkv + h) * p.D + d], 1e-6);
}

// ---------------------------------------------------------------- cross entropy

TEST(KernelsCrossEntropy, ErrorsIgnoredRowsAndPadding) {
  std::vector<float> x = randv(3 * 5, 30, 2.0f);
  std::vector<int32_t> lab = {1, 5, -100};
  std::vector<float> lse(3);
  const std::string e = error_of([&] { cross_entropy_forward(x.data(), lab.data(), 3, 5, lse.data()); });
  EXPECT_NE(e.find("label 5 of row 1"), std::string::npos) << e;
  lab = {-100, -100, -100};
  EXPECT_EQ(cross_entropy_forward(x.data(), lab.data(), 3, 5, lse.data()), 0.0);
  EXPECT_EQ(count_valid_labels(lab.data(), 3), 0);
  std::vector<float> d(15, 3.0f);
  ce_backward(x.data(), lab.data(), lse.data(), 3, 5, 5, 0, nullptr, d.data());
  for (float v : d) EXPECT_EQ(v, 0.0f);
  float m;
  ce_local_max(x.data(), 1, 5, 0, &m);
  EXPECT_TRUE(std::isinf(m) && m < 0);
  // softmax gradient rows sum to zero (label in shard) when row_scale is null (=1)
  lab = {2, 0, 4};
  cross_entropy_forward(x.data(), lab.data(), 3, 5, lse.data());
  ce_backward(x.data(), lab.data(), lse.data(), 3, 5, 5, 0, nullptr, d.data());
  for (int t = 0; t < 3; ++t) {
    double s = 0;
    for (int j = 0; j < 5; ++j) s += d[t * 5 + j];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
}

TEST(KernelsCrossEntropy, LargeVocabParallelMatchesSingleShard) {
  const int64_t T = 6, V = 3001;
  auto x = randv(T * V, 31, 8.0f);
  std::vector<int32_t> lab = {0, 3000, 1500, -100, 1501, 42};
  std::vector<float> lse(T);
  const double loss = cross_entropy_forward(x.data(), lab.data(), T, V, lse.data());
  double ref = 0;
  for (int64_t t = 0; t < T; ++t) {
    double mx = -1e300, z = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(x[t * V + j]));
    for (int64_t j = 0; j < V; ++j) z += std::exp(x[t * V + j] - mx);
    EXPECT_NEAR(lse[t], mx + std::log(z), 2e-6 * std::fabs(mx + std::log(z)));
    if (lab[t] != -100) ref += mx + std::log(z) - x[t * V + lab[t]];
  }
  EXPECT_NEAR(loss, ref, 1e-6 * ref);
}

// ---------------------------------------------------------------- embedding

TEST(KernelsEmbedding, CheckIdsAndDeterministicScatter) {
  std::vector<int32_t> ids = {1, 2, 9};
  const std::string e = error_of([&] { check_token_ids(ids.data(), 3, 9); });
  EXPECT_NE(e.find("token id 9 at position 2"), std::string::npos) << e;
  ids[0] = -3;
  EXPECT_NE(error_of([&] { check_token_ids(ids.data(), 3, 9); }).find("position 0"), std::string::npos);

  const int64_t T = 3000, H = 200, V = 7;  // heavy repetition, parallel path
  std::vector<int32_t> many(T);
  for (int64_t t = 0; t < T; ++t) many[t] = static_cast<int32_t>((t * 5) % V);
  auto dout = randv(T * H, 32);
  std::vector<float> d1(V * H, 0.0f), d2(V * H, 0.0f);
  with_threads(1, [&] { embedding_backward(dout.data(), many.data(), d1.data(), T, H, 0, V); });
  with_threads(2, [&] { embedding_backward(dout.data(), many.data(), d2.data(), T, H, 0, V); });
  EXPECT_EQ(d1, d2);
  double s = 0, r = 0;
  for (int64_t t = 0; t < T; ++t)
    if (many[t] == 3) r += dout[t * H + 17];
  s = d1[3 * H + 17];
  EXPECT_NEAR(s, r, 1e-4);
}

// The row maximum under cross_entropy_forward's log-sum-exp: one logit 200 above the others at every column
// of rows of 1..513 columns (the four running maxima, the tail, a lone tail), NaN-free rows followed in memory
// by +1e30 sentinels past the row's end. A maximum taken short (a lane, accumulator or tail missed) makes
// exp(200 - m) overflow; one read past the row makes every exp underflow; either leaves lse != 200 + log(1 +
// sum exp(x - 200)) (float64 here).
TEST(KernelsCrossEntropy, RowMaximumSeesEveryColumnAndNothingPast) {
  for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 127, 128, 513}) {
    for (int64_t at = 0; at < n; ++at) {
      std::vector<float> row(static_cast<size_t>(n + 64), 1e30f);
      const auto base = randv(n, 50 + static_cast<uint32_t>(n));
      for (int64_t j = 0; j < n; ++j) row[j] = j == at ? 200.0f : base[j];
      double s = 0.0;
      for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(row[j]) - 200.0);
      const int32_t label = 0;
      float lse = 0.0f;
      cross_entropy_forward(row.data(), &label, 1, n, &lse);
      ASSERT_NEAR(lse, 200.0 + std::log(s), 2e-5) << "n " << n << ", maximum at column " << at;
    }
  }
}

// ---------------------------------------------------------------- AdamW

TEST(KernelsAdamW, StepErrorAndParallelPathMatchesSerial) {
  std::vector<float> p(3), g(3), m(3), v(3);
  EXPECT_NE(error_of([&] { adamw_step(p.data(), g.data(), m.data(), v.data(), 3, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0); })
                .find("step must be >= 1"),
            std::string::npos);
  const int64_t n = 200003;
  auto p0 = randv(n, 40), gg = randv(n, 41);
  std::vector<float> pa = p0, pb = p0, ma(n, 0.f), mb(n, 0.f), va(n, 0.f), vb(n, 0.f);
  with_threads(1, [&] { adamw_step(pa.data(), gg.data(), ma.data(), va.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1); });
  with_threads(2, [&] { adamw_step(pb.data(), gg.data(), mb.data(), vb.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1); });
  EXPECT_EQ(pa, pb);
  // first step of Adam moves every parameter by ~lr*sign(g) after decay
  for (int64_t i = 0; i < n; i += 1001)
    if (std::fabs(gg[i]) > 1e-3f) {
      EXPECT_NEAR(pa[i], p0[i] * (1 - 1e-4f) - 1e-3f * (gg[i] > 0 ? 1 : -1), 1e-6);
    }
}

// The clip coefficient handed to the step as grad_scale equals clip_grad_norm_'s in-place scaling of the
// gradients followed by a plain step, bit for bit (the optimizer no longer makes the scaling pass), on the
// vector body and the scalar tail, at 1 and 2 threads.
TEST(KernelsAdamW, GradScaleIsScaleThenStepBitForBit) {
  const int64_t n = 100013;  // 16-float vectors and a 13-element tail; > 4 chunks: the parallel path
  auto p0 = randv(n, 42), g = randv(n, 43);
  auto m0 = randv(n, 44), v0 = randv(n, 45);
  for (auto& x : v0) x = x * x;
  const float coef = 0.0371f;
  for (int threads : {1, 2}) {
    std::vector<float> pa = p0, ma = m0, va = v0, pb = p0, mb = m0, vb = v0, gs = g;
    with_threads(threads, [&] {
      scale_inplace(gs.data(), n, coef);
      adamw_step(pa.data(), gs.data(), ma.data(), va.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
      adamw_step(pb.data(), g.data(), mb.data(), vb.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, coef);
    });
    EXPECT_EQ(pa, pb) << threads << " thread(s)";
    EXPECT_EQ(ma, mb) << threads << " thread(s)";
    EXPECT_EQ(va, vb) << threads << " thread(s)";
    EXPECT_NE(pa, p0);
  }
}

// ---------------------------------------------------------------- reduce

TEST(KernelsReduce, AllHelpers) {
  for (int64_t n : {int64_t{0}, int64_t{17}, int64_t{100003}}) {
    auto x = randv(n, 50), y = randv(n, 51);
    double ref = 0;
    for (float v : x) ref += double(v) * v;
    const double s1 = sum_squares(x.data(), n);
    EXPECT_NEAR(s1, ref, 1e-12 * (1 + ref));
    double s2 = 0.0;
    with_threads(2, [&] { s2 = sum_squares(x.data(), n); });
    double s3 = 0.0;
    with_threads(1, [&] { s3 = sum_squares(x.data(), n); });
    EXPECT_EQ(s2, s3) << "sum_squares must not depend on the thread count";
    std::vector<float> a = y, b = y, c = x;
    add_inplace(a.data(), x.data(), n);
    axpy(b.data(), x.data(), n, -2.5f);
    scale_inplace(c.data(), n, 0.5f);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i], y[i] + x[i]);
      ASSERT_FLOAT_EQ(b[i], y[i] - 2.5f * x[i]);
      ASSERT_EQ(c[i], 0.5f * x[i]);
    }
  }
}
