// twinkle/model/rope_variant.h — the RoPE variant of a Qwen3 config, for the rope kernels.
#pragma once
#include "twinkle/io/model_config.h"
#include "twinkle/kernels/cpu/rope.h"

namespace twinkle {

/// cfg.rope_scaling (resolved by load_model_config from rope_scaling / rope_parameters, see
/// twinkle/io/model_config.h) as kernels::cpu::RopeVariant; dynamic gets
/// max_position_embeddings as its reference length (transformers 5
/// _compute_dynamic_ntk_parameters). Throws twinkle::Error (naming cfg.source) for a type the
/// kernels do not implement.
kernels::cpu::RopeVariant rope_variant(const ModelConfig& cfg);

}  // namespace twinkle
