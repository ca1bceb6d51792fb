// twinkle/parallel/expert_layout.h — checks of the expert grid against the model, run before
// training so a bad layout fails with the numbers instead of inside the first all-to-all.
//
// Megatron-core asserts the same facts late (megatron/core/parallel_state.py
// initialize_model_parallel: world % (etp*ep*pp) — DeviceMesh::from_sizes checks that one;
// megatron/core/transformer/moe/moe_layer.py: num_moe_experts % ep_size == 0). Twinkle's mesh
// (DeviceMesh.from_sizes) accepts ep > 1 for any model; a dense model has no experts to split.
#pragma once
#include <cstdint>
#include <string>

#include "twinkle/dist/device_mesh.h"

namespace twinkle::parallel {

/// Throws twinkle::Error naming the numbers and `model` (a path or model id for the message):
///   * ep > 1 or etp > 1 with a dense model (is_moe false):
///       "ep = 2 needs a MoE model, but <model> is dense (model_type qwen3, no experts); use ep = 1"
///   * num_experts % ep != 0:
///       "num_experts = 6 (<model>) is not divisible by ep = 4: each ep rank holds num_experts / ep experts"
/// A dense model with ep = etp = 1, or a MoE model whose experts split evenly, passes (etp > 1
/// included; moe_intermediate_size % etp is check_expert_tensor_split, called by the MoE block).
void check_expert_layout(const DeviceMesh& mesh, bool is_moe, int64_t num_experts, const std::string& model);

/// Expert tensor parallelism splits every expert's gate/up rows and down columns
/// (moe_intermediate_size of them) over the etp group (Megatron-core experts.py: each etp rank
/// holds moe_ffn_hidden_size / expert_tensor_parallel_size). Throws twinkle::Error when
/// moe_intermediate_size % etp != 0:
///   "expert tensor parallelism: moe_intermediate_size = 64 is not divisible by etp = 3 (each etp
///    rank holds moe_intermediate_size / etp columns of every expert)".
/// Used by the MoE block (model/qwen3_moe_block.h) and by `twinkle plan` (train/plan.h).
void check_expert_tensor_split(int64_t moe_intermediate_size, int etp);

/// LoRA on a MoE model with etp > 1 is refused (as Megatron-Bridge refuses it): throws
/// twinkle::Error "LoRA with expert tensor parallelism (etp 2) is not supported (as in
/// Megatron-Bridge); use --etp 1" when etp > 1. Used by add_adapter and `twinkle plan --lora-r`.
void check_lora_expert_tensor_parallel(int etp);

/// The MoE loss options (`--moe-aux-loss-type`, `--moe-aux-loss-coeff`, `--moe-z-loss-coeff`).
/// Throws twinkle::Error naming the option and the value:
///   * type other than "global" / "per_layer";
///   * a coefficient that is negative or not finite;
///   * type "global" with a coefficient > 0 and pp > 1: transformers' definition needs every MoE
///     layer's statistics of a micro-batch before its backward, which a pipeline stage does not
///     have ("... use --moe-aux-loss-type per_layer (Megatron's) with pp = 2");
///   * a coefficient > 0 for a dense model.
void check_moe_loss_options(const std::string& aux_type, double aux_coeff, double z_coeff, const DeviceMesh& mesh,
                            bool is_moe);

}  // namespace twinkle::parallel
