// LoRA unit tests: LoraConfig checks and scaling, target resolution and its error,
// the frozen base (no gradient buffer, no optimizer state, weights bit-identical after AdamW
// steps), PEFT adapter files round trip and the merge. Numerics against PyTorch and every
// parallel layout: tests/lora.cmake (tests/reference/check_train.py --lora-r).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "error_of.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/parallel_state.h"
#include "twinkle/model/lora_config.h"
#include "twinkle/parallel/lora_dropout.h"
#include "twinkle/model/lora_files.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/train/engine.h"

#include <functional>
#include <unistd.h>

using namespace twinkle;

using twinkle::test_support::error_of;

namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 301;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 128;
  c.rope_theta = 1e6;
  return c;
}

std::vector<EncodedRow> rows(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<EncodedRow> out;
  for (int i = 0; i < n; ++i) {
    EncodedRow r;
    int L = 6 + static_cast<int>(g() % 12);
    for (int t = 0; t < L; ++t) {
      r.input_ids.push_back(static_cast<int32_t>(g() % 301));
      r.labels.push_back(t < 2 ? -100 : r.input_ids.back());
      r.position_ids.push_back(t);
    }
    r.length = L;
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST(LoraConfig, DefaultsAndScalingArePeft) {
  LoraConfig c;
  EXPECT_EQ(c.r, 8);
  EXPECT_EQ(c.lora_alpha, 8);
  EXPECT_EQ(c.lora_dropout, 0.0);
  EXPECT_EQ(c.init_lora_weights, "true");
  c.r = 8;
  c.lora_alpha = 32;
  EXPECT_DOUBLE_EQ(c.scaling(), 4.0);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scaling(), 32.0 / std::sqrt(8.0));
}

TEST(LoraConfig, ValidateNamesTheFlag) {
  LoraConfig c;
  c.r = 0;
  EXPECT_NE(error_of([&] { validate(c); }).find("(--lora-r) must be >= 1, got 0"), std::string::npos);
  c = LoraConfig{};
  c.lora_dropout = 1.0;
  EXPECT_NE(error_of([&] { validate(c); }).find("--lora-dropout"), std::string::npos);
  c = LoraConfig{};
  c.lora_alpha = -1;
  EXPECT_NE(error_of([&] { validate(c); }).find("--lora-alpha"), std::string::npos);
  c = LoraConfig{};
  c.init_lora_weights = "pissa";
  EXPECT_NE(error_of([&] { validate(c); }).find("--lora-init"), std::string::npos);
  c = LoraConfig{};
  c.target_modules = " , ";
  EXPECT_NE(error_of([&] { validate(c); }).find("--lora-targets"), std::string::npos);
}

TEST(LoraConfig, TargetsAllLinearListsAndUnknownNames) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(), ps);
  const auto mods = model.linear_modules();
  ASSERT_EQ(mods.size(), 14u);  // 2 layers x q k v o gate up down; never lm_head
  LoraConfig c;
  EXPECT_EQ(resolve_lora_targets(c, mods), mods);
  c.target_modules = "q_proj, v_proj";
  auto t = resolve_lora_targets(c, mods);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0], "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(t[1], "model.layers.0.self_attn.v_proj");
  c.target_modules = "model.layers.1.mlp.down_proj";
  EXPECT_EQ(resolve_lora_targets(c, mods).size(), 1u);
  c.target_modules = "proj";  // not a "."-suffix of any module name
  const std::string e = error_of([&] { resolve_lora_targets(c, mods); });
  EXPECT_NE(e.find("'proj' matches no linear module"), std::string::npos) << e;
  EXPECT_NE(e.find("valid: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"),
            std::string::npos)
      << e;
  c.target_modules = "lm_head";
  EXPECT_NE(error_of([&] { resolve_lora_targets(c, mods); }).find("matches no linear module"), std::string::npos);
}

