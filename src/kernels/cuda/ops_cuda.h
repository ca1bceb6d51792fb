// Internal to src/kernels/cuda: the host entry points of the CUDA ops (signatures of ops.h, device
// pointers) and the kernel launchers shared between files.
#pragma once
#include <cstdint>
#include <vector>

#include "twinkle/kernels/op_functions.h"

namespace twinkle::cuda::ops {

using kernels::RopeTable;

// Every op's entry points (twinkle/kernels/op_functions.h), defined in elementwise.cu (add,
// norms, adamw, swiglu, embedding), norm_rope.cu (rmsnorm, add_rmsnorm, rope, qk_norm_rope),
// cross_entropy.cu, attention.cu, attention_block.cu, lora.cu, moe.cu (moe_router, moe_permute,
// moe_router_loss) and gemm.cpp
// (cuBLAS: linear, grouped_linear, gate_up_swiglu, linear_cross_entropy).
#define TWINKLE_DECLARE_OP_FUNCTION(ret, name, params) ret name params;
TWINKLE_KERNEL_OP_FUNCTIONS(TWINKLE_DECLARE_OP_FUNCTION)
#undef TWINKLE_DECLARE_OP_FUNCTION

// The "bf16" set's implementations (twinkle/kernels/cuda/kernels.h bf16_kernels; gemm_bf16.cpp: every GEMM on
// bf16-rounded inputs with fp32 sums; attention.cu: the backward's tile products on bf16-rounded operands).
// Signatures as the fp32 ops they replace.
void linear_forward_bf16(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate);
void linear_backward_bf16(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M,
                          int64_t N, int64_t K, bool accumulate_dx);
void grouped_linear_forward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                                 float* Y, int64_t N, int64_t K, bool accumulate);
void grouped_linear_backward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts,
                                  int64_t E, const float* dY, float* dX, float* dW, int64_t N, int64_t K,
                                  bool accumulate_dx);
void gate_up_swiglu_forward_bf16(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I,
                                 int64_t H);
void gate_up_swiglu_backward_bf16(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                                  float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx);
double linear_cross_entropy_bf16(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V,
                                 int64_t H, float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows);
void attention_backward_bf16(const float* q, const float* k, const float* v, const float* out, const float* lse,
                             const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens,
                             int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window);
void attention_block_backward_bf16(const float* q, const int32_t* q_seg, const int32_t* q_pos, int64_t Tq,
                                   const float* k, const float* v, const int32_t* k_seg, const int32_t* k_pos,
                                   int64_t Tk, const float* lse, const float* delta, const float* dout, float* dq,
                                   float* dk, float* dv, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                                   int64_t window);

// CUDA-only helpers shared between files.
// gemm.cpp
/// Row-major C [M, N] = alpha * op(A) op(B) + beta * C through cublasSgemm (fp32, no TF32); op(A) [M, K],
/// op(B) [K, N]; lda / ldb / ldc row-major leading dimensions; beta 0 or 1 where K is 0.
void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
/// The lm head's loss: the device row losses [T] (double) copied to the host and summed in row order, as
/// the CPU kernel (synchronizes).
double sum_row_losses(const double* row_loss, int64_t T);
// grouped_gemm_bf16.cu
/// One row-major product of grouped_gemm_bf16: C [m, n] (+)= op(A) [m, k] op(B) [k, n], its matrices at these
/// element offsets from the call's A, B, C (leading dimensions shared by the call).
struct GroupedGemmProblem {
  int64_t a_off = 0, b_off = 0, c_off = 0;
  int64_t m = 0, n = 0, k = 0;
};
/// Every problem in one kernel launch (tensor cores: bf16 A / B as bit patterns, fp32 sums, fp32 C); op(X) is
/// X or, with ta / tb, X^T (A then [k, m], B [n, k]). accumulate: C += the product, else C = the product (C not
/// read). Problems with m or n 0 are skipped, k 0 adds nothing (refused without accumulate). Queued on the
/// backend's stream (the problem table is uploaded there). Throws twinkle::Error prefixed by `what` for a
/// negative or over-32-bit dimension.
void grouped_gemm_bf16(bool ta, bool tb, const std::vector<GroupedGemmProblem>& problems, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc,
                       const char* what);

// elementwise.cu
/// Strided rows (gate / up halves of a fused [T, 2I] buffer), as cpu::swiglu_forward_rows.
void swiglu_forward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* h, int64_t ld_h,
                         int64_t rows, int64_t cols);
void swiglu_backward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, const float* dh,
                          int64_t ld_dh, float* dgate, int64_t ld_dgate, float* dup, int64_t ld_dup, int64_t rows,
                          int64_t cols);
// cross_entropy.cu
/// Throws twinkle::Error naming `fn`, the row and the label of the first label outside [0, V) that is not
/// -100 (synchronizes).
void check_labels(const int32_t* labels, int64_t T, int64_t V, const char* fn);
/// Per-row loss lse - logit[label] (0 for -100 rows) into row_loss [T] (double) and lse [T]; no checks,
/// no synchronization (labels validated before). ce_backward with a constant row scale `scale`
/// (row_scale == nullptr) is ce_backward_const.
void ce_forward_rows(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse, double* row_loss);
void ce_backward_const(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t V,
                       float scale, float* dlogits);

}  // namespace twinkle::cuda::ops
