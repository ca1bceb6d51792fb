// twinkle/kernels/cpu/attention_bf16.h — the mixed-precision ("bf16" kernel set) flash-attention
// backward: the contract, layouts, masking (causal per segment, sliding window), errors and work
// schedule of flash_attention_backward (twinkle/kernels/cpu/attention.h), with the five tile
// products on bf16 operands and fp32 accumulation (vdpbf16ps):
//   S = bf16(Q) bf16(K)^T and dP = bf16(dO) bf16(V)^T (bf16 x bf16 -> fp32); P = exp(S*scale - lse)
//   and dS = P (dP - delta) in fp32 (delta = rowsum(dO * O) in fp32); dV += bf16(P)^T bf16(dO),
//   dK += bf16(dS)^T bf16(Q), dQ += bf16(dS) bf16(K), accumulated in fp32.
// Inputs and outputs stay fp32 tensors; every rounding is round-to-nearest-even. Semantics:
// FlashAttention-2's bf16 backward (Dao 2023): bf16 Q, K, V, dO, P and dS in the matmuls, fp32
// softmax statistics and accumulators; PyTorch autocast runs the attention matmuls in bf16 too.
// The forward of the bf16 set stays the fp32 flash_attention_forward: a bf16 forward (same tile
// products) was measured to drift the 30-step loss curve 5.0-5.9e-3 from fp32, further than PyTorch
// autocast's 3.1e-3 (bf16_vs_fp32_vs_torch_autocast), while the bf16 backward keeps it at ~2e-3.
// Deviation from the fp32 backward: ~2^-9 relative per rounded operand (kernel_conformance's bf16 rows).
// Instructions: AVX512-BF16 when the build has it (-march=native on such a CPU); otherwise the same
// products are widened to fp32 and summed in scalar code (same numbers up to summation order, slow:
// flash_attention_bf16_native() says which). Memory: packed operands in grow-only thread_local
// scratch of the calling thread, ~(6*Hq + 6*Hkv) * Tp * Dp bytes (Tp = tokens with each segment
// rounded up to 64, Dp = D rounded up to 16), plus the fp32 dq accumulator as in the fp32 kernel.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// AttentionOp::backward contract (dq, dk, dv OVERWRITTEN; dk/dv sum over the query heads of a group),
/// bf16 tile products; the schedule is AttnBwdSchedule::Auto's. Throws twinkle::Error as
/// flash_attention_backward.
void flash_attention_backward_bf16(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                   const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                                   int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                   int64_t window = 0);

/// Whether the tile products run on vdpbf16ps (a build with AVX512-BF16) rather than the scalar loop.
bool flash_attention_bf16_native();

}  // namespace twinkle::kernels::cpu
