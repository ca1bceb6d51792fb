// config.json parsing / validation / atomic saving for Qwen3 and Qwen3-MoE.
#include "twinkle/io/model_config.h"

#include <gtest/gtest.h>

#include "io_test_util.h"

using namespace twinkle;
using json = nlohmann::json;
using twinkle::iotest::expect_error;
using twinkle::iotest::read_bytes;
using twinkle::iotest::TempDir;
using twinkle::iotest::write_bytes;

namespace {

const std::string kData = std::string(TWINKLE_SOURCE_DIR) + "/tests/data/io/";

json tiny_dense() {
  return json{{"model_type", "qwen3"},        {"vocab_size", 64},        {"hidden_size", 32},
              {"intermediate_size", 48},      {"num_hidden_layers", 2},  {"num_attention_heads", 4},
              {"num_key_value_heads", 2},     {"head_dim", 8},           {"torch_dtype", "float32"}};
}
json tiny_moe() {
  json j = tiny_dense();
  j["model_type"] = "qwen3_moe";
  j["num_experts"] = 4;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 16;
  return j;
}

// Writes `j` as <dir>/config.json and loads it.
ModelConfig load_json(const TempDir& d, const json& j) {
  write_bytes(d / "config.json", j.dump(2));
  return load_model_config(d / "config.json");
}
void expect_bad(const json& j, const std::vector<std::string>& parts) {
  TempDir d;
  std::vector<std::string> all = parts;
  all.push_back(d / "config.json");
  expect_error([&] { load_json(d, j); }, all);
}
json with(json j, const std::string& k, const json& v) {
  j[k] = v;
  return j;
}
json without(json j, const std::string& k) {
  j.erase(k);
  return j;
}

}  // namespace

TEST(ModelConfig, Qwen3_0_6B) {
  ModelConfig c = load_model_config(kData + "qwen3_0.6b_config.json");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_FALSE(c.is_moe());
  EXPECT_EQ(c.architectures, std::vector<std::string>{"Qwen3ForCausalLM"});
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // != hidden / heads = 64
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.attention_dropout, 0.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(151643));
  EXPECT_EQ(c.eos_token_id, std::vector<int64_t>{151645});
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_FALSE(c.use_sliding_window);
  EXPECT_EQ(c.raw["transformers_version"], "4.51.0");
  EXPECT_FALSE(c.is_moe_layer(0));
  // A directory works too.
  TempDir d;
  write_bytes(d / "config.json", read_bytes(kData + "qwen3_0.6b_config.json"));
  EXPECT_EQ(load_model_config(d.path()).head_dim, 128);
}

TEST(ModelConfig, Qwen3_30B_A3B) {
  ModelConfig c = load_model_config(kData + "qwen3_30b_a3b_config.json");
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.router_aux_loss_coef, 0.001);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  EXPECT_FALSE(c.output_router_logits);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.tie_word_embeddings);
  for (int l = 0; l < 48; ++l) EXPECT_TRUE(c.is_moe_layer(l));
}

// The embedded default MoE model: Qwen3-MoE's architecture, untied, renormalised top-2 of 8
// experts, layer 1 dense (mlp_only_layers).
TEST(ModelConfig, EmbeddedQwen3MoeTiny) {
  ModelConfig c = load_model_config(std::string(TWINKLE_SOURCE_DIR) + "/models/qwen3-moe-tiny");
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.architectures, std::vector<std::string>{"Qwen3MoeForCausalLM"});
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.mlp_only_layers, std::vector<int64_t>{1});
  std::vector<bool> got;
  for (int l = 0; l < c.num_hidden_layers; ++l) got.push_back(c.is_moe_layer(l));
  EXPECT_EQ(got, (std::vector<bool>{true, false, true, true}));
}

