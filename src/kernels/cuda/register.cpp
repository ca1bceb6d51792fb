// The "fused" set of device "cuda" (twinkle/kernels/cuda/kernels.h): one implementation per op of
// twinkle/kernels/ops.h; and the "bf16" set (the mixed-precision ops).
#include "ops_cuda.h"
#include "twinkle/kernels/cuda/kernels.h"

namespace twinkle::cuda {

std::vector<kernels::OpImpl> fused_kernels() {
  using namespace kernels;
  return {
      EmbeddingOp{ops::embedding_forward, ops::embedding_backward},
      RmsNormOp{ops::rmsnorm_forward, ops::rmsnorm_backward},
      AddRmsNormOp{ops::add_rmsnorm_forward, ops::add_rmsnorm_backward},
      QkNormRopeOp{ops::qk_norm_rope_forward, ops::qk_norm_rope_backward},
      RopeOp{ops::rope_forward, ops::rope_backward},
      SwigluOp{ops::swiglu_forward, ops::swiglu_backward},
      GateUpSwigluOp{ops::gate_up_swiglu_forward, ops::gate_up_swiglu_backward, true},
      AttentionOp{ops::attention_forward, ops::attention_backward},
      LinearOp{ops::linear_forward, ops::linear_backward},
      GroupedLinearOp{ops::grouped_linear_forward, ops::grouped_linear_backward},
      CrossEntropyOp{ops::ce_local_max, ops::ce_local_sumexp_target, ops::ce_backward, ops::cross_entropy_forward},
      LinearCrossEntropyOp{ops::linear_cross_entropy},
      AdamwOp{ops::adamw_step},
      NormsOp{ops::sum_squares, ops::scale},
      AddOp{ops::add_inplace, ops::add, ops::add_bias_rows, ops::bias_grad_rows},
      LoraOp{ops::lora_dropout_mask, ops::lora_dropout_apply, ops::lora_dropout_backward, ops::lora_forward,
             ops::lora_backward},
      MoeRouterOp{ops::moe_router_forward, ops::moe_router_backward},
      MoePermuteOp{ops::moe_sort_by_expert, ops::moe_permute_forward, ops::moe_permute_backward,
                   ops::moe_unpermute_forward, ops::moe_unpermute_backward, ops::moe_permute_keys},
      MoeRouterLossOp{ops::moe_routing_stats, ops::moe_aux_loss_backward, ops::moe_z_loss_forward,
                      ops::moe_z_loss_backward},
      AttentionBlockOp{ops::attention_block_forward, ops::attention_block_backward, ops::attention_lse_merge,
                       ops::attention_softmax_delta},
      // CPU-only ops (kernels::cpu_only_ops()): refusals by name, cpu_only_ops.cpp
      CausalConv1dOp{ops::causal_conv1d_forward, ops::causal_conv1d_backward},
      GatedDeltaRuleOp{ops::gated_delta_rule_forward, ops::gated_delta_rule_backward, ops::gdn_gates_forward,
                       ops::gdn_gates_backward},
      GatedRmsNormOp{ops::gated_rmsnorm_forward, ops::gated_rmsnorm_backward},
  };
}

std::vector<kernels::OpImpl> bf16_kernels() {
  using namespace kernels;
  return {
      LinearOp{ops::linear_forward_bf16, ops::linear_backward_bf16},
      GroupedLinearOp{ops::grouped_linear_forward_bf16, ops::grouped_linear_backward_bf16},
      GateUpSwigluOp{ops::gate_up_swiglu_forward_bf16, ops::gate_up_swiglu_backward_bf16, true},
      LinearCrossEntropyOp{ops::linear_cross_entropy_bf16},
      AttentionOp{ops::attention_forward, ops::attention_backward_bf16},  // fp32 forward, as the CPU set
      AttentionBlockOp{ops::attention_block_forward, ops::attention_block_backward_bf16, ops::attention_lse_merge,
                       ops::attention_softmax_delta},
  };
}

}  // namespace twinkle::cuda
