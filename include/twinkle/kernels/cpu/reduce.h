// twinkle/kernels/cpu/reduce.h — vector helpers used by grad-norm / clipping and the model.
// All OpenMP-parallel over large n; f32 data.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// sum_i x[i]^2, accumulated in double; bitwise independent of the thread count (fixed 64K-element
/// blocks summed in order).
double sum_squares(const float* x, int64_t n);
/// x[i] *= s.
void scale_inplace(float* x, int64_t n, float s);
/// y[i] += x[i].
void add_inplace(float* y, const float* x, int64_t n);
/// out[i] = a[i] + b[i] (out may alias a or b).
void add_out(float* out, const float* a, const float* b, int64_t n);
/// y[r, c] += b[c] (AddOp::add_bias_rows, twinkle/kernels/ops.h).
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols);
/// db[c] += sum_r dy[r, c], each column in double in row order (AddOp::bias_grad_rows); db null: nothing.
void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols);
/// y[i] += a * x[i].
void axpy(float* y, const float* x, int64_t n, float a);

}  // namespace twinkle::kernels::cpu
