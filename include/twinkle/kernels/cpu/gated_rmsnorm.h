// twinkle/kernels/cpu/gated_rmsnorm.h — the gated RMSNorm on a Gated DeltaNet layer's output, forward
// and backward (fp32 data, double row sums).
//
// Semantics: transformers' Qwen3_5RMSNormGated (models/qwen3_5/modeling_qwen3_5.py; Qwen3NextRMSNormGated
// is the same), applied to rows of head_v_dim with the gate z = in_proj_z(x) of the same head:
//   y = w * (x * rsqrt(mean(x^2) + eps)) * silu(z)
// with the weight used as is (initialised to ones; NOT the zero-centred 1 + w of Qwen3.5's other
// RMSNorms) and eps = config.rms_norm_eps (1e-6); "norm before gate", as FLA's FusedRMSNormGated.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// Forward. x, z, y [rows, dim] f32 row-major (y may alias x or z); w [dim]; rstd [rows] receives
/// 1 / sqrt(mean(x^2) + eps) (saved for the backward). Throws nothing.
void gated_rmsnorm_forward(const float* x, const float* z, const float* w, float* y, float* rstd, int64_t rows,
                           int64_t dim, float eps);

/// Backward given x, z, w, the saved rstd and dy [rows, dim]: dx, dz [rows, dim] OVERWRITTEN (dx may
/// alias dy; dz must not alias dx); dw [dim] ACCUMULATED (null: frozen), per-thread partials added in
/// thread order. With n = x * rstd, s = silu(z), g = dy * w * s:
///   dx = rstd * (g - n * mean(g * n)),  dz = dy * w * n * silu'(z),  dw += sum_rows dy * n * s.
void gated_rmsnorm_backward(const float* x, const float* z, const float* w, const float* rstd, const float* dy,
                            float* dx, float* dz, float* dw, int64_t rows, int64_t dim);

}  // namespace twinkle::kernels::cpu
