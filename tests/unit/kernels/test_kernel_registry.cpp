// The kernel registry's contract (twinkle/kernels/registry.h): built-in sets, device errors, mappings.
#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/registry.h"

using namespace twinkle::kernels;

using twinkle::test_support::error_of;

namespace {

TEST(KernelRegistry, BothCpuSetsCoverEveryOp) {
  for (const std::string set : {"fused", "reference"}) {
    const KernelTable t = resolve_kernels("cpu", set);
    EXPECT_TRUE(t.complete()) << set;
    for (const auto& op : op_names()) EXPECT_EQ(t.impl(op), set) << op;
  }
  EXPECT_EQ(op_names().size(), std::variant_size_v<OpImpl>);
  EXPECT_EQ(op_names().front(), "embedding");
}

TEST(KernelRegistry, DevicesWithoutKernelsFailAtOnceNamingThem) {
  const std::string npu = error_of([] { resolve_kernels("npu"); });
  EXPECT_NE(npu.find("'npu'"), std::string::npos) << npu;
  EXPECT_NE(npu.find("CANN"), std::string::npos) << npu;
  const std::string cuda = error_of([] { resolve_kernels("cuda", "reference"); });
  EXPECT_NE(cuda.find("'cuda'"), std::string::npos) << cuda;
  if (!device_built("cuda")) {
    EXPECT_NE(cuda.find("not built"), std::string::npos) << cuda;
  } else {  // a CUDA build: no GPU here, or a GPU and no "reference" set on it
    EXPECT_TRUE(cuda.find("no GPU visible") != std::string::npos ||
                cuda.find("has no implementation 'reference' on device 'cuda'") != std::string::npos)
        << cuda;
  }
  const std::string tpu = error_of([] { resolve_kernels("tpu"); });
  EXPECT_NE(tpu.find("'tpu' is unknown"), std::string::npos) << tpu;
  EXPECT_NE(tpu.find("cpu"), std::string::npos) << tpu;  // lists the devices that have kernels
}

TEST(KernelRegistry, BadSetsAndMappingsNameTheOffender) {
  EXPECT_NE(error_of([] { resolve_kernels("cpu", "fast"); }).find("'fast'"), std::string::npos);
  const std::string op = error_of([] { resolve_kernels("cpu", "fused", {{"rmsnorm", {{"cpu", "fused"}}}}); });
  EXPECT_NE(op.find("unknown op 'rmsnorm'"), std::string::npos) << op;
  EXPECT_NE(op.find("rms_norm"), std::string::npos) << op;  // lists the real names
  const std::string impl = error_of([] { resolve_kernels("cpu", "fused", {{"swiglu", {{"cpu", "mine"}}}}); });
  EXPECT_NE(impl.find("'swiglu' has no implementation 'mine' on device 'cpu'"), std::string::npos) << impl;
  EXPECT_NE(impl.find("fused, reference"), std::string::npos) << impl;
}

void my_linear(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool acc) {
  cpu::linear_forward(X, W, Y, M, N, K, acc);
  Y[0] = 42.0f;  // recognisable
}

TEST(KernelRegistry, AUserKernelIsSelectedThroughAMappingForOneOpOnly) {
  Registry::global().add("cpu", "mine", LinearOp{my_linear, cpu::linear_backward});
  const KernelTable t = resolve_kernels("cpu", "reference", {{"linear", {{"cpu", "mine"}, {"npu", "x"}}}});
  Registry::global().remove("linear", "cpu", "mine");
  EXPECT_EQ(t.impl("linear"), "mine");
  EXPECT_EQ(t.impl("rms_norm"), "reference");
  float x[2] = {1, 2}, w[2] = {3, 4}, y[1] = {0};
  t.linear.forward(x, w, y, 1, 1, 2, false);
  EXPECT_EQ(y[0], 42.0f);
  EXPECT_EQ(Registry::global().implementations("linear", "cpu"), (std::vector<std::string>{"bf16", "fused", "reference"}));
  EXPECT_FALSE(Registry::global().remove("linear", "cpu", "mine"));
}

}  // namespace
