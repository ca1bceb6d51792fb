// twinkle/parallel/column_parallel_linear.h — Megatron's ColumnParallelLinear.
//
// Y = X W^T (+ b) with W [out, in] split along its output rows over the tp group
// (megatron/core/tensor_parallel/layers.py ColumnParallelLinear). One layer may hold several
// Hugging Face projections that read the same input — q/k/v, or gate/up — as Megatron's
// fused linear_qkv / linear_fc1 do: their tensors stay separate HF entries but are declared
// adjacently (part 0's weight, part 0's bias, part 1's weight, ...), so without biases the
// parts' local weights form one [sum(out_i/tp), in] block in the flat ParamStore
// (weight_block()), which a fused kernel can run as one GEMM.
// Paired collectives: forward all-gathers the input over tp under sequence parallelism
// (gather_from_sequence_parallel_region); backward sums d(input) over tp (all-reduce, the
// backward of copy_to_tensor_model_parallel_region, or reduce-scatter under SP).
// Activations are token-major: X [T, in] (T tokens of a micro-batch; [T/tp, in] per rank
// between the parallel regions under SP), f32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/core/workspace.h"
#include "twinkle/parallel/lora.h"
#include "twinkle/parallel/tensor_table.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle::parallel {

class ColumnParallelLinear {
 public:
  struct Part {
    std::string name;      ///< HF module name, e.g. "model.layers.0.mlp.gate_proj" (".weight"/".bias" appended)
    int64_t out_features;  ///< full output features of this projection (divisible by tp)
  };
  ColumnParallelLinear() = default;
  /// Adds each part's weight [out_i, in] (split along dim 0, N(0, std) init, weight decay)
  /// and, when `bias`, its bias [out_i] (split, zero init, no decay) to `table` on its
  /// current stage. Throws twinkle::Error when an out_features does not divide by tp.
  ColumnParallelLinear(TensorTable& table, const TensorParallel& tp, int64_t in_features, std::vector<Part> parts,
                       bool bias);

  size_t num_parts() const { return weight_.size(); }
  int64_t in_features() const { return in_; }
  int64_t local_out(size_t part) const { return local_out_.at(part); }
  size_t weight_entry(size_t part) const { return weight_.at(part); }
  bool has_bias() const { return !bias_.empty(); }
  /// Attaches a LoRA pair (parallel/lora.h, made for LoraBase::Column) to part `part`: forward
  /// adds it to y[part], backward accumulates its gradients and its d(x).
  void set_lora(size_t part, const LoraPair& p);
  const LoraPair& lora(size_t part) const { return lora_.at(part); }
  /// The parts' local weights as one [sum local_out, in] block (part order) — only when the
  /// layer has no bias (else twinkle::Error); valid after the ParamStore is finalized.
  const float* weight_block() const;
  /// Whether weight_block() exists (no bias and the parts adjacent in the store).
  bool has_weight_block() const;
  /// The kernels this layer computes with (its TensorTable's).
  const kernels::KernelTable& kernels() const { return table_->kernels(); }

  /// x_local [Tl, in] (Tl = T/tp under SP, else T). Under SP all-gathers it into
  /// x_full [T, in] (kept by the caller for backward; unused, may be null, without SP).
  /// Writes y[i] [T, local_out(i)] = X W_i^T (+ b_i). Returns the [T, in] input the
  /// GEMMs read (x_full under SP, else x_local): pass it to backward. scratch: the LoRA parts' buffers
  /// (twinkle/parallel/lora.h).
  const float* forward(const float* x_local, float* x_full, float* const* y, int64_t T, Workspace& scratch) const;
  /// x: forward's returned input [T, in]; dy[i] [T, local_out(i)]. Accumulates dW_i (and
  /// db_i, summed over tokens in double; neither when frozen) and the LoRA gradients and returns this rank's d(x_local) [Tl, in],
  /// summed over tp, in `scratch` (keys "tp.dx_full", "tp.dx_local"; valid until the
  /// next use of those keys).
  const float* backward(const float* x, const float* const* dy, int64_t T, Workspace& scratch) const;

  /// Two equal parts [gate, up] (HF Qwen3MLP gate_proj, up_proj) as ONE GEMM over weight_block()
  /// followed by SwiGLU — the gate_up_swiglu op (MindSpeed npu_swiglu contract, Megatron's fused
  /// linear_fc1): gu [T, 2I] = X [gate; up]^T (saved for backward), act [T, I] = silu(gu[:, :I]) *
  /// gu[:, I:], I = local_out(0). SP gather as forward(); returns the [T, in] input for backward.
  /// Throws twinkle::Error unless has_weight_block() and the layer has two equal parts.
  const float* forward_swiglu(const float* x_local, float* x_full, float* gu, float* act, int64_t T) const;
  /// Backward of forward_swiglu given dact [T, I]: accumulates d[gate; up] and returns d(x_local) as
  /// backward() does (scratch keys "tp.dgu", "tp.dx_full", "tp.dx_local").
  const float* backward_swiglu(const float* x, const float* gu, const float* dact, int64_t T, Workspace& scratch) const;

 private:
  const TensorTable* table_ = nullptr;
  TensorParallel tp_;
  int64_t in_ = 0;
  std::vector<int64_t> local_out_;
  std::vector<size_t> weight_, bias_;
  std::vector<LoraPair> lora_;  // per part (inactive: r = 0)
};


}  // namespace twinkle::parallel
