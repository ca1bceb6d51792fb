// Reference MoeRouterOp, MoePermuteOp and MoeRouterLossOp (twinkle/kernels/ops.h) as plain loops in double,
// written from the semantics of twinkle/kernels/cpu/moe_router.h (transformers' Qwen3MoeSparseMoeBlock
// routing: softmax over all experts, top-k with ties to the lower index, optional renormalisation),
// moe_permute.h (Megatron-core's moe_utils.py permute / unpermute order: rows sorted by expert, tokens
// ascending inside an expert) and moe_aux_loss.h (load-balancing statistics, ST-MoE's z-loss). Each
// backward is the textbook chain rule of its forward, not the fused kernels' factorisation.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

namespace {

void check_router_sizes(const char* fn, int64_t T, int64_t E, int64_t k) {
  check(T >= 0 && E >= 1 && k >= 1 && k <= E, std::string(fn) + ": need T >= 0, E >= 1 and 1 <= k <= E, got T=" +
                                                   std::to_string(T) + " E=" + std::to_string(E) +
                                                   " k=" + std::to_string(k));
}

bool real_token(const uint8_t* token_mask, int64_t t) { return !token_mask || token_mask[t] != 0; }

// Throws (naming the token) unless token t's experts lie in [0, E).
void check_experts_in_range(const char* fn, const int32_t* topk_idx, int64_t t, int64_t k, int64_t E) {
  for (int64_t j = 0; j < k; ++j) {
    const int32_t e = topk_idx[t * k + j];
    check(e >= 0 && e < E, std::string(fn) + ": token " + std::to_string(t) + " slot " + std::to_string(j) +
                               " routes to expert " + std::to_string(e) + ", outside [0, " + std::to_string(E) + ")");
  }
}

}  // namespace

// ---------------------------------------------------------------- MoeRouterOp

void moe_router_forward(const float* logits, float* probs, int32_t* topk_idx, float* topk_w, int64_t T, int64_t E,
                        int64_t k, bool norm_topk_prob) {
  check_router_sizes("moe_router_forward", T, E, k);
  std::vector<double> pd(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * E;
    double mx = x[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, static_cast<double>(x[e]));
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += std::exp(x[e] - mx);
    for (int64_t e = 0; e < E; ++e) {
      pd[e] = std::exp(x[e] - mx) / s;
      probs[t * E + e] = static_cast<float>(pd[e]);
    }
    // torch.topk on the float32 softmax, its tie order defined as a stable descending sort (equal
    // probabilities keep the lower expert first; tests/reference/qwen3_moe_ref.py topk_lower)
    std::iota(order.begin(), order.end(), 0);
    const float* p = probs + t * E;
    std::stable_sort(order.begin(), order.end(), [p](int32_t a, int32_t b) { return p[a] > p[b]; });
    double sel_sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sel_sum += pd[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      topk_idx[t * k + j] = order[j];
      topk_w[t * k + j] = static_cast<float>(norm_topk_prob ? pd[order[j]] / sel_sum : pd[order[j]]);
    }
  }
}

void moe_router_backward(const float* probs, const int32_t* topk_idx, const float* topk_w, const float* dtopk_w,
                         const float* dprobs, const float* dlogits_extra, float* dlogits, int64_t T, int64_t E,
                         int64_t k, bool norm_topk_prob) {
  check_router_sizes("moe_router_backward", T, E, k);
  std::vector<double> p(static_cast<size_t>(E)), dp(static_cast<size_t>(E)), extra(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    check_experts_in_range("moe_router_backward", topk_idx, t, k, E);
    // the whole row is read before dlogits is written (it may alias dprobs or dlogits_extra)
    for (int64_t e = 0; e < E; ++e) {
      p[e] = probs[t * E + e];
      dp[e] = dprobs ? dprobs[t * E + e] : 0.0;
      extra[e] = dlogits_extra ? dlogits_extra[t * E + e] : 0.0;
    }
    if (dtopk_w) {
      const int32_t* idx = topk_idx + t * k;
      const float* dw = dtopk_w + t * k;
      if (norm_topk_prob) {
        // w_j = p_{idx_j} / S, S = sum_i p_{idx_i}:  dL/dp_{idx_i} = dw_i / S - sum_j dw_j p_{idx_j} / S^2
        double S = 0.0, a = 0.0;
        for (int64_t j = 0; j < k; ++j) S += p[idx[j]];
        for (int64_t j = 0; j < k; ++j) a += static_cast<double>(dw[j]) * p[idx[j]];
        for (int64_t i = 0; i < k; ++i) dp[idx[i]] += dw[i] / S - a / (S * S);
      } else {
        for (int64_t i = 0; i < k; ++i) dp[idx[i]] += dw[i];  // w_j = p_{idx_j}
      }
    }
    // softmax backward: dlogit_e = sum_f dp_f p_f ([e == f] - p_e) = p_e (dp_e - sum_f dp_f p_f)
    double dot = 0.0;
    for (int64_t f = 0; f < E; ++f) dot += dp[f] * p[f];
    for (int64_t e = 0; e < E; ++e) dlogits[t * E + e] = static_cast<float>(p[e] * (dp[e] - dot) + extra[e]);
  }
}

// ---------------------------------------------------------------- MoePermuteOp

