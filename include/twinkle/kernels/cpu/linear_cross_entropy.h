// twinkle/kernels/cpu/linear_cross_entropy.h — lm head GEMM fused with token cross entropy over chunks
// of rows, so the [T, V] logits never exist at once (Liger-Kernel's fused_linear_cross_entropy idea;
// semantics torch.nn.functional.cross_entropy(X W^T, labels, ignore_index=-100, reduction="sum")).
// Single vocab shard; the vocab-parallel path composes linear + cross_entropy.h pieces instead.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Vocab blocks: the chunk's logits are computed, reduced and differentiated 512 columns at a time
/// (each block a [rows, 512] matrix of its own), spread over the OpenMP threads; results are
/// bit-identical for every thread count.
/// X [T, H], W [V, H], labels [T] (ids in [0, V) or -100). Returns the loss SUM (double, rows in order);
/// lse [T] gets each row's logsumexp. When dX is non-null, also the gradient of grad_scale * sum:
/// dX [T, H] OVERWRITTEN and dW [V, H] ACCUMULATED (dW may be null). Chunks of `chunk_rows` rows
/// (<= 0: 1024) reuse grow-only thread_local buffers (linear_cross_entropy_scratch_bytes). Throws
/// twinkle::Error naming the row of a label outside [0, V) that is not -100.
double linear_cross_entropy(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H,
                            float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows);

/// Bytes of the grow-only thread_local buffers linear_cross_entropy keeps after a call with these sizes
/// run on `threads` OpenMP threads (`backward`: with dX; `with_dw`: with dW too): the [chunk, V] logits,
/// per-block row references and sums, each row's label logit and starting reference, and with `backward` the dX partial sums and one [chunk, 512] dlogits
/// block per thread it uses, with `with_dw` also the chunk's X^T and one [min(H, 256), 512] dW^T tile
/// per thread.
int64_t linear_cross_entropy_scratch_bytes(int64_t T, int64_t V, int64_t H, int64_t chunk_rows, bool backward,
                                           bool with_dw, int threads);

}  // namespace twinkle::kernels::cpu
