// twinkle/model/qwen3_moe_block.h — the sparse MoE block of one Qwen3-MoE decoder layer.
//
// HF transformers models/qwen3_moe/modeling_qwen3_moe.py, Qwen3MoeSparseMoeBlock, on the
// flattened tokens x [T, H]:
//   router_logits = gate(x)                         (Linear(H, E), no bias; fp32 here)
//   probs = softmax(router_logits) over all E; top-k (ties to the lower index);
//   w = renormalised top-k when norm_topk_prob, else the raw top-k probabilities
//   out[t] = sum_j w[t, j] * expert_{sel[t, j]}(x[t]),  expert = SwiGLU MLP of width
//            moe_intermediate_size (gate_proj, up_proj, down_proj, no biases).
// Dropless, as Megatron-core's MoELayer with the alltoall dispatcher: the k copies of each
// token are permuted into expert order, every expert runs one GEMM over its contiguous rows,
// SwiGLU, the down projection, then the probability-weighted combine back to token order. All of
// it computes through the model's kernel table (kernels/ops.h: `linear` for the router GEMM,
// `moe_router`, `moe_permute`, `grouped_linear`, `swiglu`, `moe_router_loss` for the router-loss
// gradients), on the model's device; the saved buffers (MoeActivations) live there too.
// The router losses (load balancing in transformers' `global` or Megatron's `per_layer` form,
// the z-loss) are computed by the model from this block's saved activations; their gradient
// enters backward through MoeActivations::aux_counts / aux_coeff_scale / z_scale.
//
// Parameters (tensor table, HF names and order): mlp.gate.weight [E, H] (replicated), then
// mlp.experts.{e}.gate_proj.weight [I, H] for every e, then every up_proj [I, H], then every
// down_proj [H, I]; expert entries are flagged expert (their own region of the ParamStore,
// reduced over the expert-data-parallel group). Declared projection by projection, each
// projection's local experts sit at a constant stride in the ParamStore, so the grouped GEMM
// reads them as W_e = W_0 + e * stride.
//
// Parallel layouts (Megatron-core MoE parallel folding; etp = 1 is Twinkle's default):
//  * Tensor parallelism: sequence parallelism is on for MoE models with tp > 1 (the model
//    switches it on), so each tp rank routes and computes its own Tl = T/tp token rows; the
//    router is tp-replicated (its gradient a tp-partial sum: tp_grad_allreduce, counted once:
//    tp_duplicate) and no collective runs inside the block for tp.
//  * Expert parallelism: ep rank r holds experts [r*El, (r+1)*El), El = E/ep (ep_owner in the
//    table); the block dispatches its routed rows over the ep group with Megatron's alltoall
//    dispatcher (parallel/moe_dispatcher.h), one dispatcher per (layer, micro-batch slot), kept
//    in MoeActivations. With ep = etp = 1 the rows are permuted locally (no dispatcher).
//  * Expert tensor parallelism (etp > 1, the etp group of the expert grid): each etp rank holds
//    rows [r*I/etp, (r+1)*I/etp) of every local expert's gate_proj / up_proj and the same
//    columns of its down_proj (ShardSpec over etp; Megatron-core moe/experts.py), so SwiGLU
//    stays local; the dispatcher all-gathers the etp group's routed rows before the experts and
//    reduce-scatters their partial outputs after them (moe_dispatcher.h). Expert gradients of a
//    slice cover the whole etp group's rows; they are reduced over expert-dp like etp = 1's.
//  * LoRA (parallel/lora.h): the router's pair is replicated like the router; an expert's pairs
//    live with the expert on its ep rank (expert region of the adapter store) and run over the
//    expert's rows, with lora_dropout keyed by the rows' tokens (etp = 1: the model refuses
//    LoRA with etp > 1).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "twinkle/core/workspace.h"
#include "twinkle/dist/process_group.h"
#include "twinkle/io/model_config.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/lora.h"
#include "twinkle/parallel/tensor_table.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle {

class Qwen3MoeBlock {
 public:
  Qwen3MoeBlock() = default;
  /// Adds model.layers.{layer}.mlp.gate.weight and the experts' tensors to `table` (order above).
  /// `ep`: the expert-parallel group (nullptr or size 1: every expert is local); `etp`: the
  /// expert-tensor-parallel group (nullptr or size 1: whole experts; > 1 needs `ep`). Throws
  /// twinkle::Error for tp > 1 without sequence parallelism, num_experts % ep != 0 or
  /// moe_intermediate_size % etp != 0.
  Qwen3MoeBlock(parallel::TensorTable& table, const parallel::TensorParallel& tp,
                std::shared_ptr<dist::ProcessGroup> ep, const ModelConfig& cfg, int64_t layer,
                std::shared_ptr<dist::ProcessGroup> etp = nullptr);

  /// x [Tl, H] f32, this rank's token rows (kept by the caller until backward). Saves into `a`
  /// and returns the combined output [Tl, H] in `scratch` (valid until the next call using the
  /// same scratch names). Collective over the ep group when ep > 1.
  const float* forward(const float* x, const StageBatch& b, MoeActivations& a, Workspace& scratch) const;
  /// dy [Tl, H]. Accumulates the gate and local expert gradients (plus the router-loss
  /// gradients set in `a`) and returns d(x) [Tl, H] in `scratch`. Collective over ep when ep > 1.
  const float* backward(const float* dy, const StageBatch& b, const MoeActivations& a, Workspace& scratch) const;

