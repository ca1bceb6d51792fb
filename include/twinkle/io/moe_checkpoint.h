// twinkle/io/moe_checkpoint.h — the expert tensors of a Hugging Face Qwen3-MoE checkpoint
// against its config.json, checked before any weight is read.
//
// HF names (transformers' Qwen3MoeSparseMoeBlock): model.layers.{l}.mlp.gate.weight [E, hidden]
// and model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight for every MoE layer l
// (ModelConfig::is_moe_layer); a dense layer (mlp_only_layers, or every layer of qwen3) has
// model.layers.{l}.mlp.{gate,up,down}_proj.weight instead.
#pragma once
#include <string>
#include <vector>

#include "twinkle/io/model_config.h"

namespace twinkle {

/// Throws twinkle::Error naming `source`, the layer and the numbers when the checkpoint's
/// expert tensors disagree with `cfg`:
///   "<source>: layer 2 holds 16 experts (model.layers.2.mlp.experts.0 .. 15) but config.json
///    says num_experts = 8"  (also for gaps: "experts 0 .. 7 expected, expert 5 missing");
///   "<source>: layer 1 is a dense MLP layer (mlp_only_layers / decoder_sparse_step) but holds
///    model.layers.1.mlp.experts.0.gate_proj.weight" (any expert or router tensor there; for a
///    qwen3 config every layer is dense);
///   "<source>: layer 0 is a MoE layer but model.layers.0.mlp.gate.weight (the router) is missing";
///   an expert without all three of gate_proj / up_proj / down_proj.
/// Other tensors are ignored (the loader checks names and shapes of the rest).
void check_moe_checkpoint(const ModelConfig& cfg, const std::vector<std::string>& tensor_names,
                          const std::string& source);

}  // namespace twinkle
