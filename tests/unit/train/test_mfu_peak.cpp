// The peak MFU is computed against on an accelerator (twinkle/train/mfu.h): each rank's share of its
// device's datasheet peak, the device's ranks dividing it, and no peak (MFU 0) where a device has none.
// On the CPU-only side of a build; the device itself: tests/cuda/test_cuda_model.cpp (emulated and GPU).
#include <gtest/gtest.h>

#include <cstdlib>

#include "twinkle/core/error.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/train/mfu.h"

namespace {

using namespace twinkle;

TEST(MfuPeak, RanksSharingADeviceDivideItsPeak) {
  // 3 ranks on device key 7, one alone on key 9: 989 TFLOP/s each device
  const std::vector<int64_t> keys = {7, 9, 7, 7};
  EXPECT_DOUBLE_EQ(device_share(7, keys, 989e12), 989e12 / 3);
  EXPECT_DOUBLE_EQ(device_share(9, keys, 989e12), 989e12);
  // summed over the job: two devices' worth
  double job = 0;
  for (int64_t k : keys) job += device_share(k, keys, 989e12);
  EXPECT_DOUBLE_EQ(job, 2 * 989e12);
  EXPECT_THROW(device_share(8, keys, 1.0), Error);
}

TEST(MfuPeak, NoAcceleratorNoDatasheetPeak) {
  const kernels::AcceleratorPeak cpu = kernels::accelerator_peak("cpu", true);
  EXPECT_EQ(cpu.ordinal, -1);
  EXPECT_EQ(cpu.flops, 0.0);
  // device cuda without its backend initialised (or built): no peak, so MFU is not reported
  unsetenv("TWINKLE_PEAK_GFLOPS");
  auto g = dist::make_local_group();
  EXPECT_EQ(job_peak_flops(*g, true, "cuda"), 0.0);
  // the environment still names the job's peak
  setenv("TWINKLE_PEAK_GFLOPS", "1500", 1);
  EXPECT_DOUBLE_EQ(job_peak_flops(*g, true, "cuda"), 1.5e12);
  unsetenv("TWINKLE_PEAK_GFLOPS");
}

}  // namespace
