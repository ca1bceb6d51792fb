// twinkle/kernels/cpu/moe_permute.h — token permutation for a dropless MoE layer.
//
// Each of T tokens is routed to k experts (topk_idx [T, k]); its k copies ("slots", slot
// s = t*k + j) are grouped by expert into a contiguous [T*k, H] buffer so the experts run as a
// grouped GEMM over contiguous rows, then combined back with the routing weights. The order is
// Megatron-core's permute (megatron/core/transformer/moe/moe_utils.py `permute` on the routing
// map): rows sorted by expert, tokens ascending inside an expert. The combine is transformers'
// Qwen3MoeSparseMoeBlock: out[t] = sum_j topk_w[t, j] * expert_{topk_idx[t, j]}(x[t]).
// Every routed slot is kept (dropless; no capacity factor).
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Builds the permutation. topk_idx [T, k] i32 with entries in [0, E) and distinct per token
/// (else twinkle::Error naming the token). Outputs:
///   counts      [E] i64: rows per expert (sum = T*k)
///   row_of_slot [T*k] i32: row of slot t*k+j in the permuted buffer
///   slot_of_row [T*k] i32: the inverse (slot of each permuted row; its token is slot / k)
/// Rows of expert e are [offset_e, offset_e + counts[e]) with offset_e = sum_{f<e} counts[f].
/// Counting sort, O(T*k + E).
void moe_sort_by_expert(const int32_t* topk_idx, int64_t T, int64_t k, int64_t E, int64_t* counts,
                        int32_t* row_of_slot, int32_t* slot_of_row);

/// out[r, :] = x[slot_of_row[r] / k, :] for r < rows (rows = T*k). x [T, H], out [rows, H] f32.
void moe_permute_forward(const float* x, const int32_t* slot_of_row, float* out, int64_t rows, int64_t k, int64_t H);

/// out[r] = key[slot_of_row[r] / k] for r < rows: a per-token u64 (the LoRA dropout token keys,
/// twinkle/parallel/lora_dropout.h) in the permuted row order.
void moe_permute_keys(const uint64_t* key, const int32_t* slot_of_row, uint64_t* out, int64_t rows, int64_t k);

/// Backward of moe_permute_forward: dx[t, :] = sum_j dout[row_of_slot[t*k+j], :] (a gather per
/// token, no atomics). dx [T, H] OVERWRITTEN, or accumulated into when accumulate.
void moe_permute_backward(const float* dout, const int32_t* row_of_slot, float* dx, int64_t T, int64_t k, int64_t H,
                          bool accumulate = false);

/// The probability-weighted combine: out[t, :] = sum_j topk_w[t, j] * y[row_of_slot[t*k+j], :]
/// (sum over j in order, in float). y [T*k, H], topk_w [T, k], out [T, H] OVERWRITTEN.
void moe_unpermute_forward(const float* y, const int32_t* row_of_slot, const float* topk_w, float* out, int64_t T,
                           int64_t k, int64_t H);

/// Backward of moe_unpermute_forward given dout [T, H]:
///   dy[row_of_slot[t*k+j], :] = topk_w[t, j] * dout[t, :]      (dy [T*k, H] OVERWRITTEN)
///   dtopk_w[t, j] = <dout[t, :], y[row_of_slot[t*k+j], :]>     (dtopk_w [T, k] OVERWRITTEN,
///                                                               dot products in double)
void moe_unpermute_backward(const float* y, const int32_t* row_of_slot, const float* topk_w, const float* dout,
                            float* dy, float* dtopk_w, int64_t T, int64_t k, int64_t H);

}  // namespace twinkle::kernels::cpu
