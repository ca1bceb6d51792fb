// twinkle/kernels/cpu/bf16_ops.h — the CPU "bf16" implementations of the GEMM ops: the mixed-precision
// set that Qwen3ModelOptions::mixed_precision = "bf16" lays over the model's kernel table
// (kernels::apply_mixed_precision, twinkle/kernels/registry.h).
//
// Same contracts, shapes and errors as the fp32 ops they replace (twinkle/kernels/ops.h): every GEMM
// rounds its inputs (activations, weights, output gradients) to bf16 and accumulates in fp32 through
// oneDNN (twinkle/kernels/cpu/gemm_bf16.h); every non-GEMM step (SwiGLU, log-sum-exp, cross entropy,
// the weight gradients' accumulation) stays fp32. The set's attention op (fp32 forward, bf16 backward tile
// products) is declared in twinkle/kernels/cpu/attention_bf16.h. Semantics: PyTorch autocast's bf16 F.linear with an
// fp32 output, Megatron's bf16 model copy of fp32 master weights (Float16Module + DistributedOptimizer):
// the bf16 copy of a weight is made from the current fp32 parameter at each use instead of being kept
// resident, which gives the same numbers as Megatron's copy refreshed after each optimizer step without
// holding 2 bytes per parameter more.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// GateUpSwigluOp with bf16 GEMMs (gu fp32, SwiGLU fp32).
void gate_up_swiglu_forward_bf16(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I,
                                 int64_t H);
void gate_up_swiglu_backward_bf16(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                                  float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx);

/// LinearCrossEntropyOp with bf16 GEMMs: logits in fp32 from bf16 X and W, cross entropy and its
/// gradient in fp32, the gradient rounded to bf16 for the dX / dW GEMMs (as autocast's backward of a
/// bf16 matmul). W is rounded once per call; the logits chunk buffer is reused for the bf16 gradient.
double linear_cross_entropy_bf16(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V,
                                 int64_t H, float grad_scale, float* lse, float* dX, float* dW, int64_t chunk_rows);

/// GroupedLinearOp with bf16 GEMMs (one per expert with rows).
void grouped_linear_forward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                                 float* Y, int64_t N, int64_t K, bool accumulate);
void grouped_linear_backward_bf16(const float* X, const float* W, int64_t w_stride, const int64_t* counts,
                                  int64_t E, const float* dY, float* dX, float* dW, int64_t N, int64_t K,
                                  bool accumulate_dx);

}  // namespace twinkle::kernels::cpu
