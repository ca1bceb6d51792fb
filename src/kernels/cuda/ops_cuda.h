// Internal to src/kernels/cuda: the host entry points of the CUDA ops (signatures of ops.h, device
// pointers) and the kernel launchers shared between files.
#pragma once
#include <cstdint>

#include "twinkle/kernels/ops.h"

namespace twinkle::cuda::ops {

using kernels::RopeTable;

// elementwise.cu
void add_inplace(float* y, const float* x, int64_t n);
void add(float* out, const float* a, const float* b, int64_t n);
double sum_squares(const float* x, int64_t n);
void scale(float* x, int64_t n, float s);
void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step);
void swiglu_forward(const float* gate, const float* up, float* h, int64_t n);
void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n);
/// Strided rows (gate / up halves of a fused [T, 2I] buffer), as cpu::swiglu_forward_rows.
void swiglu_forward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* h, int64_t ld_h,
                         int64_t rows, int64_t cols);
void swiglu_backward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, const float* dh,
                          int64_t ld_dh, float* dgate, int64_t ld_dgate, float* dup, int64_t ld_dup, int64_t rows,
                          int64_t cols);
void embedding_forward(const float* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t vstart,
                       int64_t Vl);
void embedding_backward(const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H, int64_t vstart,
                        int64_t Vl);

// norm_rope.cu
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps);
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                      int64_t rows, int64_t dim);
void add_rmsnorm_forward(const float* x, const float* r, float* h, const float* w, float* y, float* rstd,
                         int64_t rows, int64_t dim, float eps);
void add_rmsnorm_backward(const float* h, const float* w, const float* rstd, const float* dy, const float* dres,
                          float* dh, float* dw, int64_t rows, int64_t dim);
void rope_forward(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim);
void rope_backward(float* dx, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads,
                   int64_t head_dim);
void qk_norm_rope_forward(const float* x, const float* w, float* y, float* rstd, const int32_t* pos,
                          const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim, float eps);
void qk_norm_rope_backward(const float* x, const float* w, const float* rstd, const int32_t* pos, const RopeTable& t,
                           const float* dy, float* dx, float* dw, int64_t tokens, int64_t heads, int64_t head_dim);

// cross_entropy.cu
void ce_local_max(const float* logits, int64_t T, int64_t Vl, int64_t valid, float* row_max);
void ce_local_sumexp_target(const float* logits, const int32_t* labels, const float* global_max, int64_t T,
                            int64_t Vl, int64_t valid, int64_t vstart, float* sum_exp, float* target_logit);
void ce_backward(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl, int64_t valid,
                 int64_t vstart, const float* row_scale, float* dlogits);
double cross_entropy_forward(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse);
/// Throws twinkle::Error naming `fn`, the row and the label of the first label outside [0, V) that is not
/// -100 (synchronizes).
void check_labels(const int32_t* labels, int64_t T, int64_t V, const char* fn);
/// Per-row loss lse - logit[label] (0 for -100 rows) into row_loss [T] (double) and lse [T]; no checks,
/// no synchronization (labels validated before). ce_backward with a constant row scale `scale`
/// (row_scale == nullptr) is ce_backward_const.
void ce_forward_rows(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse, double* row_loss);
void ce_backward_const(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t V,
                       float scale, float* dlogits);

// attention.cu
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const int32_t* cu_seqlens, int64_t n_seqs, int64_t Hq, int64_t Hkv, int64_t D, float scale,
                       int64_t window);
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const int32_t* cu_seqlens, int64_t n_seqs,
                        int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window);

// gemm.cpp (cuBLAS)
void linear_forward(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate);
void linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                     int64_t K, bool accumulate_dx);
void grouped_linear_forward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                            float* Y, int64_t N, int64_t K, bool accumulate);
void grouped_linear_backward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                             const float* dY, float* dX, float* dW, int64_t N, int64_t K, bool accumulate_dx);
void gate_up_swiglu_forward(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I, int64_t H);
void gate_up_swiglu_backward(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                             float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx);
double linear_cross_entropy(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H,
                            float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows);

}  // namespace twinkle::cuda::ops
