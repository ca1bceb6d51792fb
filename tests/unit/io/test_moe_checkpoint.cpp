// Expert tensors of a checkpoint vs config.json (an expert count in the checkpoint
// different from config.json's is an error before training, naming the numbers).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/io/moe_checkpoint.h"

using namespace twinkle;

namespace {

ModelConfig moe_cfg(int64_t experts, std::vector<int64_t> mlp_only = {}) {
  ModelConfig c;
  c.model_type = "qwen3_moe";
  c.num_hidden_layers = 3;
  c.num_experts = experts;
  c.num_experts_per_tok = 2;
  c.mlp_only_layers = std::move(mlp_only);
  return c;
}

std::vector<std::string> ckpt(const std::vector<int>& experts_per_layer) {
  std::vector<std::string> n = {"model.embed_tokens.weight", "lm_head.weight"};
  for (size_t l = 0; l < experts_per_layer.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    n.push_back("model.layers." + std::to_string(l) + ".self_attn.q_proj.weight");
    if (experts_per_layer[l] < 0) {
      for (const char* w : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) n.push_back(p + w);
      continue;
    }
    n.push_back(p + "gate.weight");
    for (int e = 0; e < experts_per_layer[l]; ++e)
      for (const char* w : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
        n.push_back(p + "experts." + std::to_string(e) + "." + w);
  }
  return n;
}

std::string err(const ModelConfig& c, const std::vector<std::string>& names) {
  try {
    check_moe_checkpoint(c, names, "ckpt/");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeCheckpoint, MatchingCheckpointsPass) {
  EXPECT_EQ(err(moe_cfg(8), ckpt({8, 8, 8})), "");
  EXPECT_EQ(err(moe_cfg(4, {1}), ckpt({4, -1, 4})), "");
  ModelConfig dense;
  dense.model_type = "qwen3";
  dense.num_hidden_layers = 2;
  EXPECT_EQ(err(dense, ckpt({-1, -1})), "");
}

TEST(MoeCheckpoint, ExpertCountDiffersFromConfig) {
  auto e = err(moe_cfg(8), ckpt({8, 8, 16}));
  EXPECT_NE(e.find("ckpt/: layer 2 holds 16 experts (model.layers.2.mlp.experts.0 .. 15) but config.json says "
                   "num_experts = 8"),
            std::string::npos)
      << e;
  e = err(moe_cfg(8), ckpt({4, 8, 8}));
  EXPECT_NE(e.find("layer 0 holds 4 experts"), std::string::npos) << e;
}

TEST(MoeCheckpoint, GapAndMissingProjection) {
  auto names = ckpt({4, 4, 4});
  std::vector<std::string> gap;
  for (auto& n : names)
    if (n.find("layers.1.mlp.experts.2.") == std::string::npos) gap.push_back(n);
  auto e = err(moe_cfg(4), gap);
  EXPECT_NE(e.find("layer 1: experts 0 .. 3 expected (num_experts = 4), expert 2 missing"), std::string::npos) << e;
  std::vector<std::string> no_down;
  for (auto& n : names)
    if (n != "model.layers.0.mlp.experts.3.down_proj.weight") no_down.push_back(n);
  e = err(moe_cfg(4), no_down);
  EXPECT_NE(e.find("model.layers.0.mlp.experts.3.down_proj.weight is missing"), std::string::npos) << e;
}

TEST(MoeCheckpoint, DenseLayerWithExpertsAndMissingRouter) {
  auto e = err(moe_cfg(4, {1}), ckpt({4, 4, 4}));
  EXPECT_NE(e.find("layer 1 is a dense MLP layer (mlp_only_layers / decoder_sparse_step) but holds "
                   "model.layers.1.mlp."),
            std::string::npos)
      << e;
  auto names = ckpt({4, 4, 4});
  std::vector<std::string> no_router;
  for (auto& n : names)
    if (n != "model.layers.2.mlp.gate.weight") no_router.push_back(n);
  e = err(moe_cfg(4), no_router);
  EXPECT_NE(e.find("layer 2 is a MoE layer but model.layers.2.mlp.gate.weight (the router) is missing"),
            std::string::npos)
      << e;
  ModelConfig dense;
  dense.model_type = "qwen3";
  dense.num_hidden_layers = 3;
  e = err(dense, ckpt({-1, 4, -1}));
  EXPECT_NE(e.find("layer 1 is a dense MLP layer (model_type qwen3)"), std::string::npos) << e;
}

}  // namespace
