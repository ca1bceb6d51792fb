// twinkle/model/qwen3_moe_block.h — the sparse MoE block of one Qwen3-MoE decoder layer.
//
// HF transformers models/qwen3_moe/modeling_qwen3_moe.py, Qwen3MoeSparseMoeBlock, on the
// flattened tokens x [T, H]:
//   router_logits = gate(x)                         (Linear(H, E), no bias; fp32 here)
//   probs = softmax(router_logits) over all E; top-k (ties to the lower index);
//   w = renormalised top-k when norm_topk_prob, else the raw top-k probabilities
//   out[t] = sum_j w[t, j] * expert_{sel[t, j]}(x[t]),  expert = SwiGLU MLP of width
//            moe_intermediate_size (gate_proj, up_proj, down_proj, no biases).
// Dropless, as Megatron-core's MoELayer with the alltoall dispatcher at ep = 1: the k copies of
// each token are permuted into expert order (kernels/cpu/moe_permute.h), every expert runs one
// GEMM over its contiguous rows (the `grouped_linear` op of the model's kernel table,
// kernels/ops.h; router GEMM `linear`, `swiglu`), SwiGLU,
// the down projection, then the probability-weighted combine back to token order.
// The router losses (load balancing in transformers' `global` or Megatron's `per_layer` form,
// the z-loss) are computed by the model from this block's saved activations; their gradient
// enters backward through MoeActivations::aux_counts / aux_coeff_scale / z_scale.
//
// Parameters (tensor table, HF names and order): mlp.gate.weight [E, H] (replicated), then
// mlp.experts.{e}.gate_proj.weight [I, H] for every e, then every up_proj [I, H], then every
// down_proj [H, I]; expert entries are flagged expert. Declared projection
// by projection, each projection's experts sit at a constant stride in the ParamStore, so the
// grouped GEMM reads them as W_e = W_0 + e * stride.
// Layout support: tp = 1 (or the caller has rejected it), ep = 1, etp = 1.
#pragma once
#include <cstdint>
#include <vector>

#include "twinkle/core/workspace.h"
#include "twinkle/io/model_config.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/lora.h"
#include "twinkle/parallel/tensor_table.h"

namespace twinkle {

class Qwen3MoeBlock {
 public:
  Qwen3MoeBlock() = default;
  /// Adds model.layers.{layer}.mlp.gate.weight and the experts' tensors to `table` (order above).
  /// `ep_size`: reserved for expert parallelism (ep > 1 is rejected by the model for now).
  Qwen3MoeBlock(parallel::TensorTable& table, const ModelConfig& cfg, int64_t layer, int ep_size = 1);

  /// x [T, H] f32 (kept by the caller until backward). Saves into `a` and returns the combined
  /// output [T, H] in `scratch` (valid until the next call using the same scratch names).
  const float* forward(const float* x, const StageBatch& b, MoeActivations& a, Workspace& scratch) const;
  /// dy [T, H]. Accumulates the gate and expert gradients (plus the router-loss gradients set
  /// in `a`) and returns d(x) [T, H] in `scratch`.
  const float* backward(const float* dy, const StageBatch& b, const MoeActivations& a, Workspace& scratch) const;

  /// LoRA on the router (PEFT target "gate": logits += scaling (x A^T) B^T, parallel/lora.h,
  /// A [r, H] and B [E, r] replicated — the router is, and the model refuses it with tp > 1).
  void set_router_lora(const parallel::LoraPair& p) { router_lora_ = p; }
  int64_t num_experts() const { return E_; }
  int64_t top_k() const { return k_; }
  size_t gate_entry() const { return gate_; }

 private:
  struct Weights {
    const float* router;
    const float* w[3];  // gate_proj, up_proj, down_proj of expert 0
    float* dw[3];
    float* drouter;
    int64_t stride[3];
  };
  Weights weights() const;

  const parallel::TensorTable* table_ = nullptr;
  int64_t H_ = 0, E_ = 0, k_ = 0, I_ = 0;
  bool norm_topk_prob_ = false;
  size_t gate_ = parallel::kNoParam;
  parallel::LoraPair router_lora_;  // inactive unless the router is a LoRA target
  std::vector<size_t> experts_[3];  // entry ids per projection (gate, up, down), by expert
};

}  // namespace twinkle
