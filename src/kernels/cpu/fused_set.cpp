// The CPU "fused" kernel set: the optimized kernels of src/kernels/cpu, registered per op.
#include "twinkle/kernels/cpu/adamw.h"
#include "twinkle/kernels/cpu/add_rmsnorm.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/attention_block.h"
#include "twinkle/kernels/cpu/causal_conv1d.h"
#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/embedding.h"
#include "twinkle/kernels/cpu/gate_up_swiglu.h"
#include "twinkle/kernels/cpu/gated_delta_rule.h"
#include "twinkle/kernels/cpu/gated_rmsnorm.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/grouped_gemm.h"
#include "twinkle/kernels/cpu/linear_cross_entropy.h"
#include "twinkle/kernels/cpu/lora.h"
#include "twinkle/kernels/cpu/moe_aux_loss.h"
#include "twinkle/kernels/cpu/moe_permute.h"
#include "twinkle/kernels/cpu/moe_router.h"
#include "twinkle/kernels/cpu/qk_norm_rope.h"
#include "twinkle/kernels/cpu/reduce.h"
#include "twinkle/kernels/cpu/rmsnorm.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/cpu/swiglu.h"
#include "twinkle/kernels/registry.h"

namespace twinkle::kernels::cpu {

void register_fused_kernels(Registry& r) {
  const std::string dev = "cpu", name = "fused";
  r.add(dev, name, EmbeddingOp{embedding_forward, embedding_backward});
  r.add(dev, name, RmsNormOp{rmsnorm_forward, rmsnorm_backward});
  r.add(dev, name, AddRmsNormOp{add_rmsnorm_forward, add_rmsnorm_backward});
  r.add(dev, name, QkNormRopeOp{qk_norm_rope_forward, qk_norm_rope_backward});
  r.add(dev, name, RopeOp{rope_forward, rope_backward});
  r.add(dev, name, SwigluOp{swiglu_forward, swiglu_backward});
  r.add(dev, name, GateUpSwigluOp{gate_up_swiglu_forward, gate_up_swiglu_backward, true});
  r.add(dev, name, AttentionOp{flash_attention_forward, flash_attention_backward});
  r.add(dev, name, LinearOp{linear_forward, linear_backward});
  r.add(dev, name, GroupedLinearOp{grouped_linear_forward, grouped_linear_backward});
  r.add(dev, name, CrossEntropyOp{ce_local_max, ce_local_sumexp_target, ce_backward, cross_entropy_forward});
  r.add(dev, name, LinearCrossEntropyOp{linear_cross_entropy});
  r.add(dev, name, AdamwOp{adamw_step});
  r.add(dev, name, NormsOp{sum_squares, scale_inplace});
  r.add(dev, name, AddOp{add_inplace, add_out, add_bias_rows, bias_grad_rows});
  r.add(dev, name, LoraOp{lora_dropout_mask, lora_dropout_apply, lora_dropout_backward, lora_forward, lora_backward});
  r.add(dev, name, MoeRouterOp{moe_router_forward, moe_router_backward});
  r.add(dev, name, MoePermuteOp{moe_sort_by_expert, moe_permute_forward, moe_permute_backward, moe_unpermute_forward,
                                moe_unpermute_backward, moe_permute_keys});
  r.add(dev, name, MoeRouterLossOp{moe_routing_stats, moe_aux_loss_backward, moe_z_loss_forward, moe_z_loss_backward});
  r.add(dev, name, AttentionBlockOp{attention_block_forward, attention_block_backward, attention_lse_merge,
                                    attention_softmax_delta});
  r.add(dev, name, CausalConv1dOp{causal_conv1d_forward, causal_conv1d_backward});
  r.add(dev, name, GatedDeltaRuleOp{gated_delta_rule_forward, gated_delta_rule_backward, gdn_gates_forward,
                                    gdn_gates_backward});
  r.add(dev, name, GatedRmsNormOp{gated_rmsnorm_forward, gated_rmsnorm_backward});
}

}  // namespace twinkle::kernels::cpu