  /// LoRA on the router (PEFT target "gate": logits += scaling (x A^T) B^T, parallel/lora.h,
  /// A [r, H] and B [E, r] replicated like the router, LoraBase::Replicated: under tp > 1 each
  /// tp rank runs them on its own SP token shard — lora_dropout keyed by those tokens' global
  /// identities — and their gradients are summed over tp).
  void set_router_lora(const parallel::LoraPair& p) { router_lora_ = p; }
  /// LoRA on the experts' projection `proj` (0 gate_proj, 1 up_proj, 2 down_proj), pairs by
  /// global expert from parallel::add_expert_lora_entries (A [r, in], B [out, r]; PEFT's
  /// Linear.forward on each targeted expert's nn.Linear: y_e = x_e W_e^T + scaling
  /// (dropout(x_e) A_e^T) B_e^T). Inactive pairs: that expert's projection is not a target
  /// (PEFT's partial targeting, e.g. "experts.0.gate_proj"). Each local expert's pair runs on its
  /// contiguous rows after the base grouped GEMM (parallel::lora_column_forward; x A^T
  /// recomputed in backward). lora_dropout on expert rows: the masks are keyed by the rows'
  /// token identities (lora_dropout.h) and the module (expert and projection), so a token's
  /// mask does not depend on the layout: the keys travel with the rows under ep
  /// (AlltoAllDispatcher::dispatch_tags), and each expert's rows are in token order as in the
  /// reference's torch.where. Throws twinkle::Error when `pairs` does not hold num_experts
  /// entries or the active ones differ in rank or scaling.
  void set_expert_lora(int proj, std::vector<parallel::LoraPair> pairs);
  int64_t num_experts() const { return E_; }
  int64_t num_local_experts() const { return El_; }
  int64_t top_k() const { return k_; }
  size_t gate_entry() const { return gate_; }
  /// This rank's token rows of `b` (the SP shard under tp > 1) and their real-token mask [Tl].
  int64_t local_rows(const StageBatch& b) const { return tp_.local_rows(b.T); }
  const uint8_t* local_mask(const StageBatch& b) const {  // on the model's device (StageBatch::token_mask_ptr)
    return b.token_mask_ptr() + (tp_.sequence_parallel ? tp_.rank * local_rows(b) : 0);
  }

 private:
  struct Weights {
    const float* router;
    const float* w[3];  // gate_proj, up_proj, down_proj of the first local expert
    float* dw[3];
    float* drouter;
    int64_t stride[3];
  };
  struct ExpertDropout;  // the LoRA dropout context of one expert's rows (the .cpp)
  bool has_expert_lora() const;
  // The token keys of this rank's Tl rows when LoRA dropout is on and an expert has a pair, else nullptr.
  const uint64_t* expert_dropout_keys(const StageBatch& b, int64_t Tl) const;
  // y [R, N] += scaling (dropout(X_e) A_e^T) B_e^T for every local expert e with a pair in
  // projection j (X [R, K] grouped by local expert, counts [El]; keys [R]: the rows' token keys).
  void lora_forward(int j, const float* X, const int64_t* counts, int64_t N, int64_t K, float* y,
                    const uint64_t* keys, Workspace& scratch) const;
  // Its backward: accumulates dA_e, dB_e and dX [R, K] += d(X) of the LoRA path.
  void lora_backward(int j, const float* X, const int64_t* counts, int64_t N, int64_t K, const float* dy, float* dX,
                     const uint64_t* keys, Workspace& scratch) const;
  Weights weights() const;
  // The local experts on rows grouped by local expert (counts [El]): gate/up/act/y in `a`.
  void experts_forward(const float* xin, const int64_t* counts, int64_t R, const Weights& w, MoeActivations& a,
                       Workspace& scratch) const;
  // Their backward given dy [R, H]: accumulates dW, writes dxin [R, H].
  void experts_backward(const float* xin, const int64_t* counts, int64_t R, const Weights& w, const MoeActivations& a,
                        const float* dy, float* dxin, Workspace& scratch) const;

  const parallel::TensorTable* table_ = nullptr;
  parallel::TensorParallel tp_;
  std::shared_ptr<dist::ProcessGroup> ep_, etp_;
  int ep_size_ = 1, etp_size_ = 1;
  int64_t H_ = 0, E_ = 0, El_ = 0, first_ = 0, k_ = 0, I_ = 0, Il_ = 0;  // Il_ = I_ / etp
  bool norm_topk_prob_ = false;
  size_t gate_ = parallel::kNoParam;
  parallel::LoraPair router_lora_;  // inactive unless the router is a LoRA target
  std::vector<parallel::LoraPair> expert_lora_[3];  // by global expert; empty: no expert LoRA
  std::vector<size_t> experts_[3];  // entry ids per projection (gate, up, down), by global expert
};

}  // namespace twinkle
