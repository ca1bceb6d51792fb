// The fused bf16 gate|up + SwiGLU backward (bf16_ops.h) runs its 8-row blocks in one OpenMP loop; the
// work inside a block must not open a parallel region of its own. At the default nesting level (1) an
// inner region is inactive and harmless, but with OMP_MAX_ACTIVE_LEVELS > 1 every outer thread starts a
// team of its own and the cores are oversubscribed. This binary interposes libgomp's GOMP_parallel (the
// entry GCC emits for `#pragma omp parallel` and `parallel for schedule(static)`; the static kernel
// library binds to the executable's definition) and counts the regions begun at nesting level >= 1,
// with max_active_levels 2, at a width (I = 4352) where both inner candidates (swiglu_backward_rows:
// rows * cols > 16384; f32_to_bf16_rne: n > 65536) took their parallel branch before the fix. The
// results are the unfused pair's bit for bit (test_gemm_bf16.cpp checks that pair against references).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "randn.h"
#include "twinkle/core/dtype.h"
#include "twinkle/kernels/cpu/bf16_ops.h"
#include "twinkle/kernels/cpu/gemm_bf16.h"
#include "twinkle/kernels/cpu/swiglu.h"

namespace {
std::atomic<long> g_top{0}, g_nested{0};
}  // namespace

extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  using Real = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  if (omp_get_level() > 0)
    g_nested.fetch_add(1);
  else
    g_top.fetch_add(1);
  real(fn, data, num_threads, flags);
}

namespace {

using namespace twinkle::kernels::cpu;

using twinkle::testutil::randn;

TEST(Bf16OmpNesting, FusedSwigluBackwardOpensNoNestedRegion) {
  const int64_t T = 61, I = 4352, H = 16;
  auto X = randn(static_cast<size_t>(T * H), 1), W = randn(static_cast<size_t>(2 * I * H), 2, 0.05f);
  auto gu = randn(static_cast<size_t>(T * 2 * I), 3), da = randn(static_cast<size_t>(T * I), 4);
  // the unfused pair at the top level (its regions are not nested)
  std::vector<float> dgu(static_cast<size_t>(T * 2 * I)), dX_ref(static_cast<size_t>(T * H)),
      dW_ref(static_cast<size_t>(2 * I * H), 0.5f);
  swiglu_backward_rows(gu.data(), 2 * I, gu.data() + I, 2 * I, da.data(), I, dgu.data(), 2 * I, dgu.data() + I, 2 * I,
                       T, I);
  linear_backward_bf16(X.data(), W.data(), dgu.data(), dX_ref.data(), dW_ref.data(), T, 2 * I, H);

  const int levels = omp_get_max_active_levels(), threads = omp_get_max_threads();
  omp_set_max_active_levels(2);
  omp_set_num_threads(2);
  // the interposer sees regions at all, and a nested one when there is one
  g_top = 0;
  g_nested = 0;
#pragma omp parallel
  {
#pragma omp parallel
    { (void)omp_get_thread_num(); }
  }
  ASSERT_GE(g_top.load(), 1) << "GOMP_parallel is not interposed (not libgomp?): the check below would see nothing";
  ASSERT_GE(g_nested.load(), 1) << "a nested region was not counted";

  g_top = 0;
  g_nested = 0;
  std::vector<float> dX(static_cast<size_t>(T * H), 7.0f), dW(static_cast<size_t>(2 * I * H), 0.5f);
  gate_up_swiglu_backward_bf16(X.data(), W.data(), gu.data(), da.data(), nullptr, dX.data(), dW.data(), T, I, H, false);
  const long top = g_top.load(), nested = g_nested.load();
  omp_set_max_active_levels(levels);
  omp_set_num_threads(threads);
  EXPECT_GE(top, 1) << "the block loop ran without a parallel region";
  EXPECT_EQ(nested, 0) << nested << " OpenMP regions begun inside the block loop";
  for (size_t i = 0; i < dX.size(); ++i) ASSERT_EQ(dX[i], dX_ref[i]) << "dX element " << i;
  for (size_t i = 0; i < dW.size(); ++i) ASSERT_EQ(dW[i], dW_ref[i]) << "dW element " << i;
}

// f32_to_bf16_rne_serial rounds as twinkle::f32_to_bf16 (core/dtype.h, checked bit by bit in
// test_dtype.cpp) and as the parallel f32_to_bf16_rne (its blocks of 4096 and a tail).
TEST(Bf16OmpNesting, SerialRoundingIsRoundToNearestEven) {
  for (int64_t n : {int64_t{5}, int64_t{4096 * 17 + 13}}) {
    auto x = randn(static_cast<size_t>(n), 7);
    std::vector<uint16_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n), 1);
    f32_to_bf16_rne(x.data(), a.data(), n);
    f32_to_bf16_rne_serial(x.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i], twinkle::f32_to_bf16(x[i])) << "n = " << n << ", element " << i;
      ASSERT_EQ(a[i], b[i]) << "n = " << n << ", element " << i;
    }
  }
}

}  // namespace
