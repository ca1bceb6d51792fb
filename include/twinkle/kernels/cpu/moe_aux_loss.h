// twinkle/kernels/cpu/moe_aux_loss.h — MoE router losses and load statistics.
//
// Load-balancing (Switch Transformer, arXiv 2101.03961; GShard) in the one form both of
// twinkle's definitions share:
//     value = scale * sum_e counts[e] * prob_sum[e]
// where counts[e] = routed slots of expert e (top-k selections; no gradient) and prob_sum[e] =
// sum over tokens of the FULL softmax probability of e (the gradient path), both over the real
// (non-padding) tokens only.
//   * `global` = transformers' load_balancing_loss_func (transformers/models/qwen3_moe/
//     modeling_qwen3_moe.py): the router logits of all MoE layers of a micro-batch concatenated,
//     padding excluded through the attention mask. It returns E * sum_{k,e} f_ke * P_e with
//     f_ke = (tokens whose k-th choice is e) / N and P_e = prob_sum_e / N, N = MoE layers x real
//     tokens; summing f over k gives counts_e / N, so scale = E / N^2 (moe_aux_scale_global).
//     Perfect balance gives k.
//   * `per_layer` = Megatron-core's switch_load_balancing_loss_func (megatron/core/transformer/
//     moe/moe_utils.py): per layer, E / (k * N^2) * sum_e prob_sum_e * counts_e with counts and N
//     aggregated over the tp x cp shards that split the tokens (moe_aux_scale_per_layer).
//     Perfect balance gives 1.
// Router z-loss (ST-MoE, arXiv 2202.08906; Megatron z_loss_func): mean over tokens of
// logsumexp(logits_t)^2.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Accumulates one layer's routing statistics over the real tokens (token_mask[t] != 0; a null
/// mask means every token is real): counts[e] += slots routed to e (from topk_idx [T, k]),
/// prob_sum[e] += sum_t probs[t, e] (probs [T, E] f32, summed in double). Returns the number of
/// real tokens. counts / prob_sum are NOT cleared (they accumulate over layers or shards).
int64_t moe_routing_stats(const float* probs, const int32_t* topk_idx, const uint8_t* token_mask, int64_t T,
                          int64_t E, int64_t k, double* prob_sum, int64_t* counts);

/// scale * sum_e counts[e] * prob_sum[e] (double).
double moe_aux_loss_value(const double* prob_sum, const int64_t* counts, int64_t E, double scale);

/// E / N^2: transformers' definition over N = (MoE layers) x (real tokens). N <= 0 gives 0.
double moe_aux_scale_global(int64_t E, int64_t n);
/// E / (k * N^2): Megatron's per-layer definition over N real tokens of the sequence partition.
/// N <= 0 gives 0.
double moe_aux_scale_per_layer(int64_t E, int64_t k, int64_t n);

/// The aux loss gradient on the full softmax probabilities: dprobs[t, e] += coeff_scale *
/// counts[e] for the real tokens (coeff_scale = coefficient x scale x any loss-scale factor).
/// dprobs [T, E] f32 (then moe_router_backward's `dprobs`).
void moe_aux_loss_backward(const int64_t* counts, const uint8_t* token_mask, int64_t T, int64_t E,
                           double coeff_scale, float* dprobs);

/// z-loss forward: lse[t] = logsumexp_e logits[t, e] for every token (lse [T] f32 out), returns
/// sum over the real tokens of lse[t]^2 (double; the caller divides by the token count and
/// multiplies by the coefficient).
double moe_z_loss_forward(const float* logits, const uint8_t* token_mask, int64_t T, int64_t E, float* lse);

/// z-loss backward: dlogits[t, e] += scale * 2 * lse[t] * probs[t, e] for the real tokens
/// (probs = softmax(logits), scale = coefficient / N for the mean over N tokens).
void moe_z_loss_backward(const float* probs, const float* lse, const uint8_t* token_mask, int64_t T, int64_t E,
                         double scale, float* dlogits);

/// Per-expert load: the largest and smallest share counts[e] / sum(counts) over the E experts
/// (1/E each when balanced; min 0 when an expert gets nothing). Both 0 when no slot was routed.
struct ExpertLoad {
  double max_share = 0.0;
  double min_share = 0.0;
};
ExpertLoad moe_expert_load(const int64_t* counts, int64_t E);

}  // namespace twinkle::kernels::cpu
