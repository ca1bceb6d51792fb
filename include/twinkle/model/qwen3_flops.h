// twinkle/model/qwen3_flops.h — what each part of a Qwen3 / Qwen3-MoE model costs per token.
//
// Forward matmul FLOPs per token (2 per multiply-add; a step's forward + backward is 3x), the
// convention of Megatron's num_floating_point_operations and PaLM appendix B, split by part so
// that the pipeline split (parallel/pipeline_split.h balanced_split) and `twinkle plan` can
// weigh stages. Norms, RoPE, SwiGLU and the embedding lookup are memory-bound and not counted;
// the attention scores and values (4 * heads * head_dim * S per token at sequence length S,
// full square) are returned separately because they depend on the sequence length.
#pragma once
#include <cstdint>

#include "twinkle/io/model_config.h"
#include "twinkle/parallel/pipeline_split.h"

namespace twinkle {

/// Forward matmul FLOPs per token of decoder layer `layer` (0-based): q/k/v/o projections
/// (2·H·(Hq+2·Hkv)·D + 2·Hq·D·H), then the dense MLP (2·3·H·I) or, in a Qwen3-MoE layer
/// (ModelConfig::is_moe_layer), the router (2·H·E) plus top_k experts (2·k·3·H·I_moe).
int64_t qwen3_layer_matmul_flops(const ModelConfig& cfg, int64_t layer);

/// Forward matmul FLOPs per token of the lm head (2·V·H; tied or not).
int64_t qwen3_head_matmul_flops(const ModelConfig& cfg);

/// Forward FLOPs per token of one layer's attention scores and values at sequence length S
/// (QK^T and PV over the full S x S square: 4·Hq·D·S; causal masking is not subtracted, as in
/// Megatron's MFU formula).
double qwen3_attention_flops(const ModelConfig& cfg, double seq_len);

/// The stage costs of the balanced pipeline split: each layer's and the lm head's matmul
/// FLOPs per token; the embedding lookup costs no matmul FLOPs.
parallel::StageCosts qwen3_stage_costs(const ModelConfig& cfg);

}  // namespace twinkle
