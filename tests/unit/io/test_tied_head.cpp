// tie_word_embeddings vs the checkpoint's lm_head (transformers 5 rule) and generation_config.json EOS ids.
#include <gtest/gtest.h>

#include "io_test_util.h"
#include "twinkle/io/generation_config.h"
#include "twinkle/io/tied_head.h"

using namespace twinkle;
using twinkle::iotest::expect_error;
using twinkle::iotest::TempDir;
using twinkle::iotest::write_bytes;

namespace {
ModelConfig tied_config() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.tie_word_embeddings = true;
  return c;
}
Tensor rows(int64_t n, int64_t h, float base) {
  std::vector<float> v(static_cast<size_t>(n * h));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.25f * static_cast<float>(i);
  return Tensor::from_vector({n, h}, v);
}
}  // namespace

TEST(TiedHead, TransformersFiveRule) {
  TempDir d;
  const Tensor emb = rows(5, 3, 0.0f);
  // only the embedding -> tied
  save_checkpoint_dir(d / "a", {{"model.embed_tokens.weight", emb}}, 1 << 20);
  ModelConfig c = tied_config();
  EXPECT_EQ(untie_if_checkpoint_head_differs(c, CheckpointReader::open_dir(d / "a")), "");
  EXPECT_TRUE(c.tie_word_embeddings);
  // identical copy -> stays tied
  save_checkpoint_dir(d / "b", {{"model.embed_tokens.weight", emb}, {"lm_head.weight", rows(5, 3, 0.0f)}}, 1 << 20);
  EXPECT_FALSE(checkpoint_head_differs(CheckpointReader::open_dir(d / "b")));
  EXPECT_EQ(untie_if_checkpoint_head_differs(c, CheckpointReader::open_dir(d / "b")), "");
  EXPECT_TRUE(c.tie_word_embeddings);
  // one element differs (the last row) -> untied, the warning names both tensors
  Tensor head = rows(5, 3, 0.0f);
  head.f32()[14] += 1e-6f;
  save_checkpoint_dir(d / "c", {{"model.embed_tokens.weight", emb}, {"lm_head.weight", head}}, 1 << 20);
  const std::string w = untie_if_checkpoint_head_differs(c, CheckpointReader::open_dir(d / "c"));
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_NE(w.find("lm_head.weight differs from model.embed_tokens.weight"), std::string::npos) << w;
  // an untied config is left alone
  ModelConfig u = tied_config();
  u.tie_word_embeddings = false;
  EXPECT_EQ(untie_if_checkpoint_head_differs(u, CheckpointReader::open_dir(d / "c")), "");
  // a different shape differs
  save_checkpoint_dir(d / "e", {{"model.embed_tokens.weight", emb}, {"lm_head.weight", rows(4, 3, 0.0f)}}, 1 << 20);
  EXPECT_TRUE(checkpoint_head_differs(CheckpointReader::open_dir(d / "e")));
}

TEST(GenerationConfig, EosIds) {
  TempDir d;
  ModelConfig c = tied_config();
  c.eos_token_id = {7};
  EXPECT_EQ(load_eos_token_ids(d.path(), c), std::vector<int64_t>{7});  // no file: config.json's
  write_bytes(d / "generation_config.json", R"({"eos_token_id": [151645, 151643], "top_k": 20})");
  EXPECT_EQ(load_eos_token_ids(d.path(), c), (std::vector<int64_t>{151645, 151643}));
  write_bytes(d / "generation_config.json", R"({"eos_token_id": 3})");
  EXPECT_EQ(load_eos_token_ids(d.path(), c), std::vector<int64_t>{3});
  write_bytes(d / "generation_config.json", R"({"eos_token_id": null, "do_sample": true})");
  EXPECT_EQ(load_eos_token_ids(d.path(), c), std::vector<int64_t>{7});
  write_bytes(d / "generation_config.json", R"({"eos_token_id": "</s>"})");
  expect_error([&] { load_eos_token_ids(d.path(), c); }, {"generation_config.json", "'eos_token_id'"});
  write_bytes(d / "generation_config.json", R"([1])");
  expect_error([&] { load_eos_token_ids(d.path(), c); }, {"generation_config.json", "JSON object"});
}
