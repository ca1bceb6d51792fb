// twinkle/parallel/lora.h — a LoRA pair (PEFT) next to a column- or row-parallel linear.
//
// y = base(x) + scaling * (x A^T) B^T with A [r, in], B [out, r] (peft/tuners/lora/layer.py
// Linear.forward). Tensor parallelism as Megatron / mcore-bridge (tuners/lora.py):
//  * column-parallel base (W split by output rows): A replicated, B split by output rows
//    (dim 0). The input is the full [T, in] (after the SP all-gather), so x A^T is the same on
//    every tp rank; the d(x A^T) = scaling dy_local B_local is a tp-partial sum, so A's
//    gradient is tp-partial (all-reduced over tp by finalize_grads: tp_grad_allreduce) and
//    d(x) joins the base's d(x) before its tp reduction.
//  * row-parallel base (W split by input columns): A split by input columns (dim 1), B
//    replicated. Each rank adds scaling (x_shard A_shard^T) B^T to its partial output before
//    the base's all-reduce / reduce-scatter, so base and LoRA are reduced together:
//    y = reduce(x_s W_s^T + scaling x_s A_s^T B^T) + b. B's gradient is tp-partial.
// The [T, r] intermediate x A^T is recomputed in backward (r is small), so a LoRA layer
// saves no activation. lora_dropout (parallel/lora_dropout.h): while a LoraDropoutScope is
// active, x is replaced by dropout(x) = x * mask / (1 - p) on the LoRA path only (A's input),
// the mask regenerated in backward (d(x) of the LoRA path is masked and scaled the same way).
//  * replicated base (the MoE router: tp-replicated, each tp rank on its own SP token shard):
//    A and B replicated, both gradients tp-partial (tp_grad_allreduce), counted once
//    (tp_duplicate); forward and backward are the column functions with out_l = out.
//  * MoE experts (transformers 4's Qwen3MoeSparseMoeBlock: one nn.Linear per expert and
//    projection, so PEFT puts one LoRA pair on each, keys mlp.experts.{e}.{proj}.lora_A/B):
//    add_expert_lora_entries; the pairs live with their expert (ep_owner, expert region of the
//    adapter store, reduced over expert-dp) and run on the expert's rows with the column
//    functions (out_l = out), dropout keyed by the rows' tokens (model/qwen3_moe_block.h).
// Compute: the table's LoraOp (twinkle/kernels/ops.h; GEMMs, mask, dropout on the table's device), with its
// scratch ([T, r] h / dh, the mask, dropout(x), d(x) of the dropout path, the token keys' device copy) in
// the caller's Workspace, which must live on the same device (`scratch` below: the model's).
// LoRA entries are adapter entries of the TensorTable (adapter = true): they live in the
// model's adapter ParamStore, the only one the optimizer sees.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/core/workspace.h"
#include "twinkle/parallel/tensor_table.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle::parallel {

struct LoraPair {
  size_t a = kNoParam, b = kNoParam;  ///< table entries of lora_A / lora_B (kNoParam: no adapter)
  int64_t r = 0;
  float scaling = 0;
  uint64_t key = 0;      ///< lora_module_key(module): the dropout mask's module identity
  int64_t feature0 = 0;  ///< global index of this rank's first input feature (row-parallel: rank * in/tp)
  bool active() const { return r > 0; }
};

enum class LoraBase { Column, Row, Replicated };

/// Adds `module`.lora_A.weight [r, in] and `module`.lora_B.weight [out, r] (adapter entries,
/// weight decay, init Zeros — the model fills them) to `table` on its current stage, sharded
/// for a `base` linear as described above. Throws twinkle::Error when the split dimension
/// does not divide by tp.
LoraPair add_lora_entries(TensorTable& table, const TensorParallel& tp, const std::string& module, int64_t in,
                          int64_t out, LoraBase base, int64_t r, float scaling);

/// One projection of the experts of an MoE layer: for `modules` (global expert e at index e,
/// e.g. "model.layers.0.mlp.experts.{e}.gate_proj"; "" = that expert is not a target and gets
/// no pair) adds every lora_A [r, in] first, then every lora_B [out, r], unsplit (etp = 1),
/// expert = true, ep_owner = e / experts_per_rank. Returns the pairs by global expert
/// (inactive where the module is "").
std::vector<LoraPair> add_expert_lora_entries(TensorTable& table, const std::vector<std::string>& modules, int64_t in,
                                              int64_t out, int64_t experts_per_rank, int64_t r, float scaling);

/// Column-parallel base: y [T, out_l] += scaling (x A^T) B_l^T, x [T, in] (full rows).
void lora_column_forward(const TensorTable& table, const LoraPair& p, const float* x, float* y, int64_t T, int64_t in,
                         int64_t out_l, Workspace& scratch);
/// Its backward: dy [T, out_l]; accumulates dA (tp-partial) and dB_l (when not frozen) and
/// adds d(x) into dx [T, in] (before the base layer's tp reduction).
void lora_column_backward(const TensorTable& table, const LoraPair& p, const float* x, const float* dy, float* dx,
                          int64_t T, int64_t in, int64_t out_l, Workspace& scratch);
/// Row-parallel base: y_partial [T, out] += scaling (x_s A_s^T) B^T, x_s [T, in_l]; call
/// before the base's tp reduction.
void lora_row_forward(const TensorTable& table, const LoraPair& p, const float* x, float* y_partial, int64_t T,
                      int64_t in_l, int64_t out, Workspace& scratch);
/// Its backward: dy [T, out] (full token rows); accumulates dA_s and dB (tp-partial), and
/// adds d(x_s) into dx [T, in_l].
void lora_row_backward(const TensorTable& table, const LoraPair& p, const float* x, const float* dy, float* dx,
                       int64_t T, int64_t in_l, int64_t out, Workspace& scratch);

}  // namespace twinkle::parallel