// Qwen3MoeConfig: mlp_only_layers None -> [], output_router_logits False, router_aux_loss_coef 0.001.
TEST(ModelConfig, MoeNullAndAbsentDefaults) {
  TempDir d;
  json j = tiny_moe();
  j["mlp_only_layers"] = nullptr;
  j.erase("output_router_logits");
  j.erase("router_aux_loss_coef");
  j.erase("norm_topk_prob");
  j.erase("decoder_sparse_step");
  ModelConfig c = load_json(d, j);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  EXPECT_FALSE(c.output_router_logits);
  EXPECT_EQ(c.router_aux_loss_coef, 0.001);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  for (int l = 0; l < c.num_hidden_layers; ++l) EXPECT_TRUE(c.is_moe_layer(l));
  // a round trip writes the MoE fields back with these values
  json out = to_json(c);
  EXPECT_EQ(out["mlp_only_layers"], json::array());
  EXPECT_EQ(out["output_router_logits"], false);
  EXPECT_EQ(out["num_experts"], 4);
}

TEST(ModelConfig, MoeLayerRule) {
  TempDir d;
  json j = tiny_moe();
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  ModelConfig c = load_json(d, j);
  // (layer + 1) % 2 == 0 and not in mlp_only_layers: layers 1 and 5.
  std::vector<bool> got;
  for (int l = 0; l < 6; ++l) got.push_back(c.is_moe_layer(l));
  EXPECT_EQ(got, (std::vector<bool>{false, true, false, false, false, true}));
}

TEST(ModelConfig, HuggingFaceDefaults) {
  TempDir d;
  json j = tiny_dense();
  for (const char* k : {"num_key_value_heads", "head_dim", "torch_dtype"}) j.erase(k);
  ModelConfig c = load_json(d, j);
  EXPECT_EQ(c.num_key_value_heads, 4);  // = num_attention_heads
  EXPECT_EQ(c.head_dim, 128);           // Qwen3Config default, not hidden / heads
  EXPECT_EQ(c.torch_dtype, DType::F32);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.eos_token_id.empty());
  EXPECT_FALSE(c.bos_token_id.has_value());
  // qwen3_moe: head_dim falls back to hidden / heads; MoE defaults.
  json m = tiny_moe();
  m.erase("head_dim");
  ModelConfig cm = load_json(d, m);
  EXPECT_EQ(cm.head_dim, 8);
  EXPECT_EQ(cm.decoder_sparse_step, 1);
  EXPECT_FALSE(cm.norm_topk_prob);
  EXPECT_EQ(cm.router_aux_loss_coef, 0.001);
  // null num_key_value_heads -> num_attention_heads.
  EXPECT_EQ(load_json(d, with(tiny_dense(), "num_key_value_heads", nullptr)).num_key_value_heads, 4);
}

TEST(ModelConfig, AlternativeSpellings) {
  TempDir d;
  json j = without(tiny_dense(), "torch_dtype");
  j["dtype"] = "bfloat16";  // transformers >= 4.56
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e6}};  // transformers 5
  j["eos_token_id"] = {1, 2};
  j["rope_scaling"] = nullptr;  // (a non-empty rope_scaling would replace rope_parameters: RopeVariants)
  ModelConfig c = load_json(d, j);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{1, 2}));
  json out = to_json(c);
  EXPECT_EQ(out["dtype"], "bfloat16");
  EXPECT_FALSE(out.contains("torch_dtype"));
  EXPECT_EQ(out["rope_parameters"]["rope_theta"], 5e6);
  EXPECT_FALSE(out.contains("rope_theta"));
  EXPECT_EQ(out["eos_token_id"], json({1, 2}));
}

