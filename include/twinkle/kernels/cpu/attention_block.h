// twinkle/kernels/cpu/attention_block.h — attention of one query block against one key block with
// explicit token coordinates, returning the log-sum-exp: the per-step kernel of ring attention
// (context parallelism, parallel/ring_attention.h), where a rank's queries and the key/value block it
// currently holds are arbitrary pieces of the global token axis.
//
// Coordinates: every query and key token carries a segment id `seg` and a position `pos` on one
// global token axis (the padded micro-batch; CpShard::segment / global_index). Query i sees key j iff
//   seg_q[i] == seg_k[j]  and  pos_k[j] <= pos_q[i]
// — the block-diagonal causal mask of packed sequences (cu_seqlens) expressed with global indices,
// never the local ones. With a sliding window (window > 0) also pos_q[i] - pos_k[j] < window: the
// `window` keys up to and including the query, as flash_attention_forward's window (transformers
// masking_utils sliding_window_overlay) — positions of one segment are consecutive on the axis, so
// the difference of global positions is the difference of positions inside the segment. Tiles whose coordinates rule out every pair are skipped, tiles where every
// pair is visible skip the mask.
//
// Math (FlashAttention-2, Dao 2023; ring attention merge: Liu et al. 2023, "Ring Attention with
// Blockwise Transformers"; Megatron/TE context_parallel.py): for one block
//   S = scale * q k^T + mask,  out = softmax(S) v,  lse = logsumexp(S)  (natural log)
// GQA as HF repeat_kv: query head h uses kv head h / (Hq/Hkv). A query row that sees no key of the
// block gets out = 0 and lse = -inf, so attention_lse_merge treats it as an empty partial result.
// Layout: q/out [Tq, Hq, D], k/v [Tk, Hkv, D], lse [Tq, Hq], f32 row-major, token-major.
// Accumulation fp32. Parallel with OpenMP: forward over (head, query tile); backward in one pass per
// kv head when there are >= 2 kv heads per thread (or one thread), else in two passes (dq over
// (head, query tile), dk/dv over (kv head, key tile)). No atomics: results are bitwise reproducible
// for a given thread count (the two backward schedules round differently).
// Scratch: grow-only thread_local buffers (K^T and V^T packed per call: 2*Tk*Hkv*D floats).
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Forward of one block: writes out [Tq, Hq, D] and lse [Tq, Hq] (overwritten). window: 0 = plain
/// causal, > 0 = sliding window (see above). Throws twinkle::Error if Hq % Hkv != 0, a size is
/// negative / a head size <= 0, or window < 0.
void attention_block_forward(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                             const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, float* out,
                             float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window = 0);

/// Merges a partial result (out_b, lse_b) into (out, lse), all [T, H(, D)]:
///   lse' = log(exp(lse) + exp(lse_b)),  out' = out * exp(lse - lse') + out_b * exp(lse_b - lse')
/// (the online-softmax rule; an lse of -inf is an empty partial). In place on out / lse.
void attention_lse_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t T, int64_t H,
                         int64_t D);

/// delta[t, h] = sum_d dout[t, h, d] * out[t, h, d] (FlashAttention-2 backward's D_i), [T, H].
void attention_softmax_delta(const float* out, const float* dout, float* delta, int64_t T, int64_t H, int64_t D);

/// Backward of one block given the FINAL lse and delta of the queries (after all blocks were merged):
/// P = exp(S - lse), dV += P^T dout, dP = dout V^T, dS = P * (dP - delta), dQ += scale * dS K,
/// dK += scale * dS^T Q. ACCUMULATES into dq [Tq, Hq, D], dk and dv [Tk, Hkv, D] (dk/dv summed over
/// the query heads of a group). Same errors as the forward.
void attention_block_backward(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq, const float* k,
                              const float* v, const int32_t* k_seg, const int32_t* k_pos, int64_t Tk, const float* lse,
                              const float* delta, const float* dout, float* dq, float* dk, float* dv, int64_t Hq,
                              int64_t Hkv, int64_t D, float scale, int64_t window = 0);

/// The "bf16" kernel set's block backward (mixed precision): attention_block_backward's contract with the
/// operands of its five tile products rounded to bf16 (round to nearest even) at the points of
/// flash_attention_backward_bf16 (twinkle/kernels/cpu/attention_bf16.h): q, k, v and dout as read, P after
/// its fp32 exp and dS after its fp32 math (dS is formed from the fp32 P); products and sums fp32. So a
/// context-parallel run (ring attention over blocks) rounds where a one-process bf16 run does. Same errors.
void attention_block_backward_bf16(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq,
                                   const float* k, const float* v, const int32_t* k_seg, const int32_t* k_pos,
                                   int64_t Tk, const float* lse, const float* delta, const float* dout, float* dq,
                                   float* dk, float* dv, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                   int64_t window = 0);

}  // namespace twinkle::kernels::cpu
