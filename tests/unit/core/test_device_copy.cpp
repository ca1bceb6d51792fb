// core/device_copy.h: the device_type names, and the host path of the byte moves (the device path is
// exercised on the GPU by tests/cuda/test_cuda_model.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"
#include "twinkle/core/workspace.h"

using namespace twinkle;

TEST(DeviceCopy, ParsesTheMeshDeviceTypes) {
  EXPECT_EQ(parse_device("cpu"), Device::CPU);
  EXPECT_EQ(parse_device("cuda"), Device::CUDA);
  EXPECT_EQ(parse_device("npu"), Device::NPU);
  try {
    parse_device("gpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device_type 'gpu' is unknown"), std::string::npos) << e.what();
  }
}

TEST(DeviceCopy, HostMovesAreMemcpyAndMemset) {
  std::vector<float> a{1, 2, 3, 4}, b(4, 0.0f);
  copy_bytes(Device::CPU, b.data(), a.data(), 3 * sizeof(float));
  EXPECT_EQ(b, (std::vector<float>{1, 2, 3, 0}));
  upload_bytes(Device::CPU, b.data() + 3, a.data() + 3, sizeof(float));
  EXPECT_EQ(b[3], 4.0f);
  download_bytes(Device::CPU, a.data(), b.data() + 1, sizeof(float));
  EXPECT_EQ(a[0], 2.0f);
  zero_bytes(Device::CPU, b.data(), 2 * sizeof(float));
  EXPECT_EQ(b, (std::vector<float>{0, 0, 3, 4}));
}

TEST(DeviceCopy, WorkspaceOnTheHostByDefault) {
  Workspace w;
  EXPECT_EQ(w.device(), Device::CPU);
  EXPECT_EQ(w.get("x", {4}).device(), Device::CPU);
}
