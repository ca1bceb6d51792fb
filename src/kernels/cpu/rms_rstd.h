// src/kernels/cpu/rms_rstd.h — the reciprocal RMS of one row from its sum of squares, as HF's
// Qwen3RMSNorm has it (transformers models/qwen3/modeling_qwen3.py: variance = mean(x^2) in fp32, then
// rsqrt(variance + eps) in fp32). The sum itself is accumulated in double by each caller (rmsnorm,
// add_rmsnorm, qk_norm_rope, gated_rmsnorm), over the row it normalises.
#pragma once
#include <cmath>
#include <cstdint>

namespace twinkle::kernels::cpu {

/// rsqrt(float(sum_sq / dim) + eps), the variance rounded to fp32 first; dim > 0.
inline float rms_rstd(double sum_sq, int64_t dim, float eps) {
  const float var = static_cast<float>(sum_sq / static_cast<double>(dim));
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(var + eps)));
}

}  // namespace twinkle::kernels::cpu
