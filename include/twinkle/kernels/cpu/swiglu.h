// twinkle/kernels/cpu/swiglu.h — SwiGLU gate of HF Qwen3MLP: h = silu(gate) * up,
// silu(g) = g * sigmoid(g) (transformers/models/qwen3/modeling_qwen3.py, act_fn = "silu").
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// h[i] = silu(gate[i]) * up[i], i < n. All f32; h may alias gate or up.
void swiglu_forward(const float* gate, const float* up, float* h, int64_t n);

/// Backward given dh [n]: with s = sigmoid(gate),
///   dgate = dh * up * s * (1 + gate * (1 - s)),  dup = dh * gate * s.
/// dgate/dup are OVERWRITTEN (dgate may alias gate or dh, dup may alias up or dh, element-wise safe).
void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n);

/// Strided 2-D version of swiglu_forward: row r, column c of X is X[r*ld_x + c]; rows x cols elements.
/// Lets gate/up live inside one fused [T, 2I] buffer (ld = 2I). Rows run in parallel.
void swiglu_forward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, float* h, int64_t ld_h,
                         int64_t rows, int64_t cols);

/// Strided 2-D version of swiglu_backward (same formulas; dgate/dup OVERWRITTEN).
void swiglu_backward_rows(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, const float* dh,
                          int64_t ld_dh, float* dgate, int64_t ld_dgate, float* dup, int64_t ld_dup, int64_t rows,
                          int64_t cols);
/// swiglu_backward_rows (the same values) on the calling thread, opening no OpenMP region: for callers
/// inside a parallel loop (the fused bf16 gate|up backward's row blocks, bf16_ops.h).
void swiglu_backward_rows_serial(const float* gate, int64_t ld_gate, const float* up, int64_t ld_up, const float* dh,
                                 int64_t ld_dh, float* dgate, int64_t ld_dgate, float* dup, int64_t ld_dup,
                                 int64_t rows, int64_t cols);

}  // namespace twinkle::kernels::cpu