// PEFT matches target_modules against EVERY module name of the model (tuners_utils.py
// check_target_module_exists: re.fullmatch for a str; name == entry or name ending "." + entry for a
// list) and wraps what it selects: nn.Linear (lm_head too) and nn.Embedding get LoRA layers, other
// types raise "Target module ... is not supported" (lora/model.py _create_new_module). twinkle wraps
// the linear layers but the lm head; before, a pattern that also selected the embedding, the lm head
// or a norm silently trained only its linear part (and a list entry such as lm_head said only
// "matches no linear module"). Now each is refused naming the module and the pattern. The module
// names are transformers 4's Qwen3ForCausalLM / Qwen3MoeForCausalLM named_modules(): which of them a
// pattern selects is worked out by hand from re.fullmatch / the suffix rule.
TEST(LoraConfig, TargetsSelectingModulesTwinkleCannotWrapAreRefusedByName) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(), ps);
  const auto mods = model.linear_modules();
  const auto others = model.other_modules();
  LoraConfig c;
  c.target_modules_regex = true;
  auto refused = [&](const std::string& pattern, const std::string& module, const std::string& what) {
    c.target_modules = pattern;
    const std::string e = error_of([&] { resolve_lora_targets(c, mods, others); });
    EXPECT_NE(e.find("selects " + module + ", " + what), std::string::npos) << pattern << ": " << e;
    EXPECT_NE(e.find(pattern), std::string::npos) << e;
  };
  // the embedding (PEFT: lora.Embedding), the lm head (PEFT: lora.Linear), a norm (PEFT: ValueError);
  // before, the first returned the q_proj modules alone and the second every *_proj module (lm_head skipped)
  refused(R"(.*\.(q_proj|embed_tokens))", "model.embed_tokens", "an nn.Embedding (PEFT would add a LoRA Embedding");
  refused(R"(.*_proj|lm_head)", "lm_head", "the output layer, an nn.Linear");
  refused(R"(.*layers\.0\..*norm)", "model.layers.0.self_attn.q_norm", "a Qwen3RMSNorm (PEFT refuses it too");
  // "every module under mlp" includes act_fn (PEFT raises on the SiLU activation)
  refused(R"(model\.layers\.1\.mlp\..*)", "model.layers.1.mlp.act_fn", "the SiLU activation");
  refused(".*", "model", "the Qwen3Model container");
  refused(".*attn", "model.layers.0.self_attn", "the attention container");
  c.target_modules = R"(.*\.(q_proj|v_proj))";  // linear layers only: as before
  EXPECT_EQ(resolve_lora_targets(c, mods, others).size(), 4u);
  // Lists (PEFT's suffix rule)
  c.target_modules_regex = false;
  auto refused_entry = [&](const std::string& list, const std::string& entry, const std::string& module) {
    c.target_modules = list;
    const std::string e = error_of([&] { resolve_lora_targets(c, mods, others); });
    EXPECT_NE(e.find("the entry '" + entry + "' of target_modules '" + list + "' selects " + module + ","),
              std::string::npos)
        << list << ": " << e;
  };
  refused_entry("q_proj,lm_head", "lm_head", "lm_head");
  refused_entry("embed_tokens", "embed_tokens", "model.embed_tokens");
  refused_entry("q_proj, input_layernorm", "input_layernorm", "model.layers.0.input_layernorm");
  refused_entry("norm", "norm", "model.norm");
  refused_entry("self_attn", "self_attn", "model.layers.0.self_attn");
  c.target_modules = "all-linear";  // never the lm head (PEFT leaves the output layer out of all-linear)
  EXPECT_EQ(resolve_lora_targets(c, mods, others), mods);
  // Qwen3-MoE (layer 0 sparse, layer 1 dense): the router "gate" is a linear layer twinkle wraps;
  // "experts" is the ModuleList
  ModelConfig mc = tiny_config();
  mc.model_type = "qwen3_moe";
  mc.num_experts = 4;
  mc.num_experts_per_tok = 2;
  mc.moe_intermediate_size = 32;
  mc.mlp_only_layers = {1};
  Qwen3Model moe(mc, ps);
  c.target_modules = "gate";
  EXPECT_EQ(resolve_lora_targets(c, moe.linear_modules(), moe.other_modules()),
            std::vector<std::string>{"model.layers.0.mlp.gate"});
  c.target_modules = "experts";
  EXPECT_NE(error_of([&] { resolve_lora_targets(c, moe.linear_modules(), moe.other_modules()); })
                .find("selects model.layers.0.mlp.experts, an nn.ModuleList of experts"),
            std::string::npos);
  // add_adapter applies the rule
  LoraConfig a;
  a.target_modules = "q_proj,lm_head";
  EXPECT_NE(error_of([&] { model.add_adapter(a, 1); }).find("selects lm_head"), std::string::npos);
  EXPECT_FALSE(model.has_adapter());
}

