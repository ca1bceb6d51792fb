// twinkle/kernels/cpu/rmsnorm.h — RMSNorm forward/backward (fp32 data, fp32/double accumulation).
//
// Semantics: HF Qwen3RMSNorm (transformers/models/qwen3/modeling_qwen3.py):
//   y = w * (x * rsqrt(mean(x^2) + eps)), computed in fp32.
// Per-head q_norm/k_norm of Qwen3 is the same call with rows = tokens*heads, dim = head_dim.
// Rows are processed in parallel with OpenMP.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Forward. x, y: [rows, dim] row-major f32 (y may alias x); w: [dim]; rstd: [rows], receives
/// 1/sqrt(mean(x^2)+eps) per row (saved for backward). eps > 0. Throws nothing.
void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps);

/// Backward of rmsnorm_forward given its x, w and saved rstd and the upstream gradient dy [rows, dim].
/// dx [rows, dim] is OVERWRITTEN (may alias dy):  with xh = x*rstd, g = dy*w,
///   dx = rstd * (g - xh * mean(g * xh)).
/// dw [dim] is ACCUMULATED (+=) with sum_rows dy * xh (race-free: per-thread partial sums, reduced in order).
/// dw may be null (frozen weight).
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                      int64_t rows, int64_t dim);

}  // namespace twinkle::kernels::cpu
