// twinkle/model/qwen3_mlp.h — the SwiGLU MLP of one Qwen3 decoder layer, tensor-parallel.
//
// HF Qwen3MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases. Parallel layout as
// Megatron-core's MLP: gate and up one ColumnParallelLinear (linear_fc1; their local
// weights adjacent, gate then up, so a fused kernel can run them as one [2*I/tp, H]
// GEMM: gate_up_proj.weight_block()), down a RowParallelLinear (linear_fc2).
// An MoE block (Qwen3MoeSparseMoeBlock) is a sibling of this class with the same
// forward/backward signature and its own activation struct.
#pragma once
#include <cstdint>

#include "twinkle/core/workspace.h"
#include "twinkle/io/model_config.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/stage_batch.h"
#include "twinkle/parallel/column_parallel_linear.h"
#include "twinkle/parallel/row_parallel_linear.h"

namespace twinkle {

class Qwen3MLP {
 public:
  Qwen3MLP() = default;
  /// Adds model.layers.{layer}.mlp.gate_proj, up_proj, down_proj to `table`, in that order.
  Qwen3MLP(parallel::TensorTable& table, const parallel::TensorParallel& tp, const ModelConfig& cfg, int64_t layer);

  /// x_local [Tl, H]. Saves into `a` and returns the down projection's reduced output rows
  /// [Tl, H] in `scratch` (RowParallelLinear::forward).
  const float* forward(const float* x_local, const StageBatch& b, MlpActivations& a, Workspace& scratch) const;
  /// dy_local [Tl, H]. Accumulates the gradients and returns d(x_local) [Tl, H] in `scratch`.
  const float* backward(const float* dy_local, const StageBatch& b, const MlpActivations& a, Workspace& scratch) const;

  parallel::ColumnParallelLinear gate_up_proj;  ///< parts gate_proj, up_proj
  parallel::RowParallelLinear down_proj;

 private:
  int64_t I_ = 0;  // local intermediate size
};

}  // namespace twinkle