TEST(Lora, BaseFrozenBitIdenticalAndOnlyAdapterInOptimizer) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(), ps);
  model.init_random(3);
  const int64_t base_numel = model.store().numel();
  std::vector<float> before(model.store().flat_params().f32(), model.store().flat_params().f32() + base_numel);
  LoraConfig c;
  c.r = 4;
  c.lora_alpha = 16;
  c.init_lora_weights = "false";
  model.add_adapter(c, 5);
  EXPECT_FALSE(model.store().has_grads());            // no gradient buffer for the base
  ParamStore& ad = model.trainable_store();
  ASSERT_NE(&ad, &model.store());
  EXPECT_EQ(ad.size(), 28u);                          // 14 modules x (A, B)
  for (const auto& p : ad.params()) EXPECT_TRUE(p.weight_decay) << p.name;  // 2-D: decayed
  // 2 x 4 x (64 in for q,k,v,gate,up; 64 out for o,down) ... every adapter is r x in + out x r.
  int64_t n = 0;
  for (const auto& p : ad.params()) n += p.data.numel();
  EXPECT_EQ(n, 2 * (4 * 64 + 128 * 4) + 2 * 2 * (4 * 64 + 64 * 4) + 2 * (4 * 128 + 64 * 4) +
                   2 * 2 * (4 * 64 + 96 * 4) + 2 * (4 * 96 + 64 * 4));
  Engine eng(model);
  OptimizerConfig oc;
  oc.lr = 1e-2;
  oc.weight_decay = 0.1;
  DistributedOptimizer opt(model.trainable_store(), ps, oc);
  auto r = rows(4, 9);
  std::vector<MicroBatch> mbs = {collate_padded({r[0], r[1]}, 0), collate_padded({r[2], r[3]}, 0)};
  const double l0 = eng.forward_backward(mbs).loss;
  opt.step(oc.lr, 1.0);
  for (int i = 0; i < 4; ++i) {
    eng.forward_backward(mbs);
    opt.step(oc.lr, 1.0);
  }
  const double l5 = eng.forward_only(mbs).loss;
  EXPECT_LT(l5, l0);  // the adapter learns
  EXPECT_EQ(std::memcmp(before.data(), model.store().flat_params().f32(), static_cast<size_t>(base_numel) * 4), 0)
      << "base weights changed";
}

TEST(Lora, MergedWeightsGiveTheAdapterLoss) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(), ps);
  model.init_random(3);
  LoraConfig c;
  c.r = 4;
  c.lora_alpha = 16;
  c.init_lora_weights = "false";  // B != 0: the adapter changes the output
  c.target_modules = "q_proj,o_proj,down_proj";
  model.add_adapter(c, 5);
  Engine eng(model);
  auto r = rows(3, 11);
  std::vector<MicroBatch> mbs = {collate_padded(r, 0)};
  const double with_adapter = eng.forward_only(mbs).loss;
  auto base = model.gather_state_dict();
  auto ad = model.gather_adapter_state_dict();
  ASSERT_EQ(ad.size(), 12u);
  EXPECT_EQ(ad[0].first, "model.layers.0.self_attn.q_proj.lora_A.weight");
  merge_lora_into(base, ad, c.scaling());
  Qwen3Model merged(tiny_config(), ps);
  std::vector<std::pair<std::string, Tensor>> nb = base;
  const auto dir = std::filesystem::temp_directory_path() / ("twinkle_lora_merge_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  save_checkpoint_dir(dir.string(), nb);
  merged.load_checkpoint(CheckpointReader::open_dir(dir.string()));
  Engine eng2(merged);
  const double m = eng2.forward_only(mbs).loss;
  EXPECT_NEAR(m, with_adapter, 1e-5 * std::abs(with_adapter));
  // And the adapter really mattered (a merge that dropped it would not match).
  Qwen3Model plain(tiny_config(), ps);
  plain.init_random(3);
  Engine eng3(plain);
  EXPECT_GT(std::abs(eng3.forward_only(mbs).loss - with_adapter), 1e-4);
  std::filesystem::remove_all(dir);
}