TEST(ModelConfig, SaveRoundTripKeepsUnknownFields) {
  TempDir d;
  ModelConfig c = load_model_config(kData + "qwen3_30b_a3b_config.json");
  c.num_hidden_layers = 4;
  c.mlp_only_layers = {0, 3};
  save_model_config(c, d / "config.json");
  EXPECT_EQ(d.list(), std::vector<std::string>{"config.json"});
  ModelConfig b = load_model_config(d.path());
  EXPECT_EQ(b.num_hidden_layers, 4);
  EXPECT_EQ(b.mlp_only_layers, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(b.raw["transformers_version"], "4.51.0");
  EXPECT_EQ(b.raw["max_window_layers"], 48);
  EXPECT_TRUE(b.raw["sliding_window"].is_null());
  EXPECT_EQ(b.eos_token_id, std::vector<int64_t>{151645});
  EXPECT_TRUE(b.raw["eos_token_id"].is_number_integer());
  EXPECT_EQ(to_json(b), to_json(c));
  // Every field of the original survives.
  json orig = json::parse(read_bytes(kData + "qwen3_30b_a3b_config.json"));
  json saved = json::parse(read_bytes(d / "config.json"));
  for (auto it = orig.begin(); it != orig.end(); ++it) EXPECT_TRUE(saved.contains(it.key())) << it.key();
  // Dense config built in code (no raw) saves and reloads.
  ModelConfig e;
  e.model_type = "qwen3";
  e.vocab_size = 10;
  e.hidden_size = 8;
  e.intermediate_size = 12;
  e.num_hidden_layers = 1;
  e.num_attention_heads = 2;
  e.num_key_value_heads = 1;
  e.head_dim = 4;
  e.torch_dtype = DType::BF16;
  save_model_config(e, d / "e.json");
  ModelConfig e2 = load_model_config(d / "e.json");
  EXPECT_EQ(e2.head_dim, 4);
  EXPECT_EQ(e2.torch_dtype, DType::BF16);
  EXPECT_FALSE(to_json(e2).contains("num_experts"));
}

TEST(ModelConfig, SaveIsAtomicAndValidated) {
  TempDir d;
  ModelConfig c = load_model_config(kData + "qwen3_0.6b_config.json");
  std::filesystem::create_directory(d / "config.json");
  write_bytes(d / "config.json/x", "x");
  expect_error([&] { save_model_config(c, d / "config.json"); }, {d / "config.json", "rename"});
  EXPECT_EQ(d.list(), std::vector<std::string>{"config.json"});
  c.num_key_value_heads = 3;
  expect_error([&] { save_model_config(c, d / "bad.json"); }, {"num_key_value_heads", "must divide"});
  EXPECT_EQ(d.list(), std::vector<std::string>{"config.json"});
}

TEST(ModelConfigBad, Files) {
  TempDir d;
  expect_error([&] { load_model_config(d.path()); }, {"config.json not found in " + d.path()});
  expect_error([&] { load_model_config(d / "config.json"); }, {"config.json not found in " + d.path()});
  write_bytes(d / "config.json", "{\n  \"model_type\": \"qwen3\",\n  \"vocab_size\": 12,,\n}");
  expect_error([&] { load_model_config(d.path()); }, {d / "config.json", "malformed JSON at byte 47"});
  // Found by fuzz_model_config: a number too large for a double throws out_of_range, not parse_error.
  write_bytes(d / "config.json", R"({"model_type": "qwen3", "hidden_size": 3e3333333})");
  expect_error([&] { load_model_config(d.path()); }, {d / "config.json", "malformed JSON", "number overflow"});
  write_bytes(d / "config.json", "[1, 2]");
  expect_error([&] { load_model_config(d.path()); }, {d / "config.json", "must be a JSON object"});
}

TEST(ModelConfigBad, ModelType) {
  TempDir d;
  write_bytes(d / "config.json", with(tiny_dense(), "model_type", "llama").dump());
  expect_error([&] { load_model_config(d.path()); },
               {"unknown model_type 'llama' in " + d / "config.json" + " (supported: qwen3, qwen3_moe)"});
  expect_bad(without(tiny_dense(), "model_type"), {"missing required field 'model_type'"});
  expect_bad(with(tiny_dense(), "model_type", 3), {"'model_type'", "expected string"});
}

TEST(ModelConfigBad, MissingAndWrongTypes) {
  for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"})
    expect_bad(without(tiny_dense(), k), {std::string("missing required field '") + k + "'"});
  for (const char* k : {"num_experts", "num_experts_per_tok", "moe_intermediate_size"})
    expect_bad(without(tiny_moe(), k), {std::string("missing required field '") + k + "'"});
  expect_bad(with(tiny_dense(), "hidden_size", "32"), {"'hidden_size'", "expected integer", "string"});
  expect_bad(with(tiny_dense(), "hidden_size", 32.5), {"'hidden_size'", "expected integer"});
  expect_bad(with(tiny_dense(), "num_hidden_layers", json::array({2})), {"'num_hidden_layers'", "expected integer"});
  expect_bad(with(tiny_dense(), "rms_norm_eps", "1e-6"), {"'rms_norm_eps'", "expected number"});
  expect_bad(with(tiny_dense(), "tie_word_embeddings", "true"), {"'tie_word_embeddings'", "expected boolean"});
  expect_bad(with(tiny_dense(), "attention_bias", 1), {"'attention_bias'", "expected boolean"});
  expect_bad(with(tiny_dense(), "architectures", "Qwen3ForCausalLM"), {"'architectures'", "list of strings"});
  expect_bad(with(tiny_dense(), "eos_token_id", "x"), {"'eos_token_id'", "integer or list"});
  expect_bad(with(tiny_moe(), "mlp_only_layers", json::array({"0"})), {"'mlp_only_layers'", "list of integers"});
  expect_bad(with(tiny_dense(), "vocab_size", 18446744073709551615ull), {"'vocab_size'", "out of range"});
  expect_bad(with(tiny_dense(), "torch_dtype", "int8"), {"'torch_dtype'", "int8"});
}

TEST(ModelConfigBad, Nonsense) {
  expect_bad(with(tiny_dense(), "hidden_size", 0), {"'hidden_size'", "must be > 0"});
  expect_bad(with(tiny_dense(), "vocab_size", -5), {"'vocab_size'", "must be > 0"});
  expect_bad(with(tiny_dense(), "num_key_value_heads", 3), {"'num_key_value_heads'", "must divide"});
  expect_bad(with(tiny_dense(), "head_dim", 7), {"'head_dim'", "even"});
  expect_bad(with(tiny_dense(), "rms_norm_eps", 0), {"'rms_norm_eps'", "> 0"});
  expect_bad(with(tiny_dense(), "rope_theta", -1), {"'rope_theta'", "> 0"});
  expect_bad(with(tiny_dense(), "attention_dropout", 1.0), {"'attention_dropout'"});
  expect_bad(with(tiny_dense(), "max_position_embeddings", 0), {"'max_position_embeddings'"});
  expect_bad(with(tiny_moe(), "num_experts_per_tok", 5), {"'num_experts_per_tok'", "[1, num_experts=4]"});
  expect_bad(with(tiny_moe(), "num_experts_per_tok", 0), {"'num_experts_per_tok'"});
  expect_bad(with(tiny_moe(), "decoder_sparse_step", 0), {"'decoder_sparse_step'"});
  expect_bad(with(tiny_moe(), "mlp_only_layers", json::array({2})), {"'mlp_only_layers'", "entry 2"});
  expect_bad(with(tiny_moe(), "moe_intermediate_size", 0), {"'moe_intermediate_size'"});
  expect_bad(with(without(tiny_moe(), "head_dim"), "num_attention_heads", 6),
             {"'head_dim'", "not divisible"});
}

TEST(ModelConfigBad, UnsupportedFeatures) {
  expect_bad(with(tiny_dense(), "hidden_act", "gelu"), {"'hidden_act'", "'gelu'", "silu"});
  // RoPE types other than default / linear / dynamic / yarn are refused by name, in every spelling.
  expect_bad(with(tiny_dense(), "rope_scaling", json{{"rope_type", "llama3"}, {"factor", 8.0}}),
             {"'rope_scaling'", "rope_type 'llama3' is not supported", "default, linear, dynamic, yarn"});
  expect_bad(with(tiny_dense(), "rope_scaling", json{{"type", "longrope"}, {"factor", 2.0}}),
             {"'rope_scaling'", "'longrope'"});
  expect_bad(with(tiny_dense(), "rope_parameters", json{{"rope_type", "proportional"}, {"rope_theta", 1e6}}),
             {"'rope_parameters'", "'proportional'"});
  expect_bad(with(tiny_dense(), "rope_scaling", json{{"rope_type", "yarn"}}), {"'rope_scaling'", "needs 'factor'"});
  expect_bad(with(tiny_dense(), "rope_scaling", json{{"rope_type", "linear"}, {"factor", nullptr}}),
             {"'rope_scaling.factor' is null"});
  expect_bad(with(tiny_dense(), "rope_scaling", json{{"rope_type", "linear"}, {"factor", 0}}), {"factor must be > 0"});
  expect_bad(with(tiny_dense(), "rope_scaling", "yarn"), {"'rope_scaling'", "expected object or null"});
  expect_bad(with(tiny_dense(), "partial_rotary_factor", 0.5), {"'partial_rotary_factor'"});
  // Sliding windows: a window on a layer needs use_sliding_window and sliding_window (transformers fails too).
  expect_bad(with(tiny_dense(), "layer_types", json::array({"full_attention", "sliding_attention"})),
             {"'layer_types'", "layer 1", "no window is set"});
  expect_bad(with(tiny_dense(), "layer_types", json::array({"full_attention"})), {"'layer_types'", "1 entries"});
  expect_bad(with(tiny_dense(), "layer_types", json::array({"full_attention", "chunked_attention"})),
             {"'layer_types'", "'chunked_attention'"});
  json sw = with(with(tiny_dense(), "use_sliding_window", true), "max_window_layers", 0);
  expect_bad(with(sw, "sliding_window", 0), {"'sliding_window'", ">= 1"});
  expect_bad(with(sw, "max_window_layers", nullptr), {"'max_window_layers'", "null"});
  expect_bad(with(with(tiny_moe(), "use_sliding_window", true), "max_window_layers", 0),
             {"'use_sliding_window'", "qwen3_moe"});
}

// null is an error naming the field (transformers gives it no meaning; before, it silently became the default).
TEST(ModelConfigBad, NullFields) {
  for (const char* k : {"rope_theta", "rms_norm_eps", "head_dim", "max_position_embeddings", "initializer_range",
                        "attention_dropout", "tie_word_embeddings", "attention_bias", "use_sliding_window",
                        "hidden_act"})
    expect_bad(with(tiny_dense(), k, nullptr), {std::string("field '") + k + "' is null"});
  expect_bad(with(tiny_dense(), "vocab_size", nullptr), {"'vocab_size' is null"});
  expect_bad(with(tiny_dense(), "rope_parameters", json{{"rope_type", "default"}, {"rope_theta", nullptr}}),
             {"'rope_parameters.rope_theta' is null"});
  expect_bad(with(tiny_dense(), "rope_scaling", json{{"rope_type", nullptr}, {"factor", 2.0}}),
             {"'rope_scaling.rope_type' is null"});
  expect_bad(with(tiny_moe(), "decoder_sparse_step", nullptr), {"'decoder_sparse_step' is null"});
  // Fields where transformers defines null stay accepted.
  TempDir d;
  json ok = tiny_dense();
  for (const char* k : {"num_key_value_heads", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype",
                        "rope_scaling", "rope_parameters", "sliding_window", "layer_types", "max_window_layers"})
    ok[k] = nullptr;
  ModelConfig c = load_json(d, ok);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_EQ(c.attention_window(1), 0);
}

// RoPE in every form transformers reads (configuration_utils RotaryEmbeddingConfigMixin, transformers 5).
TEST(ModelConfig, RopeVariants) {
  TempDir d;
  // 4.x: top-level rope_theta + rope_scaling with rope_type (the Qwen3 model card's YaRN setting).
  json j = with(tiny_dense(), "rope_theta", 1e6);
  j["max_position_embeddings"] = 131072;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = load_json(d, j);
  EXPECT_EQ(c.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_TRUE(c.rope_scaling.truncate);
  EXPECT_FALSE(c.rope_scaling.attention_factor.has_value());
  EXPECT_EQ(c.rope_theta, 1e6);
  // legacy "type"; original_max_position_embeddings defaults to max_position_embeddings; factor null ->
  // max_pos / original; beta 0 -> default (`or 32`); top-level original_max_position_embeddings wins.
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", nullptr}, {"beta_fast", 0}, {"beta_slow", 2}, {"truncate", false},
                       {"mscale", 0.7}, {"mscale_all_dim", 1.0}, {"attention_factor", nullptr}};
  j["original_max_position_embeddings"] = 65536;
  c = load_json(d, j);
  EXPECT_EQ(c.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 65536);
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 2.0);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.rope_scaling.mscale, std::optional<double>(0.7));
  j.erase("original_max_position_embeddings");
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
  EXPECT_EQ(load_json(d, j).rope_scaling.original_max_position_embeddings, 131072);
  // 5.x: rope_parameters with the theta inside; a non-empty rope_scaling replaces it; an empty one does not.
  json k = tiny_dense();
  k["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.5}, {"rope_theta", 5e5}};
  c = load_json(d, k);
  EXPECT_EQ(c.rope_scaling.rope_type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.5);
  EXPECT_EQ(c.rope_theta, 5e5);
  k["rope_scaling"] = json::object();
  EXPECT_EQ(load_json(d, k).rope_scaling.rope_type, "linear");
  k["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 3.0}};
  c = load_json(d, k);
  EXPECT_EQ(c.rope_scaling.rope_type, "dynamic");
  EXPECT_EQ(c.rope_theta, 10000.0);  // the replaced dict's theta is gone; top-level default
  // A variant built in code is written out and read back.
  ModelConfig e = load_json(d, tiny_dense());
  e.raw = json::object();
  e.rope_scaling.rope_type = "yarn";
  e.rope_scaling.factor = 4.0;
  e.rope_scaling.original_max_position_embeddings = 1024;
  save_model_config(e, d / "e.json");
  ModelConfig e2 = load_model_config(d / "e.json");
  EXPECT_EQ(e2.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(e2.rope_scaling.original_max_position_embeddings, 1024);
}

// Qwen3Config's sliding-window rule (configuration_qwen3.py) and masking_utils' window width.
TEST(ModelConfig, SlidingWindowLayers) {
  TempDir d;
  json j = tiny_dense();
  j["num_hidden_layers"] = 4;
  j["sliding_window"] = 16;
  j["max_window_layers"] = 2;
  auto windows = [&](const json& x) {
    ModelConfig c = load_json(d, x);
    std::vector<int64_t> w;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) w.push_back(c.attention_window(l));
    return w;
  };
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 0, 0, 0}));  // use_sliding_window false: no window
  j["use_sliding_window"] = true;
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 0, 16, 16}));  // layers >= max_window_layers
  j["max_window_layers"] = 4;
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 0, 0, 0}));  // no layer windowed: accepted
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(windows(j), (std::vector<int64_t>{16, 0, 16, 0}));  // layer_types win over max_window_layers
  j.erase("sliding_window");
  EXPECT_EQ(windows(j), (std::vector<int64_t>{4096, 0, 4096, 0}));  // Qwen3Config default 4096
  ModelConfig c = load_json(d, j);
  json out = to_json(c);
  EXPECT_EQ(out["layer_types"], j["layer_types"]);
  EXPECT_TRUE(out["use_sliding_window"].get<bool>());
}