// linear_cross_entropy (src/kernels/cpu/linear_cross_entropy.cpp) over several vocab blocks of 512
// columns, a partial last block, chunks of rows, ignored rows and labels on block edges, against a
// float64 loop written here (logits = X W^T, lse, loss sum, dX = s (softmax - onehot) W,
// dW += s (softmax - onehot)^T X, as torch.nn.functional.cross_entropy(reduction="sum") and its autograd
// give them). The conformance table (kernel_conformance.cpp, PyTorch float64) covers V = 37, one block.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/linear_cross_entropy.h"

namespace {

using twinkle::kernels::cpu::linear_cross_entropy;

std::vector<float> randv(size_t n, uint32_t seed, float scale) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return v;
}

struct Ref {
  double loss = 0;
  std::vector<double> lse, dx, dw;
};

Ref reference(const std::vector<float>& X, const std::vector<float>& W, const std::vector<int32_t>& lab, int64_t T,
              int64_t V, int64_t H, double scale) {
  Ref r;
  r.lse.assign(T, 0.0);
  r.dx.assign(T * H, 0.0);
  r.dw.assign(V * H, 0.0);
  std::vector<double> z(V);
  for (int64_t t = 0; t < T; ++t) {
    double mx = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      double a = 0;
      for (int64_t h = 0; h < H; ++h) a += static_cast<double>(X[t * H + h]) * W[v * H + h];
      z[v] = a;
      mx = std::max(mx, a);
    }
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - mx);
    r.lse[t] = mx + std::log(s);
    if (lab[t] == -100) continue;
    r.loss += r.lse[t] - z[lab[t]];
    for (int64_t v = 0; v < V; ++v) {
      const double d = scale * (std::exp(z[v] - r.lse[t]) - (v == lab[t] ? 1.0 : 0.0));
      for (int64_t h = 0; h < H; ++h) {
        r.dx[t * H + h] += d * W[v * H + h];
        r.dw[v * H + h] += d * X[t * H + h];
      }
    }
  }
  return r;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref, double offset = 0.0) {
  double mx = 1e-30, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, std::fabs(ref[i]));
    const double e = std::fabs(static_cast<double>(got[i]) - offset - ref[i]);
    if (!(e <= err)) err = e;  // NaN counts as worst
  }
  return err / mx;
}

struct Out {
  double loss;
  std::vector<float> lse, dx, dw;
};

Out run(const std::vector<float>& X, const std::vector<float>& W, const std::vector<int32_t>& lab, int64_t T, int64_t V,
        int64_t H, float scale, int64_t chunk, int threads) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  Out o;
  o.lse.assign(T, 7.0f);
  o.dx.assign(T * H, 7.0f);     // overwritten
  o.dw.assign(V * H, 0.25f);    // accumulated
  o.loss = linear_cross_entropy(X.data(), W.data(), lab.data(), T, V, H, scale, o.lse.data(), o.dx.data(),
                                o.dw.data(), chunk);
  omp_set_num_threads(before);
  return o;
}

// Loss and lse within 1e-6, dX and dW (accumulated onto 0.25) within dx_tol of the float64 loop.
void expect_matches(const Out& o, const Ref& ref, double dx_tol = 1e-5) {
  EXPECT_LE(std::fabs(o.loss - ref.loss) / std::fabs(ref.loss), 1e-6) << o.loss << " vs " << ref.loss;
  EXPECT_LE(rel_err(o.lse, ref.lse), 1e-6);
  EXPECT_LE(rel_err(o.dx, ref.dx), dx_tol);
  EXPECT_LE(rel_err(o.dw, ref.dw, 0.25), 1e-5);
}