TEST(Lora, PeftConfigRoundTripAndRefusals) {
  LoraConfig c;
  c.r = 16;
  c.lora_alpha = 32;
  c.use_rslora = true;
  c.target_modules = "q_proj,v_proj";
  c.init_lora_weights = "gaussian";
  const auto dir = std::filesystem::temp_directory_path() / ("twinkle_lora_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string p = (dir / "adapter_config.json").string();
  std::ofstream(p) << peft_adapter_config_json(c, "models/qwen3-tiny");
  LoraConfig b = read_peft_adapter_config(p);
  EXPECT_EQ(b.r, 16);
  EXPECT_EQ(b.lora_alpha, 32);
  EXPECT_TRUE(b.use_rslora);
  EXPECT_EQ(b.target_modules, "q_proj,v_proj");
  EXPECT_EQ(b.init_lora_weights, "gaussian");
  EXPECT_EQ(peft_base_model(p), "models/qwen3-tiny");
  EXPECT_EQ(peft_key("model.layers.0.self_attn.q_proj.lora_A.weight"),
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  std::ofstream(p) << R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": "all-linear", "use_dora": true})";
  EXPECT_NE(error_of([&] { read_peft_adapter_config(p); }).find("use_dora"), std::string::npos);
  std::ofstream(p) << R"({"peft_type": "IA3", "r": 8})";
  EXPECT_NE(error_of([&] { read_peft_adapter_config(p); }).find("is not LORA"), std::string::npos);
  std::ofstream(p) << R"({"peft_type": "LORA", "lora_alpha": 16, "target_modules": "all-linear"})";
  EXPECT_NE(error_of([&] { read_peft_adapter_config(p); }).find("field 'r' is missing"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Lora, SecondAdapterIsAnError) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(), ps);
  LoraConfig c;
  c.lora_dropout = 0.1;
  model.add_adapter(c, 1);
  EXPECT_NE(error_of([&] { model.add_adapter(c, 1); }).find("already has an adapter"), std::string::npos);
}

// The dropout mask (parallel/lora_dropout.h) is a pure function of (seed, step, module, token
// identity, global feature): a feature shard with its offset is the same columns of the full
// mask (row-parallel tp), tokens in another order keep their masks (other micro-batching / dp),
// and the kept fraction is 1 - p.
TEST(Lora, DropoutMaskIsLayoutIndependent) {
  const int64_t T = 64, in = 96;
  std::vector<uint64_t> keys(T), rev(T);
  for (int64_t t = 0; t < T; ++t) keys[static_cast<size_t>(t)] = parallel::lora_token_key(t / 16, t % 16);
  for (int64_t t = 0; t < T; ++t) rev[static_cast<size_t>(t)] = keys[static_cast<size_t>(T - 1 - t)];
  parallel::LoraDropout d;
  d.p = 0.25f;
  d.seed = parallel::lora_dropout_seed(7, 3);
  d.token_key = keys.data();
  d.T = T;
  const uint64_t mod = parallel::lora_module_key("model.layers.0.self_attn.o_proj");
  std::vector<uint8_t> full(T * in), half(T * in / 2), other(T * in), reversed(T * in);
  parallel::lora_dropout_mask(d, mod, 0, in, full.data());
  parallel::lora_dropout_mask(d, mod, in / 2, in / 2, half.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < in / 2; ++i) ASSERT_EQ(half[t * (in / 2) + i], full[t * in + in / 2 + i]) << t << "," << i;
  d.token_key = rev.data();
  parallel::lora_dropout_mask(d, mod, 0, in, reversed.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < in; ++i) ASSERT_EQ(reversed[(T - 1 - t) * in + i], full[t * in + i]);
  d.token_key = keys.data();
  int64_t kept = 0;
  for (uint8_t m : full) kept += m;
  EXPECT_NEAR(static_cast<double>(kept) / (T * in), 0.75, 0.03);  // 6144 draws: sigma 0.0055
  parallel::lora_dropout_mask(d, parallel::lora_module_key("model.layers.0.mlp.down_proj"), 0, in, other.data());
  EXPECT_NE(other, full);  // one mask per module
  d.seed = parallel::lora_dropout_seed(7, 4);
  parallel::lora_dropout_mask(d, mod, 0, in, other.data());
  EXPECT_NE(other, full);  // a fresh mask every step
}

// Qwen3-MoE: the linear modules carry transformers 4's / PEFT's names; all-linear skips
// the router and reaches every expert (one pair per expert and projection, experts in the adapter
// store's expert region).
TEST(Lora, MoeTargets) {
  ModelConfig c = tiny_config();
  c.model_type = "qwen3_moe";
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.mlp_only_layers = {1};
  auto ps = dist::make_single_process_state();
  Qwen3Model model(c, ps);
  const auto mods = model.linear_modules();
  EXPECT_NE(std::find(mods.begin(), mods.end(), "model.layers.0.mlp.gate"), mods.end());
  EXPECT_NE(std::find(mods.begin(), mods.end(), "model.layers.0.mlp.experts.3.down_proj"), mods.end());
  EXPECT_NE(std::find(mods.begin(), mods.end(), "model.layers.1.mlp.gate_proj"), mods.end());  // dense layer 1
  EXPECT_EQ(std::find(mods.begin(), mods.end(), "model.layers.0.mlp.gate_proj"), mods.end());
  LoraConfig all;
  all.r = 2;
  model.add_adapter(all, 1);
  const auto& t = model.adapter_targets();
  EXPECT_EQ(std::count_if(t.begin(), t.end(), [](const std::string& m) { return m.find(".experts.") != std::string::npos; }),
            3 * 4 * (c.num_hidden_layers - 1));
  EXPECT_EQ(std::find(t.begin(), t.end(), "model.layers.0.mlp.gate"), t.end());  // all-linear skips the router
  // every expert pair is trainable, in the adapter store's expert region
  const ParamStore& st = model.trainable_store();
  int64_t experts = 0;
  for (const auto& p : st.params())
    if (p.name.find(".experts.") != std::string::npos) {
      ++experts;
      EXPECT_TRUE(p.expert) << p.name;
      EXPECT_GE(p.flat_offset, st.expert_offset()) << p.name;
    }
  EXPECT_EQ(experts, 2 * 3 * 4 * (c.num_hidden_layers - 1));
}

TEST(Lora, MoeRouterAndDenseTargets) {
  ModelConfig c = tiny_config();
  c.model_type = "qwen3_moe";
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.mlp_only_layers = {1};
  auto ps = dist::make_single_process_state();
  Qwen3Model model(c, ps);
  LoraConfig some;
  some.target_modules = "q_proj,gate,mlp.down_proj";  // "down_proj" alone would reach the experts
  model.add_adapter(some, 1);
  const auto& t = model.adapter_targets();
  EXPECT_EQ(std::vector<std::string>(t.begin(), t.end()),
            (std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.gate",
                                      "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj"}));
}

// PEFT's partial expert targeting (suffix match on transformers 4's per-expert nn.Linear names):
// only the named experts' projections get pairs, each in its ep rank's expert region; lora_dropout
// on experts is accepted (masks keyed by the routed rows' tokens: lora_moe_vs_torch_expert_dropout,
// lora_moe_layout_*_dropout).
TEST(Lora, MoePartialExpertTargetsAndExpertDropout) {
  ModelConfig c = tiny_config();
  c.model_type = "qwen3_moe";
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  auto ps = dist::make_single_process_state();
  Qwen3Model model(c, ps);
  LoraConfig cfg;
  cfg.target_modules = "q_proj,layers.0.mlp.experts.2.up_proj,experts.3.down_proj";
  cfg.lora_dropout = 0.1;
  model.add_adapter(cfg, 1);
  const auto& t = model.adapter_targets();
  std::vector<std::string> experts;
  for (const auto& m : t)
    if (m.find(".experts.") != std::string::npos) experts.push_back(m);
  std::vector<std::string> want = {"model.layers.0.mlp.experts.2.up_proj"};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    want.push_back("model.layers." + std::to_string(l) + ".mlp.experts.3.down_proj");
  std::sort(experts.begin(), experts.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(experts, want);
  int64_t pairs = 0;
  for (const auto& p : model.trainable_store().params())
    if (p.name.find(".experts.") != std::string::npos) {
      ++pairs;
      EXPECT_TRUE(p.expert) << p.name;
    }
  EXPECT_EQ(pairs, 2 * static_cast<int64_t>(want.size()));
}

// PEFT's adapter_config.json fields as PEFT writes them. A string target_modules other than
// "all-linear" is a regular expression full-matched against module names (peft/tuners/tuners_utils.py
// check_target_module_exists: re.fullmatch); it was read as a comma list of names, so a PEFT adapter
// saved with target_modules=r".*\.(q_proj|v_proj)" could not be loaded. The expected module lists are
// Python's re.fullmatch over these names (computed with CPython's re, written out here).
// rank_pattern / alpha_pattern / exclude_modules / lora_bias / trainable_token_indices /
// layer_replication with non-default values were dropped silently (alpha_pattern {"q_proj": 64}
// loaded with the wrong scaling); PEFT's defaults ({}, null, false) load.
TEST(Lora, PeftRegexTargetModulesAndPatternFields) {
  auto ps = dist::make_single_process_state();
  Qwen3Model model(tiny_config(), ps);
  const auto mods = model.linear_modules();
  const auto dir = std::filesystem::temp_directory_path() / ("twinkle_lora_re_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string p = (dir / "adapter_config.json").string();
  const std::string head = R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, )";
  const std::string defaults = R"("rank_pattern": {}, "alpha_pattern": {}, "exclude_modules": null, "lora_bias": false,
                                  "trainable_token_indices": null, "layer_replication": null, )";
  std::ofstream(p) << head + defaults + R"J("target_modules": ".*\\.(q_proj|v_proj)"})J";
  LoraConfig c = read_peft_adapter_config(p);
  EXPECT_TRUE(c.target_modules_regex);
  EXPECT_EQ(resolve_lora_targets(c, mods),
            (std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                      "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}));
  // written back as the same string (PEFT reads it as the same expression)
  EXPECT_NE(peft_adapter_config_json(c, "m").find(R"J("target_modules": ".*\\.(q_proj|v_proj)")J"), std::string::npos)
      << peft_adapter_config_json(c, "m");
  c.target_modules = R"(model\.layers\.1\.mlp\..*_proj)";
  EXPECT_EQ(resolve_lora_targets(c, mods, model.other_modules()),
            (std::vector<std::string>{"model.layers.1.mlp.gate_proj", "model.layers.1.mlp.up_proj",
                                      "model.layers.1.mlp.down_proj"}));
  c.target_modules = R"(.*layers\.[0-9]+\.self_attn\.[qk]_proj)";
  EXPECT_EQ(resolve_lora_targets(c, mods).size(), 4u);
  c.target_modules = "q_proj";  // a bare name as a string full-matches nothing in PEFT either
  EXPECT_NE(error_of([&] { resolve_lora_targets(c, mods); }).find("'q_proj' (PEFT's regular expression"),
            std::string::npos);
  c.target_modules = "(q_proj";
  EXPECT_NE(error_of([&] { validate(c); }).find("not one std::regex (ECMAScript) compiles"), std::string::npos);
  std::ofstream(p) << head + defaults + R"("target_modules": "all-linear"})";
  EXPECT_FALSE(read_peft_adapter_config(p).target_modules_regex);
  for (const std::string field : {R"("rank_pattern": {"q_proj": 16})", R"("alpha_pattern": {"q_proj": 64})",
                                  R"("exclude_modules": ["v_proj"])", R"("lora_bias": true)",
                                  R"("trainable_token_indices": [1, 2])", R"("layer_replication": [[0, 2]])"}) {
    std::ofstream(p) << head + field + R"(, "target_modules": ["q_proj"]})";
    const std::string e = error_of([&] { read_peft_adapter_config(p); });
    const std::string name = field.substr(1, field.find('"', 1) - 1);
    EXPECT_NE(e.find("field '" + name + "'"), std::string::npos) << field << ": " << e;
    EXPECT_NE(e.find("is not supported"), std::string::npos) << e;
  }
  std::filesystem::remove_all(dir);
}

// transformers 5's fused experts through PEFT's target_parameters (lora.ParamWrapper) are another
// adapter format: refused by name on load.
TEST(Lora, PeftTargetParametersIsRefusedByName) {
  const auto dir = std::filesystem::temp_directory_path() / ("twinkle_lora_tp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string p = (dir / "adapter_config.json").string();
  std::ofstream(p) << R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": null,
                          "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]})";
  const std::string e = error_of([&] { read_peft_adapter_config(p); });
  EXPECT_NE(e.find("field 'target_parameters'"), std::string::npos) << e;
  EXPECT_NE(e.find("transformers 4 per-expert layout"), std::string::npos) << e;
  std::ofstream(p) << R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"],
                          "target_parameters": null})";
  EXPECT_EQ(read_peft_adapter_config(p).target_modules, "q_proj");  // PEFT >= 0.17 writes null by default
  std::filesystem::remove_all(dir);
}
