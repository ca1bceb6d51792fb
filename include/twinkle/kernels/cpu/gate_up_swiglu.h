// twinkle/kernels/cpu/gate_up_swiglu.h — HF Qwen3MLP's gate_proj and up_proj as ONE GEMM over the
// concatenated weight Wgu [2I, H] (gate rows, then up rows; in the model's ParamStore the two shards are
// adjacent, so this is a view), then SwiGLU on the [T, 2I] output with MindSpeed's npu_swiglu contract:
// a = silu(gu[:, :I]) * gu[:, I:] (Megatron's bias_swiglu with
// chunk(2, dim=-1)).
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// gu [T, 2I] = X [T, H] Wgu^T (saved for backward); a [T, I] = silu(gu[:, :I]) * gu[:, I:].
/// Throws twinkle::Error if oneDNN fails.
void gate_up_swiglu_forward(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I, int64_t H);

/// dgu [T, 2I] (OVERWRITTEN) = SwiGLU backward of da [T, I]; then one GEMM each for
/// dX [T, H] (+)= dgu Wgu (overwritten unless accumulate_dx) and dWgu [2I, H] += dgu^T X (skipped when null).
void gate_up_swiglu_backward(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                             float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx);

}  // namespace twinkle::kernels::cpu
