// Registers the CPU "reference" kernel set.
#include "reference.h"
#include "twinkle/kernels/registry.h"

namespace twinkle::kernels::cpu {

void register_reference_kernels(Registry& r) {
  namespace R = reference;
  const std::string dev = "cpu", name = "reference";
  r.add(dev, name, EmbeddingOp{R::embedding_forward, R::embedding_backward});
  r.add(dev, name, RmsNormOp{R::rmsnorm_forward, R::rmsnorm_backward});
  r.add(dev, name, AddRmsNormOp{R::add_rmsnorm_forward, R::add_rmsnorm_backward});
  r.add(dev, name, QkNormRopeOp{R::qk_norm_rope_forward, R::qk_norm_rope_backward});
  r.add(dev, name, RopeOp{R::rope_forward, R::rope_backward});
  r.add(dev, name, SwigluOp{R::swiglu_forward, R::swiglu_backward});
  r.add(dev, name, GateUpSwigluOp{R::gate_up_swiglu_forward, R::gate_up_swiglu_backward, true});
  r.add(dev, name, AttentionOp{R::attention_forward, R::attention_backward});
  r.add(dev, name, LinearOp{R::linear_forward, R::linear_backward});
  r.add(dev, name, GroupedLinearOp{R::grouped_linear_forward, R::grouped_linear_backward});
  r.add(dev, name,
        CrossEntropyOp{R::ce_local_max, R::ce_local_sumexp_target, R::ce_backward, R::cross_entropy_forward});
  r.add(dev, name, LinearCrossEntropyOp{R::linear_cross_entropy});
  r.add(dev, name, AdamwOp{R::adamw_step});
  r.add(dev, name, NormsOp{R::sum_squares, R::scale});
  r.add(dev, name, AddOp{R::add_inplace, R::add, R::add_bias_rows, R::bias_grad_rows});
  r.add(dev, name, LoraOp{R::lora_dropout_mask, R::lora_dropout_apply, R::lora_dropout_backward, R::lora_forward,
                          R::lora_backward});
  r.add(dev, name, MoeRouterOp{R::moe_router_forward, R::moe_router_backward});
  r.add(dev, name, MoePermuteOp{R::moe_sort_by_expert, R::moe_permute_forward, R::moe_permute_backward,
                                R::moe_unpermute_forward, R::moe_unpermute_backward, R::moe_permute_keys});
  r.add(dev, name, MoeRouterLossOp{R::moe_routing_stats, R::moe_aux_loss_backward, R::moe_z_loss_forward,
                                   R::moe_z_loss_backward});
  r.add(dev, name, AttentionBlockOp{R::attention_block_forward, R::attention_block_backward, R::attention_lse_merge,
                                    R::attention_softmax_delta});
  r.add(dev, name, CausalConv1dOp{R::causal_conv1d_forward, R::causal_conv1d_backward});
  r.add(dev, name, GatedDeltaRuleOp{R::gated_delta_rule_forward, R::gated_delta_rule_backward, R::gdn_gates_forward,
                                    R::gdn_gates_backward});
  r.add(dev, name, GatedRmsNormOp{R::gated_rmsnorm_forward, R::gated_rmsnorm_backward});
}

}  // namespace twinkle::kernels::cpu