// 19 blocks of 512 + a partial block of 172 (20 blocks in 16 dX slabs, some of them empty); labels on
// both sides of block edges, the last column, column 0 and ignored rows.
TEST(LinearCrossEntropy, ManyVocabBlocksMatchFloat64Loop) {
  const int64_t T = 45, V = 9900, H = 24;
  const auto X = randv(T * H, 1, 1.0f), W = randv(V * H, 2, 0.6f);
  std::vector<int32_t> lab(T);
  const int32_t edges[] = {0, 511, 512, 1023, 1024, 9727, 9728, 9899, -100};
  for (int64_t t = 0; t < T; ++t) lab[t] = t < 9 ? edges[t] : (t % 7 == 0 ? -100 : static_cast<int32_t>((t * 389) % V));
  int64_t nv = 0;
  for (auto l : lab) nv += l != -100;
  const float scale = 1.0f / static_cast<float>(nv);
  const Ref ref = reference(X, W, lab, T, V, H, scale);
  // chunk 0 = one chunk of all 45 rows; 16: chunks of 16, 16, 13 rows; 7: seven chunks, the last of
  // 3 rows.
  const std::pair<int64_t, int> runs[] = {{0, 2}, {16, 2}, {0, 1}, {7, 1}};
  for (auto [chunk, threads] : runs) {
    SCOPED_TRACE("chunk " + std::to_string(chunk) + ", " + std::to_string(threads) + " thread(s)");
    const Out o = run(X, W, lab, T, V, H, scale, chunk, threads);
    expect_matches(o, ref);
  }
  // Without dX the loss and lse are the same and nothing else is written.
  std::vector<float> lse(T);
  const double lf = linear_cross_entropy(X.data(), W.data(), lab.data(), T, V, H, scale, lse.data(), nullptr, nullptr, 0);
  EXPECT_LE(std::fabs(lf - ref.loss) / std::fabs(ref.loss), 1e-6);
  EXPECT_LE(rel_err(lse, ref.lse), 1e-6);
}

// Shapes off the 16 x 16 tiles of the dW path's transposes (X^T per chunk, dW^T per block, dW^T made 256
// rows of H at a time): H = 17 (one edge column / row) and 300 (a 256-row tile and a 44-row one), chunks of
// 33 rows (two tiles and one row), 16 (exact) and a 1-row last chunk, and a last vocab block of 52 columns
// (three tiles and 4 columns); chunks of 33 and 16 rows run their blocks on two threads.
TEST(LinearCrossEntropy, ShapesOffTheTransposeTilesMatchFloat64Loop) {
  for (const int64_t H : {int64_t{17}, int64_t{300}}) {
  const int64_t T = 33, V = 2100;
  const auto X = randv(T * H, 7, 1.0f), W = randv(V * H, 8, 0.7f * std::sqrt(17.0f / static_cast<float>(H)));
  std::vector<int32_t> lab(T);
  for (int64_t t = 0; t < T; ++t) lab[t] = t == 5 ? -100 : static_cast<int32_t>((t * 331 + 2050) % V);
  const float scale = 1.0f / 32.0f;
  const Ref ref = reference(X, W, lab, T, V, H, scale);
  const std::pair<int64_t, int> runs[] = {{0, 1}, {16, 1}, {16, 2}, {0, 2}};
  for (auto [chunk, threads] : runs) {
    SCOPED_TRACE("H " + std::to_string(H) + ", chunk " + std::to_string(chunk) + ", " + std::to_string(threads) +
                 " thread(s)");
    const Out o = run(X, W, lab, T, V, H, scale, chunk, threads);
    EXPECT_LE(std::fabs(o.loss - ref.loss) / std::fabs(ref.loss), 1e-6) << o.loss << " vs " << ref.loss;
    EXPECT_LE(rel_err(o.dx, ref.dx), 1e-5);
    EXPECT_LE(rel_err(o.dw, ref.dw, 0.25), 1e-5);
  }
  }
}

// dX sums over a fixed set of slabs of blocks: the results are bit-identical for 1, 2 and 3 threads.
TEST(LinearCrossEntropy, ResultsDoNotDependOnTheThreadCount) {
  const int64_t T = 64, V = 20000, H = 16;  // 40 blocks: 16 slabs
  const auto X = randv(T * H, 3, 1.0f), W = randv(V * H, 4, 0.5f);
  std::vector<int32_t> lab(T);
  for (int64_t t = 0; t < T; ++t) lab[t] = t % 9 == 4 ? -100 : static_cast<int32_t>((t * 7919) % V);
  const Out one = run(X, W, lab, T, V, H, 0.01f, 0, 1);
  for (int threads : {2, 3}) {
    const Out o = run(X, W, lab, T, V, H, 0.01f, 0, threads);
    EXPECT_EQ(o.loss, one.loss) << threads << " threads";
    EXPECT_EQ(0, std::memcmp(o.lse.data(), one.lse.data(), o.lse.size() * 4)) << threads << " threads";
    EXPECT_EQ(0, std::memcmp(o.dx.data(), one.dx.data(), o.dx.size() * 4)) << threads << " threads";
    EXPECT_EQ(0, std::memcmp(o.dw.data(), one.dw.data(), o.dw.size() * 4)) << threads << " threads";
  }
}

