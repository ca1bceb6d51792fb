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
/// f32_to_bf16_rne (the same bits) on the calling thread, opening no OpenMP region: for callers that
/// are already inside a parallel loop (with OMP_MAX_ACTIVE_LEVELS > 1 an inner region would start a
/// team per outer thread and oversubscribe the cores).
void f32_to_bf16_rne_serial(const float* src, uint16_t* dst, int64_t n);

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

/// The B operand in oneDNN's VNNI-blocked bf16 layout (BA16a64b2a: 64-column x 32-row blocks, column
/// blocks outermost, each row pair (k, k+1) interleaved per column), which the brgemm bf16 kernels read
/// directly; from a plain B they first copy it into that layout themselves (5-10 % of a training
/// GEMM). Used where the bf16 copy is made anyway: the weight of dX = dY W and the input of dW = dY^T X.
/// packed_b_elems: elements of the packed [K, N] operand (K rounded up to 32, N to 64, padding zero).
int64_t packed_b_elems(int64_t K, int64_t N);
/// Rounds B(k, n) = S[k * ld + n] (k < K, n < N; fp32, row-major with row stride ld) to bf16
/// (round-to-nearest-even, the same bits as f32_to_bf16_rne) into dst[packed_b_elems(K, N)] in that
/// layout. OpenMP-parallel over blocks.
void pack_b_bf16(const float* S, int64_t ld, int64_t K, int64_t N, uint16_t* dst);
/// The same from a transposed source, B(k, n) = S[n * ld + k] (S row-major [N, ld], ld >= K): the
/// forward's B = W^T of a weight W [N, K] in the HF [out, in] layout (ld = K), rounded and blocked in
/// one pass (16x16 dword transposes in registers) instead of a plain bf16 copy that oneDNN then
/// reorders itself on every call. Same bits and zero padding as pack_b_bf16 of the transposed matrix.
void pack_bt_bf16(const float* S, int64_t ld, int64_t K, int64_t N, uint16_t* dst);
/// Whether bgemm_packed_b is available and fast here: native bf16 instructions, a build with
/// AVX512-BF16 intrinsics, and oneDNN taking BA16a64b2a weights on its brgemm kernels (probed once).
bool packed_b_native();
/// Whether oneDNN runs bgemm_packed_b of this shape (A row stride lda, C row stride ldc) on its brgemm
/// kernels; false also when !packed_b_native() or a dimension is 0. oneDNN 2.6 takes packed B with a
/// dense A only (lda == K, or lda == M when transposed): with a strided A (the lm head's logits rows)
/// it falls back to reference loops 100x slower, so callers check before packing.
bool packed_b_fast_for(bool trans_a, int64_t M, int64_t N, int64_t K, int64_t lda, float beta, int64_t ldc);
/// C[M,N] = op(A)[M,K] * B[K,N] + beta * C as bgemm, with B packed by pack_b_bf16 (the same rounded
/// operands; the kernels sum in the same order as on a plain B, bit-identical in our runs). Runs
/// whatever kernel oneDNN picks (see packed_b_fast_for). Throws twinkle::Error when !packed_b_native(),
/// on a beta other than 0 or 1, or if oneDNN fails.
void bgemm_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* Bp,
                    float beta, float* C, int64_t ldc);

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

/// The same with dY already rounded (dYb [M,N] bf16 bits, e.g. written straight into
/// bf16_scratch(ScratchSlot::Grad) by a fused element-wise backward): same results as
/// linear_backward_bf16 on the fp32 dY whose rounding dYb is (dYb may be that Grad scratch).
void linear_backward_bf16_dy(const float* X, const float* W, const uint16_t* dYb, float* dX, float* dW, int64_t M,
                             int64_t N, int64_t K, bool accumulate_dx = false);

/// The same with W already rounded (Wb [N,K] bf16 bits): for callers that reuse one weight over chunks.
void linear_forward_bf16w(const float* X, const uint16_t* Wb, float* Y, int64_t M, int64_t N, int64_t K,
                          bool accumulate = false);
void linear_backward_bf16w(const float* X, const uint16_t* Wb, const float* dY, float* dX, float* dW, int64_t M,
                           int64_t N, int64_t K, bool accumulate_dx = false);

}  // namespace twinkle::kernels::cpu