void moe_sort_by_expert(const int32_t* topk_idx, int64_t T, int64_t k, int64_t E, int64_t* counts,
                        int32_t* row_of_slot, int32_t* slot_of_row) {
  check(T >= 0 && k >= 1 && E >= 1 && k <= E, "moe_sort_by_expert: need T >= 0, E >= 1 and 1 <= k <= E, got T=" +
                                                  std::to_string(T) + " k=" + std::to_string(k) +
                                                  " E=" + std::to_string(E));
  for (int64_t t = 0; t < T; ++t) {  // the first bad token in order (the fused kernel's message)
    const int32_t* idx = topk_idx + t * k;
    for (int64_t j = 0; j < k; ++j) {
      check(idx[j] >= 0 && idx[j] < E, "moe_sort_by_expert: token " + std::to_string(t) + " slot " +
                                           std::to_string(j) + " routes to expert " + std::to_string(idx[j]) +
                                           ", outside [0, " + std::to_string(E) + ")");
      for (int64_t i = 0; i < j; ++i)
        check(idx[i] != idx[j], "moe_sort_by_expert: token " + std::to_string(t) + " routes to expert " +
                                    std::to_string(idx[j]) + " twice");
    }
  }
  // Megatron's permute: for each expert in order, the tokens routed to it in ascending order
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) {
    counts[e] = 0;
    for (int64_t s = 0; s < T * k; ++s)
      if (topk_idx[s] == e) {
        row_of_slot[s] = static_cast<int32_t>(r);
        slot_of_row[r] = static_cast<int32_t>(s);
        ++r;
        ++counts[e];
      }
  }
}

void moe_permute_forward(const float* x, const int32_t* slot_of_row, float* out, int64_t rows, int64_t k, int64_t H) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = slot_of_row[r] / k;
    for (int64_t h = 0; h < H; ++h) out[r * H + h] = x[t * H + h];
  }
}

void moe_permute_backward(const float* dout, const int32_t* row_of_slot, float* dx, int64_t T, int64_t k, int64_t H,
                          bool accumulate) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double s = accumulate ? dx[t * H + h] : 0.0;
      for (int64_t j = 0; j < k; ++j) s += dout[static_cast<int64_t>(row_of_slot[t * k + j]) * H + h];
      dx[t * H + h] = static_cast<float>(s);
    }
}

void moe_unpermute_forward(const float* y, const int32_t* row_of_slot, const float* topk_w, float* out, int64_t T,
                           int64_t k, int64_t H) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double s = 0.0;
      for (int64_t j = 0; j < k; ++j)
        s += static_cast<double>(topk_w[t * k + j]) * y[static_cast<int64_t>(row_of_slot[t * k + j]) * H + h];
      out[t * H + h] = static_cast<float>(s);
    }
}

void moe_unpermute_backward(const float* y, const int32_t* row_of_slot, const float* topk_w, const float* dout,
                            float* dy, float* dtopk_w, int64_t T, int64_t k, int64_t H) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = t * k + j, r = row_of_slot[s];
      double dot = 0.0;
      for (int64_t h = 0; h < H; ++h) {
        dy[r * H + h] = static_cast<float>(static_cast<double>(topk_w[s]) * dout[t * H + h]);
        dot += static_cast<double>(dout[t * H + h]) * y[r * H + h];
      }
      dtopk_w[s] = static_cast<float>(dot);
    }
}

void moe_permute_keys(const uint64_t* key, const int32_t* slot_of_row, uint64_t* out, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; ++r) out[r] = key[slot_of_row[r] / k];
}

// ---------------------------------------------------------------- MoeRouterLossOp

int64_t moe_routing_stats(const float* probs, const int32_t* topk_idx, const uint8_t* token_mask, int64_t T,
                          int64_t E, int64_t k, double* prob_sum, int64_t* counts) {
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t)
    if (real_token(token_mask, t)) {
      check_experts_in_range("moe_routing_stats", topk_idx, t, k, E);
      ++n;
    }
  for (int64_t e = 0; e < E; ++e) {
    double s = 0.0;
    int64_t c = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!real_token(token_mask, t)) continue;
      s += probs[t * E + e];
      for (int64_t j = 0; j < k; ++j) c += topk_idx[t * k + j] == e;
    }
    prob_sum[e] += s;
    counts[e] += c;
  }
  return n;
}

// d/dprobs[t, e] of coeff_scale * sum_f counts[f] * sum_{real u} probs[u, f] = coeff_scale * counts[e] (real t).
void moe_aux_loss_backward(const int64_t* counts, const uint8_t* token_mask, int64_t T, int64_t E,
                           double coeff_scale, float* dprobs) {
  for (int64_t t = 0; t < T; ++t) {
    if (!real_token(token_mask, t)) continue;
    for (int64_t e = 0; e < E; ++e)
      dprobs[t * E + e] =
          static_cast<float>(dprobs[t * E + e] + coeff_scale * static_cast<double>(counts[e]));
  }
}

double moe_z_loss_forward(const float* logits, const uint8_t* token_mask, int64_t T, int64_t E, float* lse) {
  double total = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    const float* x = logits + t * E;
    double mx = x[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, static_cast<double>(x[e]));
    double s = 0.0;
    for (int64_t e = 0; e < E; ++e) s += std::exp(x[e] - mx);
    const double l = mx + std::log(s);
    lse[t] = static_cast<float>(l);
    if (real_token(token_mask, t)) total += l * l;
  }
  return total;
}

// d/dlogit_e of scale * lse^2 = 2 scale lse softmax_e (real tokens).
void moe_z_loss_backward(const float* probs, const float* lse, const uint8_t* token_mask, int64_t T, int64_t E,
                         double scale, float* dlogits) {
  for (int64_t t = 0; t < T; ++t) {
    if (!real_token(token_mask, t)) continue;
    for (int64_t e = 0; e < E; ++e)
      dlogits[t * E + e] = static_cast<float>(dlogits[t * E + e] +
                                              2.0 * scale * static_cast<double>(lse[t]) * probs[t * E + e]);
  }
}

}  // namespace twinkle::kernels::cpu::reference
