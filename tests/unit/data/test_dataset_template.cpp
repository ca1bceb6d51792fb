// Integration: Dataset + the real Qwen3 Template on the recipe's data path
// (Dataset(ms://swift/self-cognition, range(256)) -> set_template -> map(SelfCognitionProcessor)
// -> encode -> DataLoader). Expected texts come from the Qwen3 chat template's rendering
// of one recipe sample (as Twinkle's src/twinkle/template/base.py encodes it), not from the
// code under test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "twinkle/core/error.h"
#include "twinkle/data/dataloader.h"
#include "twinkle/data/dataset.h"

namespace fs = std::filesystem;
using namespace twinkle;

namespace {

std::string model_dir() { return std::string(TWINKLE_SOURCE_DIR) + "/models/qwen3-tiny"; }

class DatasetTemplate : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(model_dir() + "/tokenizer.json"))
        << model_dir() << "/tokenizer.json is missing: run scripts/setup (scripts/fetch-assets)";
    // Empty caches, so "ms://swift/self-cognition" resolves to the shipped file.
    tmp_ = fs::temp_directory_path() / ("twinkle_dstpl_" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
    setenv("TWINKLE_HOME", (tmp_ / "th").c_str(), 1);
    setenv("MODELSCOPE_CACHE", (tmp_ / "ms").c_str(), 1);
    setenv("HF_HOME", (tmp_ / "hf").c_str(), 1);
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

}  // namespace

TEST_F(DatasetTemplate, RecipePipeline) {
  Dataset ds(DatasetMeta("ms://swift/self-cognition", DataSlice::range(256)));
  TemplateOptions opts;
  opts.model_id = model_dir();
  opts.max_length = 512;
  ds.set_template("Template", opts);
  ds.map(SelfCognitionProcessor("twinkle大模型", "ModelScope社区"));
  ds.encode(2);
  const auto& enc = ds.encoded();
  ASSERT_EQ(enc.size(), 256u);
  ASSERT_NE(ds.get_template(), nullptr);
  const Tokenizer& tok = ds.get_template()->tokenizer();
  for (int64_t i = 0; i < 8; ++i) {
    const json& row = ds[ds.encoded_source(i)];
    const std::string q = row["query"], r = row["response"];
    EXPECT_EQ(r.find("{{"), std::string::npos);
    const EncodedRow& e = enc[static_cast<size_t>(i)];
    EXPECT_EQ(tok.decode(e.input_ids),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + q +
                  "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" + r + "<|im_end|>\n")
        << ds.encoded_row_name(i);
    // The trained span is one contiguous block at the end, labels = input ids (HF convention).
    std::vector<int32_t> span;
    size_t first = e.labels.size();
    for (size_t t = 0; t < e.labels.size(); ++t)
      if (e.labels[t] != kIgnoreIndex) {
        first = std::min(first, t);
        EXPECT_EQ(e.labels[t], e.input_ids[t]);
        span.push_back(e.labels[t]);
      }
    EXPECT_EQ(first + span.size(), e.labels.size());
    EXPECT_EQ(tok.decode(span), "<think>\n\n</think>\n\n" + r + "<|im_end|>\n");
    EXPECT_EQ(e.length, static_cast<int64_t>(e.input_ids.size()));
    // Same as the template applied directly.
    auto direct = ds.get_template()->encode(parse_messages(row["messages"]), ds.encoded_row_name(i));
    ASSERT_EQ(direct.size(), 1u);
    EXPECT_EQ(direct[0].input_ids, e.input_ids);
    EXPECT_EQ(direct[0].labels, e.labels);
  }
  // tp_npu recipe: 256 rows, global batch 8, dp 2 -> 32 steps of 4 rows per rank.
  DataLoader dl(ds, {.batch_size = 8, .dp_rank = 1, .dp_size = 2});
  EXPECT_EQ(dl.size(), 32);
  LocalBatch b = dl.batch(0, 0);
  ASSERT_EQ(b.rows.size(), 4u);
  EXPECT_EQ(b.rows[0].input_ids, enc[4].input_ids);
  auto mbs = make_micro_batches(b.rows, 2, 0, false);
  ASSERT_EQ(mbs.size(), 2u);
}

TEST_F(DatasetTemplate, TruncationDeleteAndRaise) {
  std::string path = std::string(TWINKLE_SOURCE_DIR) + "/data/self_cognition.jsonl";
  TemplateOptions opts;
  opts.model_id = model_dir();
  opts.max_length = 40;
  opts.truncation = "delete";
  Dataset ds{DatasetMeta(path)};
  ds.set_template("Template", opts);
  ds.map(SelfCognitionProcessor());
  ds.encode();
  EXPECT_GT(ds.deleted_rows(), 0);
  EXPECT_EQ(static_cast<int64_t>(ds.encoded().size()) + ds.deleted_rows(), ds.size());
  for (const auto& e : ds.encoded()) EXPECT_LE(e.length, 40);

  opts.truncation = "raise";
  Dataset d2{DatasetMeta(path)};
  d2.set_template("Template", opts);
  d2.map(SelfCognitionProcessor());
  try {
    d2.encode();
    ADD_FAILURE() << "expected a max_length error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path + ":"), std::string::npos) << m;
    EXPECT_NE(m.find("max_length"), std::string::npos) << m;
  }
}
