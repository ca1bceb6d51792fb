// twinkle/parallel/moe_router_loss.h — Megatron's per-layer router losses when the tokens of a
// micro-batch are split over ranks (sequence parallelism over tp, context parallelism over cp).
//
// Megatron-core (megatron/core/transformer/moe/router.py, TopKRouter.apply_load_balancing_loss /
// apply_z_loss; moe_utils.py switch_load_balancing_loss_func, z_loss_func) aggregates the
// per-expert counts and the token count over the "tp_cp" group that splits the sequence, so the
// loss and its gradient do not depend on the split (Megatron PR #5047):
//   aux   = coeff * E / (k * N^2) * sum_e P_e * count_e
//           N, count_e summed over the group's real tokens; P_e = sum of the softmax
//           probabilities of e over THIS rank's real tokens (each rank's value is its part; the
//           parts add up to the value of one process holding all tokens)
//   z     = coeff * (1/N) * sum over this rank's real tokens of logsumexp(logits_t)^2
// Gradients (per real token t of this rank): dprobs[t, e] = grad_scale * coeff * E / (k N^2) *
// count_e and dlogits[t, e] = grad_scale * coeff * 2 * lse_t * p_te / N, where grad_scale is the
// main-loss scale the caller applies to every micro-batch's loss (1 / the global number of
// micro-batches when gradients are summed over dp-cp). The router weight is replicated over the
// group, so its gradient must then be summed over the group (as for other replicated
// parameters under sequence parallelism).
#pragma once
#include <cstdint>
#include <vector>

#include "twinkle/dist/process_group.h"

namespace twinkle::parallel {

class PerLayerRouterLoss {
 public:
  /// Forward for one MoE layer and micro-batch. seq: the ranks holding disjoint token shards of
  /// the same micro-batch (tp under sequence parallelism, cp, or tp-cp; a size-1 group in one
  /// process). probs [T, E] f32 (full softmax), topk_idx [T, k] i32, logits [T, E] f32 (for the
  /// z-loss; may be null when z_coeff is 0), token_mask [T] (1 = real; null = all real).
  /// Collective over seq (one all-reduce of E+1 int64 and one of 2 doubles). Returns nothing;
  /// read aux() / z() (the whole micro-batch's values, identical on every rank of seq).
  void forward(dist::ProcessGroup& seq, const float* probs, const int32_t* topk_idx, const float* logits,
               const uint8_t* token_mask, int64_t T, int64_t E, int64_t k, double aux_coeff, double z_coeff);

  /// The layer's load-balancing loss (coefficient included) and z-loss of the whole micro-batch.
  double aux() const { return aux_; }
  double z() const { return z_; }
  /// Slots routed to each expert over the group's real tokens [E], and the real-token count N.
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t tokens() const { return n_; }

  /// Adds the aux gradient to dprobs [T, E] (then moe_router_backward's `dprobs`) and the z-loss
  /// gradient to dlogits_extra [T, E] (its `dlogits_extra`; may be null when z_coeff is 0), for
  /// this rank's real tokens, times grad_scale. probs as in forward.
  void backward(const float* probs, const uint8_t* token_mask, double grad_scale, float* dprobs,
                float* dlogits_extra) const;

 private:
  int64_t T_ = 0, E_ = 0, k_ = 0, n_ = 0;
  double aux_coeff_ = 0.0, z_coeff_ = 0.0, aux_ = 0.0, z_ = 0.0, scale_ = 0.0;
  std::vector<int64_t> counts_;  // [E] then N in the last slot during the all-reduce
  std::vector<double> psum_;
  std::vector<float> lse_;
};

}  // namespace twinkle::parallel
