// twinkle/kernels/cpu/add_rmsnorm.h — residual add fused with RMSNorm (one pass over the row instead of
// an add pass and a norm pass; MindSpeed's npu_add_rms_norm contract).
// Semantics: h = x + r; y = HF Qwen3RMSNorm(h) exactly as rmsnorm_forward (rmsnorm.h) computes it.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// h [rows, dim] = x + r (h may alias x or r); y [rows, dim] = w * h * rstd; rstd [rows] saved.
/// Rows in parallel with OpenMP. Throws nothing.
void add_rmsnorm_forward(const float* x, const float* r, float* h, const float* w, float* y, float* rstd,
                         int64_t rows, int64_t dim, float eps);

/// dh [rows, dim] = rmsnorm_backward(h, w, rstd, dy) + dres (OVERWRITTEN; may alias dres or dy);
/// dw [dim] ACCUMULATED (may be null; per-thread partials reduced in order).
void add_rmsnorm_backward(const float* h, const float* w, const float* rstd, const float* dy, const float* dres,
                          float* dh, float* dw, int64_t rows, int64_t dim);

}  // namespace twinkle::kernels::cpu
