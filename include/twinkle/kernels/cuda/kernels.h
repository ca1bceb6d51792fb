// twinkle/kernels/cuda/kernels.h — the CUDA implementations of the ops of twinkle/kernels/ops.h,
// registered by Registry::global() under device "cuda", implementation "fused" (in a CUDA build).
//
// Contract for device "cuda" (in addition to each op's contract in ops.h, whose semantics and sources
// are the same as the CPU kernels'): every float / int pointer argument is a DEVICE pointer
// (Device::CUDA memory, e.g. Tensor::zeros(..., Device::CUDA).raw()), except `counts` of
// grouped_linear (a host array: the per-expert GEMM loop runs on the host), the RopeTable (a host
// object: its cos/sin are copied to the device once and cached by the table's address, size and
// first/last values) and the MoE ops' host statistics (ops.h: `counts` of moe_permute.sort_by_expert,
// `prob_sum` / `counts` of moe_router_loss.routing_stats, `counts` of aux_loss_backward, which is uploaded).
// Work is queued on the backend's stream (twinkle/kernels/cuda/runtime.h); an op returns once its work is
// queued, except the ones that return a host value or validate their input (cross_entropy.forward,
// linear_cross_entropy, norms.sum_squares, qk_norm_rope / rope position checks, moe_permute.sort_by_expert,
// moe_router_loss.routing_stats / z_loss_forward), which synchronize. The "fused" set is fp32 throughout;
// GEMMs through cuBLAS in fp32 without TF32; reductions of the CPU kernels that accumulate in double
// (RMSNorm's sum of squares, sum_squares, cross-entropy sums, the MoE router's softmax sums) accumulate in
// double here too.
#pragma once
#include <vector>

#include "twinkle/kernels/registry.h"

namespace twinkle::cuda {

/// Every CUDA op implementation, one per op of OpImpl (the "fused" set of device "cuda").
std::vector<kernels::OpImpl> fused_kernels();

/// The "bf16" set of device "cuda", one implementation per op of kernels::mixed_precision_ops() (laid over
/// the table by kernels::apply_mixed_precision): the rounding points of the CPU set
/// (twinkle/kernels/cpu/bf16_ops.h, attention_bf16.h). linear, grouped_linear, gate_up_swiglu and
/// linear_cross_entropy round every GEMM input (activations, weights, output gradients) to bf16
/// (round-to-nearest-even) and multiply through cublasGemmEx (CUDA_R_16BF inputs, fp32 output,
/// CUBLAS_COMPUTE_32F: tensor cores summing in fp32); SwiGLU, log-sum-exp, cross entropy and the weight
/// gradients' accumulation stay fp32, the GEMM outputs are not rounded. attention keeps the fp32 forward
/// and runs the backward's five tile products (q.k, dO.v, P^T dO, dS^T q, dS k) on bf16-rounded operands
/// with fp32 sums, on the fp32 CUDA cores (the same kernels as the fp32 backward, operands rounded as
/// they are loaded; no tensor-core attention yet); attention_block (ring attention's block op) likewise
/// (twinkle/kernels/cpu/attention_block.h attention_block_backward_bf16). Scratch: the bf16 copies of a GEMM's operands
/// (2 bytes per element) from the caching allocator, returned when the op returns.
std::vector<kernels::OpImpl> bf16_kernels();

}  // namespace twinkle::cuda