// The forward's exp pass takes each row against its label's logit (column 0's for an ignored row) and
// falls back to the block's maximum where a logit is more than 64 above that reference. Rows with
// x[0] = 10 see four hot columns (w[0] = 12: logits ~120, at columns 300, 1030, 2047 and 2599, mid-vector,
// mid-row, a block's last column, the last column) far above their labels' logits: without the fallback
// exp overflows; row 1's label is a hot column (every other column flushes against it); rows 2 (ignored)
// and 3 (label 0) start from column 0's logit ~-120, so every block falls back at its first columns, and
// a fallback that does not rescale the columns it already did leaves them ~e^120 too large.
TEST(LinearCrossEntropy, LogitsFarFromTheLabelsLogitMatchFloat64Loop) {
  const int64_t T = 12, V = 2600, H = 8;  // 5 blocks of 512 and one of 40
  auto X = randv(T * H, 11, 1.0f), W = randv(V * H, 12, 0.5f);
  for (int64_t v : {300, 1030, 2047, 2599}) W[v * H] = 12.0f;
  W[0] = -12.0f;
  for (int64_t t = 0; t < 4; ++t) X[t * H] = 10.0f;
  const std::vector<int32_t> lab = {5, 1030, -100, 0, 17, 511, 512, -100, 2599, 1500, 2046, 9};
  int64_t nv = 0;
  for (auto l : lab) nv += l != -100;
  const float scale = 1.0f / static_cast<float>(nv);
  const Ref ref = reference(X, W, lab, T, V, H, scale);
  for (int64_t t : {0, 2}) {  // the hot columns are more than 64 above row 0's label logit and row 2's column 0
    const int64_t v = t == 0 ? 5 : 0;
    double z = 0;
    for (int64_t h = 0; h < H; ++h) z += static_cast<double>(X[t * H + h]) * W[v * H + h];
    ASSERT_GT(ref.lse[t] - z, 70.0) << "row " << t;
  }
  const std::pair<int64_t, int> runs[] = {{0, 1}, {5, 2}, {0, 2}};
  for (auto [chunk, threads] : runs) {
    SCOPED_TRACE("chunk " + std::to_string(chunk) + ", " + std::to_string(threads) + " thread(s)");
    const Out o = run(X, W, lab, T, V, H, scale, chunk, threads);
    expect_matches(o, ref);
  }
}

// Logits near 2^30, where float's spacing is 128: row 0's label logit (the exp pass's reference) is
// 2^30 + 128 and column 7's is 2^30 + 256, one spacing and 128 above it, so the headroom test must see the
// difference (taken exactly, as exp gets it) and fall back to the block maximum; without the fallback
// exp(128) overflows and the loss is inf. Loss 128 (float64 loop).
TEST(LinearCrossEntropy, LogitsNear2To30MatchFloat64Loop) {
  const int64_t T = 2, V = 40, H = 2;
  std::vector<float> X = {32768.0f, 1.0f, 1.0f / 32768.0f, 0.01f}, W(V * H);  // row 1: logits 1 + {0, 1.28, 2.56}
  for (int64_t v = 0; v < V; ++v) {
    W[v * H] = 32768.0f;
    W[v * H + 1] = v == 5 ? 128.0f : v == 7 ? 256.0f : 0.0f;
  }
  const std::vector<int32_t> lab = {5, 3};
  const Ref ref = reference(X, W, lab, T, V, H, 0.5);
  ASSERT_NEAR(ref.lse[0] - 1073741824.0, 256.0, 1e-9);
  const Out o = run(X, W, lab, T, V, H, 0.5f, 0, 1);
  expect_matches(o, ref, 1e-4);  // dX: sum_v p_v W_v with W[:, 0] = 32768 cancels to ~float eps x 32768
}

TEST(LinearCrossEntropy, LabelOutsideTheVocabularyNamesTheRow) {
  const int64_t T = 3, V = 600, H = 4;
  const auto X = randv(T * H, 5, 1.0f), W = randv(V * H, 6, 1.0f);
  const std::vector<int32_t> lab = {1, 600, 2};
  std::vector<float> lse(T), dx(T * H), dw(V * H);
  try {
    linear_cross_entropy(X.data(), W.data(), lab.data(), T, V, H, 1.0f, lse.data(), dx.data(), dw.data(), 0);
    FAIL() << "no error";
  } catch (const twinkle::Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 600 of row 1"), std::string::npos) << e.what();
  }
}

}  // namespace
