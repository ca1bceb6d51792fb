// twinkle/parallel/row_parallel_linear.h — Megatron's RowParallelLinear.
//
// Y = X W^T + b with W [out, in] split along its input columns over the tp group
// (megatron/core/tensor_parallel/layers.py RowParallelLinear, input_is_parallel = True):
// each rank multiplies its [T, in/tp] slice of X, the partial [T, out] sums are reduced
// over tp (all-reduce, or reduce-scatter to [T/tp, out] under sequence parallelism) and
// the bias — replicated, one copy — is added once after the reduction. Backward all-gathers
// d(output) under SP before the GEMMs; the bias gradient is this rank's token rows (a
// tp-partial sum under SP, summed by finalize_grads).
#pragma once
#include <cstdint>
#include <string>

#include "twinkle/core/workspace.h"
#include "twinkle/parallel/lora.h"
#include "twinkle/parallel/tensor_table.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle::parallel {

class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  /// Adds `name`.weight [out, in] (split along dim 1, N(0, std), weight decay) and, when
  /// `bias`, `name`.bias [out] (replicated, zero init, no decay; tp-partial gradient under
  /// SP) to `table`. Throws twinkle::Error when in_features does not divide by tp.
  RowParallelLinear(TensorTable& table, const TensorParallel& tp, const std::string& name, int64_t in_features,
                    int64_t out_features, bool bias);

  int64_t local_in() const { return local_in_; }
  int64_t out_features() const { return out_; }
  size_t weight_entry() const { return weight_; }
  /// Attaches a LoRA pair (parallel/lora.h, made for LoraBase::Row): its partial output joins
  /// the base's before the tp reduction.
  void set_lora(const LoraPair& p) { lora_ = p; }
  const LoraPair& lora() const { return lora_; }

  /// x [T, in/tp]. Returns this rank's reduced output rows [Tl, out] (Tl = T/tp under SP,
  /// else T) with the bias added, in `scratch` (keys "tp.y_full", "tp.y_local"; valid until
  /// the next use of those keys).
  const float* forward(const float* x, int64_t T, Workspace& scratch) const;
  /// x: the forward input [T, in/tp]; dy_local [Tl, out]. Writes dx [T, in/tp] and
  /// accumulates dW (and db). Uses scratch key "tp.dy_full" under SP.
  void backward(const float* x, const float* dy_local, float* dx, int64_t T, Workspace& scratch) const;

 private:
  const TensorTable* table_ = nullptr;
  TensorParallel tp_;
  int64_t local_in_ = 0, out_ = 0;
  size_t weight_ = kNoParam, bias_ = kNoParam;
  LoraPair lora_;
};

}  // namespace twinkle::parallel
