// twinkle/kernels/cpu/moe_router.h — the Qwen3-MoE top-k softmax router, forward and backward.
//
// Semantics of transformers' models/qwen3_moe/modeling_qwen3_moe.py, Qwen3MoeSparseMoeBlock:
//   router_logits = gate(x)                                (the caller's GEMM, [T, E])
//   routing_weights = softmax(router_logits, dim=-1, dtype=float32)   over ALL E experts
//   routing_weights, selected_experts = torch.topk(routing_weights, k)  (descending)
//   if norm_topk_prob: routing_weights /= routing_weights.sum(-1, keepdim=True)
// which equals Megatron-core's default router (moe_router_pre_softmax = not norm_topk_prob;
// megatron/core/transformer/moe/moe_utils.py topk_softmax_with_capacity). The gradient flows
// from the k combine weights through the renormalisation and the FULL softmax (autograd of the
// code above); the top-k selection itself has no gradient.
// Ties: torch.topk leaves the order of equal values unspecified (on CPU, PyTorch 1.13,
// topk([.5, 1, 1, 1, 0], 2) gives indices [1, 3]); twinkle defines it: equal probabilities go to
// the lower expert index first (a stable descending sort; tests/reference/qwen3_moe_ref.py
// topk_lower). Without exact ties the selection is torch.topk's.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Forward for T tokens and E experts, top-k (1 <= k <= E, else twinkle::Error).
///   logits  [T, E] f32 (router logits, fp32 as Megatron's router dtype)
///   probs   [T, E] f32 out: softmax over all E (saved for backward, the aux / z losses use it)
///   topk_idx [T, k] i32 out: selected experts, by descending probability; ties to the lower
///            index
///   topk_w  [T, k] f32 out: the combine weights (renormalised to sum 1 when norm_topk_prob,
///            else the raw softmax probabilities)
/// Tokens run in parallel (OpenMP); softmax sums accumulate in double.
void moe_router_forward(const float* logits, float* probs, int32_t* topk_idx, float* topk_w, int64_t T, int64_t E,
                        int64_t k, bool norm_topk_prob);

/// Backward. Inputs from the forward (probs, topk_idx, topk_w) and
///   dtopk_w [T, k] f32: dLoss / dtopk_w (from the un-permute's combine), may be null (= 0)
///   dprobs  [T, E] f32: an extra gradient on the full softmax probabilities (the aux loss),
///           may be null (= 0)
///   dlogits_extra [T, E] f32: an extra gradient added to dlogits after the softmax backward
///           (the z-loss, which depends on the logits directly), may be null
///   dlogits [T, E] f32 out, OVERWRITTEN (may alias dprobs or dlogits_extra).
/// With s = sum_j p_sel_j: dp_sel_j = (dw_j - sum_i dw_i w_i) / s when norm_topk_prob, else dw_j;
/// then dlogit_e = p_e (dp_e - sum_f dp_f p_f) (softmax backward) + dlogits_extra_e.
void moe_router_backward(const float* probs, const int32_t* topk_idx, const float* topk_w, const float* dtopk_w,
                         const float* dprobs, const float* dlogits_extra, float* dlogits, int64_t T, int64_t E,
                         int64_t k, bool norm_topk_prob);

}  // namespace twinkle::kernels::cpu
