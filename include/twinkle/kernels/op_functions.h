// twinkle/kernels/op_functions.h — the entry points a kernel set implements for the ops of
// twinkle/kernels/ops.h, as ONE X-macro list: (return type, function name, parameter list).
//
// A kernel set that provides every op as free functions declares them by expanding the list in its
// own namespace, so the prototypes are written once:
//
//   namespace my_set {
//   #define TWINKLE_DECLARE_OP_FUNCTION(ret, name, params) ret name params;
//   TWINKLE_KERNEL_OP_FUNCTIONS(TWINKLE_DECLARE_OP_FUNCTION)
//   #undef TWINKLE_DECLARE_OP_FUNCTION
//   }
//
// Used by the CPU reference set (src/kernels/cpu/reference/reference.h) and the CUDA set
// (src/kernels/cuda/ops_cuda.h). The signatures are those of the function pointers of ops.h (each
// entry names its op struct and member); the semantics, shapes, dtypes and sources are documented
// there. Pointers are host pointers for the CPU sets and device pointers for CUDA.
#pragma once
#include <cstdint>

#include "twinkle/kernels/ops.h"

// clang-format off
#define TWINKLE_KERNEL_OP_FUNCTIONS(X)                                                                                 \
  /* EmbeddingOp::forward / backward */                                                                                \
  X(void, embedding_forward, (const float* table, const int32_t* ids, float* out, int64_t T, int64_t H,               \
                              int64_t vstart, int64_t Vl))                                                             \
  X(void, embedding_backward, (const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H,            \
                               int64_t vstart, int64_t Vl))                                                            \
  /* RmsNormOp, AddRmsNormOp */                                                                                        \
  X(void, rmsnorm_forward, (const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim,          \
                            float eps))                                                                                \
  X(void, rmsnorm_backward, (const float* x, const float* w, const float* rstd, const float* dy, float* dx,           \
                             float* dw, int64_t rows, int64_t dim))                                                    \
  X(void, add_rmsnorm_forward, (const float* x, const float* r, float* h, const float* w, float* y, float* rstd,      \
                                int64_t rows, int64_t dim, float eps))                                                 \
  X(void, add_rmsnorm_backward, (const float* h, const float* w, const float* rstd, const float* dy,                  \
                                 const float* dres, float* dh, float* dw, int64_t rows, int64_t dim))                  \
  /* RopeOp, QkNormRopeOp */                                                                                           \
  X(void, rope_forward, (float* x, const int32_t* pos, const ::twinkle::kernels::RopeTable& t, int64_t tokens,       \
                         int64_t heads, int64_t head_dim))                                                             \
  X(void, rope_backward, (float* dx, const int32_t* pos, const ::twinkle::kernels::RopeTable& t, int64_t tokens,     \
                          int64_t heads, int64_t head_dim))                                                            \
  X(void, qk_norm_rope_forward, (const float* x, const float* w, float* y, float* rstd, const int32_t* pos,          \
                                 const ::twinkle::kernels::RopeTable& t, int64_t tokens, int64_t heads,               \
                                 int64_t head_dim, float eps))                                                         \
  X(void, qk_norm_rope_backward, (const float* x, const float* w, const float* rstd, const int32_t* pos,             \
                                  const ::twinkle::kernels::RopeTable& t, const float* dy, float* dx, float* dw,      \
                                  int64_t tokens, int64_t heads, int64_t head_dim))                                    \
  /* SwigluOp */                                                                                                       \
  X(void, swiglu_forward, (const float* gate, const float* up, float* h, int64_t n))                                   \
  X(void, swiglu_backward, (const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n)) \
  /* LinearOp, GroupedLinearOp, GateUpSwigluOp */                                                                      \
  X(void, linear_forward, (const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K,                 \
                           bool accumulate))                                                                           \
  X(void, linear_backward, (const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M,         \
                            int64_t N, int64_t K, bool accumulate_dx))                                                 \
  X(void, grouped_linear_forward, (const float* X, const float* W, int64_t w_stride, const int64_t* counts,          \
                                   int64_t E, float* Y, int64_t N, int64_t K, bool accumulate))                        \
  X(void, grouped_linear_backward, (const float* X, const float* W, int64_t w_stride, const int64_t* counts,         \
                                    int64_t E, const float* dY, float* dX, float* dW, int64_t N, int64_t K,            \
                                    bool accumulate_dx))                                                               \
  X(void, gate_up_swiglu_forward, (const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I,      \
                                   int64_t H))                                                                         \
  X(void, gate_up_swiglu_backward, (const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,   \
                                    float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx))      \
  /* AttentionOp */                                                                                                    \
  X(void, attention_forward, (const float* q, const float* k, const float* v, float* out, float* lse,                 \
                              const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D,           \
                              float scale, int64_t window))                                                            \
  X(void, attention_backward, (const float* q, const float* k, const float* v, const float* out, const float* lse,    \
                               const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,          \
                               int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window))       \
  /* CrossEntropyOp, LinearCrossEntropyOp */                                                                           \
  X(void, ce_local_max, (const float* logits, int64_t T, int64_t Vl, int64_t valid, float* row_max))                   \
  X(void, ce_local_sumexp_target, (const float* logits, const int32_t* labels, const float* global_max, int64_t T,    \
                                   int64_t Vl, int64_t valid, int64_t vstart, float* sum_exp, float* target_logit))    \
  X(void, ce_backward, (const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl,          \
                        int64_t valid, int64_t vstart, const float* row_scale, float* dlogits))                        \
  X(double, cross_entropy_forward, (const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse))     \
  X(double, linear_cross_entropy, (const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V,       \
                                   int64_t H, float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows)) \
  /* AdamwOp, NormsOp, AddOp */                                                                                        \
  X(void, adamw_step, (float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,   \
                       float eps, float weight_decay, int64_t step, float grad_scale))                                                   \
  X(double, sum_squares, (const float* x, int64_t n))                                                                  \
  X(void, scale, (float* x, int64_t n, float s))                                                                       \
  X(void, add_inplace, (float* y, const float* x, int64_t n))                                                          \
  X(void, add, (float* out, const float* a, const float* b, int64_t n))                                               \
  X(void, add_bias_rows, (float* y, const float* b, int64_t rows, int64_t cols))                                      \
  X(void, bias_grad_rows, (const float* dy, float* db, int64_t rows, int64_t cols))                                   \
  /* LoraOp */                                                                                                         \
  X(void, lora_dropout_mask, (const uint64_t* token_key, int64_t T, uint64_t seed, uint64_t module_key,             \
                              int64_t feature0, int64_t in_l, uint64_t threshold, uint8_t* m))                         \
  X(void, lora_dropout_apply, (const float* x, const uint8_t* m, float keep_scale, float* xd, int64_t n))            \
  X(void, lora_dropout_backward, (const float* g, const uint8_t* m, float keep_scale, float* dx, int64_t n))         \
  X(void, lora_forward, (const float* x, const float* A, const float* B, float* h, float* y, int64_t T, int64_t in, \
                         int64_t out, int64_t r, float scaling))                                                       \
  X(void, lora_backward, (const float* x, const float* A, const float* B, const float* dy, float* h, float* dh,     \
                          float* dx, bool accumulate_dx, float* dA, float* dB, int64_t T, int64_t in, int64_t out,     \
                          int64_t r, float scaling))                                                            \
  /* MoeRouterOp */                                                                                                    \
  X(void, moe_router_forward, (const float* logits, float* probs, int32_t* topk_idx, float* topk_w, int64_t T,      \
                               int64_t E, int64_t k, bool norm_topk_prob))                                             \
  X(void, moe_router_backward, (const float* probs, const int32_t* topk_idx, const float* topk_w,                   \
                                const float* dtopk_w, const float* dprobs, const float* dlogits_extra, float* dlogits,  \
                                int64_t T, int64_t E, int64_t k, bool norm_topk_prob))                                 \
  /* MoePermuteOp */                                                                                                   \
  X(void, moe_sort_by_expert, (const int32_t* topk_idx, int64_t T, int64_t k, int64_t E, int64_t* counts,          \
                               int32_t* row_of_slot, int32_t* slot_of_row))                                            \
  X(void, moe_permute_forward, (const float* x, const int32_t* slot_of_row, float* out, int64_t rows, int64_t k,    \
                                int64_t H))                                                                            \
  X(void, moe_permute_backward, (const float* dout, const int32_t* row_of_slot, float* dx, int64_t T, int64_t k,    \
                                 int64_t H, bool accumulate))                                                          \
  X(void, moe_unpermute_forward, (const float* y, const int32_t* row_of_slot, const float* topk_w, float* out,      \
                                  int64_t T, int64_t k, int64_t H))                                                    \
  X(void, moe_unpermute_backward, (const float* y, const int32_t* row_of_slot, const float* topk_w,                 \
                                   const float* dout, float* dy, float* dtopk_w, int64_t T, int64_t k, int64_t H))     \
  X(void, moe_permute_keys, (const uint64_t* key, const int32_t* slot_of_row, uint64_t* out, int64_t rows,         \
                             int64_t k))                                                                               \
  /* MoeRouterLossOp */                                                                                                \
  X(int64_t, moe_routing_stats, (const float* probs, const int32_t* topk_idx, const uint8_t* token_mask, int64_t T, \
                                 int64_t E, int64_t k, double* prob_sum, int64_t* counts))                             \
  X(void, moe_aux_loss_backward, (const int64_t* counts, const uint8_t* token_mask, int64_t T, int64_t E,           \
                                  double coeff_scale, float* dprobs))                                                  \
  X(double, moe_z_loss_forward, (const float* logits, const uint8_t* token_mask, int64_t T, int64_t E, float* lse)) \
  X(void, moe_z_loss_backward, (const float* probs, const float* lse, const uint8_t* token_mask, int64_t T,         \
                                int64_t E, double scale, float* dlogits))                                              \
  /* AttentionBlockOp */                                                                                               \
  X(void, attention_block_forward, (const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq,         \
                                    const float* k, const float* v, const int32_t* k_seg, const int32_t* k_pos,        \
                                    int64_t Tk, float* out, float* lse, int64_t Hq, int64_t Hkv, int64_t D,            \
                                    float scale, int64_t window))                                                      \
  X(void, attention_block_backward, (const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq,        \
                                     const float* k, const float* v, const int32_t* k_seg, const int32_t* k_pos,       \
                                     int64_t Tk, const float* lse, const float* delta, const float* dout, float* dq,   \
                                     float* dk, float* dv, int64_t Hq, int64_t Hkv, int64_t D, float scale,            \
                                     int64_t window))                                                                  \
  X(void, attention_lse_merge, (float* out, float* lse, const float* out_b, const float* lse_b, int64_t T,          \
                                int64_t H, int64_t D))                                                                 \
  X(void, attention_softmax_delta, (const float* out, const float* dout, float* delta, int64_t T, int64_t H,        \
                                    int64_t D))                                                                        \
  /* CausalConv1dOp */                                                                                                 \
  X(void, causal_conv1d_forward, (const float* x, const float* w, const float* bias, float* y,                      \
                                  const int32_t* cu_seqlens, int64_t n_seqs, int64_t C, int64_t K, bool silu))         \
  X(void, causal_conv1d_backward, (const float* x, const float* w, const float* bias, const float* dy, float* dx,   \
                                   float* dw, float* dbias, const int32_t* cu_seqlens, int64_t n_seqs, int64_t C,      \
                                   int64_t K, bool silu))                                                              \
  /* GatedDeltaRuleOp */                                                                                               \
  X(void, gated_delta_rule_forward, (const float* q, const float* k, const float* v, const float* g,                \
                                     const float* beta, const float* h0, float* out, float* ht,                        \
                                     const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hk, int64_t Hv, int64_t Dk,    \
                                     int64_t Dv, float scale, bool qk_l2norm))                                         \
  X(void, gated_delta_rule_backward, (const float* q, const float* k, const float* v, const float* g,               \
                                      const float* beta, const float* h0, const float* dout, const float* dht,         \
                                      float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dh0,            \
                                      const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hk, int64_t Hv, int64_t Dk,   \
                                      int64_t Dv, float scale, bool qk_l2norm))                                        \
  X(void, gdn_gates_forward, (const float* a, const float* b, const float* A_log, const float* dt_bias, float* g,   \
                              float* beta, int64_t T, int64_t H))                                                      \
  X(void, gdn_gates_backward, (const float* a, const float* b, const float* A_log, const float* dt_bias,            \
                               const float* dg, const float* dbeta, float* da, float* db, float* dA_log,               \
                               float* ddt_bias, int64_t T, int64_t H))                                                 \
  /* GatedRmsNormOp */                                                                                                 \
  X(void, gated_rmsnorm_forward, (const float* x, const float* z, const float* w, float* y, float* rstd,            \
                                  int64_t rows, int64_t dim, float eps))                                               \
  X(void, gated_rmsnorm_backward, (const float* x, const float* z, const float* w, const float* rstd,               \
                                   const float* dy, float* dx, float* dz, float* dw, int64_t rows, int64_t dim))
// clang-format on
