// twinkle/kernels/cpu/attention.h — causal grouped-query attention over packed variable-length
// sequences, FlashAttention-2 style (Dao 2023, "FlashAttention-2: Faster Attention with Better
// Parallelism and Work Partitioning"): tiled over keys with an online softmax, never materializing a
// [seq, seq] matrix per head; the row log-sum-exp is saved for the backward pass.
//
// Layout (token-major, the natural output of q_proj/k_proj/v_proj):
//   q [T, Hq, D], k and v [T, Hkv, D], out [T, Hq, D], lse [T, Hq], all f32 row-major,
//   T = cu_seqlens[n_seqs]. Query head h uses kv head h / (Hq/Hkv) (HF repeat_kv).
// Sequences are segments [cu_seqlens[i], cu_seqlens[i+1]) of the T axis, i < n_seqs
// (cu_seqlens[0] is normally 0; rows of tokens before it get zeros in every output); a query at t attends to keys s with
// seg_start <= s <= t (causal inside its own segment only). Math equals
//   out = softmax(scale * q k^T + mask) v  (torch.nn.functional.scaled_dot_product_attention with a
//   block-diagonal causal mask), lse = logsumexp(scale * q k^T + mask) (natural log).
// scale is normally 1/sqrt(D). Accumulation is fp32.
// Sliding window (window > 0): a query at segment offset t sees only keys s with
// max(seg_start, t-window+1) <= s <= t, i.e. `window` keys including itself (transformers
// masking_utils sliding_window_overlay: kv_idx > q_idx - sliding_window); key tiles wholly
// outside every query's window are skipped in both passes. window = 0: plain causal.
// Memory: operands are packed into grow-only thread_local scratch kept between calls (no per-call
// page faults): forward ~2*Hkv*T*Dp floats, backward ~(3*Hq + 3*Hkv)*T*Dp floats, Dp = D rounded up
// to 16, held by the calling thread until it exits (each calling thread has its own scratch, so concurrent
// calls from different threads are safe).
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Forward. Throws twinkle::Error if Hq % Hkv != 0, a dimension is <= 0, cu_seqlens is decreasing,
/// or window < 0. Parallel over (segment, head, query tile) with OpenMP.
void flash_attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                             const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D,
                             float scale, int64_t window = 0);

/// Backward (FlashAttention-2 algorithm 2): given the forward's q, k, v, out, lse and dout [T, Hq, D],
/// writes dq [T, Hq, D], dk and dv [T, Hkv, D] (OVERWRITTEN; dk/dv sum over the query heads of a group).
/// Each task owns the dk/dv rows of one (segment, kv head, range of key tiles) and loops over the query
/// tiles and query heads that see them; its dq contribution per query tile is added to a shared fp32
/// accumulator under a per-tile lock (no atomics in the inner loops). Same errors as the forward.
/// Schedule = AttnBwdSchedule::Auto (see below).
void flash_attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                              int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window = 0);

/// Bytes of the grow-only thread_local operand buffers flash_attention_forward (and, with `backward`,
/// flash_attention_backward) keep on the calling thread after calls over T tokens with Hq / Hkv heads
/// of dim D: the forward's K^T [Hkv][D][ldT] and V rows [Hkv][T][Dp]; the backward's Q, dO [Hq][T][Dp],
/// K rows, K^T and V^T (one allocation, twice the forward's K^T), the fp32 dq accumulator [T][Hq][Dp]
/// and the delta / lse rows [2][T][Hq] (Dp = D rounded up to 16, ldT = T rounded up to 16, + 16; each
/// buffer 64-byte rounded). The per-thread 64-token tiles (~tens of KB a thread) are not counted.
/// What `twinkle plan` adds for attention (train/plan.cpp).
int64_t flash_attention_scratch_bytes(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, bool backward);

/// How flash_attention_backward splits its work.
///  PerKvHead: one task per (segment, kv head) walking all its key tiles in order: bitwise deterministic
///             (independent of the thread count), but only n_seqs*Hkv-way parallel.
///  PerKeyTile: one task per (segment, kv head, key tile): full parallelism; dq summation order then
///             depends on thread timing (results differ in the last bits between runs, like FA2's atomics).
///  Auto: PerKvHead when there is one thread or at least 2 tasks per thread with no task above
///        half a thread's share of the work, else PerKeyTile.
enum class AttnBwdSchedule { Auto, PerKvHead, PerKeyTile };

/// flash_attention_backward with an explicit schedule (tests, benchmarks, reproducible runs).
void flash_attention_backward_ex(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                 const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                                 int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                 AttnBwdSchedule schedule, int64_t window = 0);

}  // namespace twinkle::kernels::cpu
