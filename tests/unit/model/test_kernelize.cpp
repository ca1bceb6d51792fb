// kernelize_model (twinkle/model/kernelize.h) and the model's kernel-set option.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/model/kernelize.h"

namespace twinkle {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.hidden_size = 32;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 16;
  c.intermediate_size = 48;
  c.vocab_size = 100;
  c.max_position_embeddings = 64;
  c.rope_theta = 1e6;
  return c;
}

struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() {
    get_logger().set_sink([this](const std::string& l) { lines.push_back(l); });
  }
  ~LogCapture() { get_logger().set_sink(nullptr); }
};

TEST(Kernelize, NoMappingAppliesTheFusedBundleOnceAndLogsEachOp) {
  Qwen3Model m(tiny(), dist::make_single_process_state(), {.kernels = "reference"});
  EXPECT_EQ(m.kernels().impl("rms_norm"), "reference");
  LogCapture log;
  const auto replaced = kernelize_model(m);
  EXPECT_EQ(replaced, kernels::op_names());
  ASSERT_EQ(log.lines.size(), kernels::op_names().size());
  EXPECT_NE(log.lines[1].find("kernelize_model: rms_norm on cpu: reference -> fused"), std::string::npos)
      << log.lines[1];
  for (const auto& op : kernels::op_names()) EXPECT_EQ(m.kernels().impl(op), "fused") << op;
  log.lines.clear();
  EXPECT_TRUE(kernelize_model(m).empty());  // idempotent
  EXPECT_TRUE(log.lines.empty());
}

TEST(Kernelize, AMappingSwapsOnlyItsOpsOnTheModelsDevice) {
  Qwen3Model m(tiny(), dist::make_single_process_state());  // fused by default
  EXPECT_EQ(m.kernels().impl("attention"), "fused");
  LogCapture log;
  const kernels::KernelMapping mp = {{"attention", {{"cpu", "reference"}, {"npu", "flash_attn_npu"}}},
                                     {"rms_norm", {{"npu", "npu_rms_norm"}}}};  // other device: skipped
  EXPECT_EQ(kernelize_model(m, mp), (std::vector<std::string>{"attention"}));
  ASSERT_EQ(log.lines.size(), 1u);
  EXPECT_NE(log.lines[0].find("attention on cpu: fused -> reference"), std::string::npos) << log.lines[0];
  EXPECT_EQ(m.kernels().impl("attention"), "reference");
  EXPECT_EQ(m.kernels().impl("rms_norm"), "fused");
  EXPECT_TRUE(kernelize_model(m, mp).empty());  // idempotent
  // the mapping is applied on top of the current table, not on a fresh bundle
  EXPECT_EQ(kernelize_model(m, {{"swiglu", {{"cpu", "reference"}}}}), (std::vector<std::string>{"swiglu"}));
  EXPECT_EQ(m.kernels().impl("attention"), "reference");
  // and the built-in bundle brings everything back
  EXPECT_EQ(kernelize_model(m), (std::vector<std::string>{"swiglu", "attention"}));
}

TEST(Kernelize, BadNamesAndDevicesFailNamingThem) {
  Qwen3Model m(tiny(), dist::make_single_process_state());
  try {
    kernelize_model(m, {{"linear", {{"cpu", "cublas"}}}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'linear' has no implementation 'cublas' on device 'cpu'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(m.kernels().impl("linear"), "fused");  // unchanged after the error
  try {
    Qwen3Model bad(tiny(), dist::make_single_process_state(), {.kernels = "fastest"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fastest'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace twinkle
