// twinkle/kernels/cpu/lora.h — the CPU "fused" LoraOp (twinkle/kernels/ops.h): PEFT's LoRA term and
// lora_dropout. Contracts, shapes and sources: LoraOp in ops.h; the mask rule: twinkle/parallel/lora_dropout.h.
// The GEMMs are dnnl_sgemm calls (twinkle/kernels/cpu/gemm.h) with the scaling as alpha; the dropout loops
// are OpenMP-parallel. Host pointers.
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// LoraOp::dropout_mask (OpenMP over tokens).
void lora_dropout_mask(const uint64_t* token_key, int64_t T, uint64_t seed, uint64_t module_key, int64_t feature0,
                       int64_t in_l, uint64_t threshold, uint8_t* m);
/// LoraOp::dropout_apply.
void lora_dropout_apply(const float* x, const uint8_t* m, float keep_scale, float* xd, int64_t n);
/// LoraOp::dropout_backward.
void lora_dropout_backward(const float* g, const uint8_t* m, float keep_scale, float* dx, int64_t n);
/// LoraOp::forward.
void lora_forward(const float* x, const float* A, const float* B, float* h, float* y, int64_t T, int64_t in,
                  int64_t out, int64_t r, float scaling);
/// LoraOp::backward.
void lora_backward(const float* x, const float* A, const float* B, const float* dy, float* h, float* dh, float* dx,
                   bool accumulate_dx, float* dA, float* dB, int64_t T, int64_t in, int64_t out, int64_t r,
                   float scaling);

}  // namespace twinkle::kernels::cpu
