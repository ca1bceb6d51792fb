// twinkle/kernels/cpu/gemm_bf16.h — bf16 GEMMs with fp32 accumulation through oneDNN's matmul primitive
// (the mixed-precision path, Qwen3ModelOptions::mixed_precision = "bf16").
//
// Semantics: every input element is rounded to bf16 with round-to-nearest-even (as PyTorch's
// tensor.to(torch.bfloat16) and Megatron's Float16Module cast of the fp32 master weights), the
// products are summed in fp32 and the result is written in fp32 (oneDNN bf16 x bf16 -> f32 matmul,
// as cuBLAS's CUBLAS_COMPUTE_32F with bf16 inputs). The output is NOT rounded to bf16: it feeds the
// fp32 RMSNorm statistics, softmax and cross entropy directly (more accurate than PyTorch's autocast,
// which rounds the linear's output to bf16).
//
// Instructions: oneDNN picks its kernel from the CPU (brgemm avx512_core_bf16 / avx512_core_amx).
// On a CPU without bf16 instructions (oneDNN's effective ISA below avx512_core_bf16, also when
// DNNL_MAX_CPU_ISA caps it) the same numbers are produced by rounding the inputs to bf16 values held
// in fp32 and calling dnnl_sgemm (exact: a product of two bf16 values is exact in fp32; only the
// summation order differs); the model says so once per process (Qwen3Model's constructor). Threads: OpenMP (OMP_NUM_THREADS). Scratch: thread-local grow-only
// buffers (no allocation per call once the largest shape was seen).
#pragma once
#include <cstdint>
#include <string>

namespace twinkle::kernels::cpu {

/// Rounds n fp32 values to bf16 bit patterns (round-to-nearest-even; NaN stays a quiet NaN; the same
/// bits as twinkle::f32_to_bf16, core/dtype.h, except that a build with AVX512-BF16 (vcvtneps2bf16)
/// turns fp32 denormals, |x| < 2^-126, into signed zeros). OpenMP-parallel. src and dst must not overlap.
void f32_to_bf16_rne(const float* src, uint16_t* dst, int64_t n);

/// oneDNN's effective CPU ISA (dnnl_get_effective_cpu_isa) as a name: "avx512_core_amx",
/// "avx512_core_bf16", "avx512_core_vnni", "avx512_core", "avx2", ... (DNNL_MAX_CPU_ISA caps it).
std::string dnnl_isa_name();
/// Whether the bf16 GEMMs run on bf16 instructions (effective ISA >= avx512_core_bf16); else the
/// rounded-fp32 fallback described above is used (the caller logs that once: Qwen3Model does).
bool bf16_gemm_native();

/// The thread-local grow-only bf16 scratch the linear functions below use (Input: bf16(X), Weight:
/// bf16(W), Grad: bf16(dY)), for fused callers that convert their own operands; at least n elements,
/// valid until the next call of a function of this header on the same thread with the same slot.
enum class ScratchSlot { Input, Weight, Grad };
uint16_t* bf16_scratch(ScratchSlot slot, int64_t n);

/// Row-major C[M,N] = op(A)[M,K] * op(B)[K,N] + beta * C with A, B bf16 bit patterns, C fp32;
/// op(X) = X^T when the trans flag is set; lda/ldb/ldc are row strides (elements) as stored; beta is
/// 0 (C overwritten, may hold garbage) or 1 (accumulate). Throws twinkle::Error on another beta or if
/// oneDNN fails.
void bgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
           const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// Mixed-precision linear forward: Y[M,N] (+)= bf16(X)[M,K] * bf16(W)[N,K]^T, fp32 accumulation and
/// output (LinearOp::forward contract, twinkle/kernels/ops.h; PyTorch autocast's F.linear with an fp32
/// result). X, W, Y fp32.
void linear_forward_bf16(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K,
                         bool accumulate = false);

/// Its backward (LinearOp::backward contract): dX[M,K] (+)= bf16(dY) bf16(W) (overwritten unless
/// accumulate_dx; skipped when null) and dW[N,K] += bf16(dY)^T bf16(X) accumulated in fp32 into the fp32
/// gradient (Megatron's main_grad / grad_reduce_in_fp32; skipped when null).
void linear_backward_bf16(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M,
                          int64_t N, int64_t K, bool accumulate_dx = false);

/// The same with W already rounded (Wb [N,K] bf16 bits): for callers that reuse one weight over chunks.
void linear_forward_bf16w(const float* X, const uint16_t* Wb, float* Y, int64_t M, int64_t N, int64_t K,
                          bool accumulate = false);
void linear_backward_bf16w(const float* X, const uint16_t* Wb, const float* dY, float* dX, float* dW, int64_t M,
                           int64_t N, int64_t K, bool accumulate_dx = false);

}  // namespace twinkle::kernels::cpu
