#include "twinkle/model/qwen3_mlp.h"

#include <string>

#include "twinkle/kernels/cpu/swiglu.h"

namespace twinkle {

namespace k = kernels::cpu;

Qwen3MLP::Qwen3MLP(parallel::TensorTable& table, const parallel::TensorParallel& tp, const ModelConfig& cfg,
                   int64_t layer)
    : I_(cfg.intermediate_size / tp.size) {
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  gate_up_proj = parallel::ColumnParallelLinear(
      table, tp, cfg.hidden_size, {{p + "gate_proj", cfg.intermediate_size}, {p + "up_proj", cfg.intermediate_size}},
      /*bias=*/false);
  down_proj = parallel::RowParallelLinear(table, tp, p + "down_proj", cfg.intermediate_size, cfg.hidden_size, false);
}

const float* Qwen3MLP::forward(const float* x_local, const StageBatch& b, MlpActivations& a, Workspace& scratch) const {
  const int64_t T = b.T;
  float* const proj[2] = {a.gate, a.up};
  a.x = gate_up_proj.forward(x_local, a.x_full, proj, T);
  k::swiglu_forward(a.gate, a.up, a.act, T * I_);
  return down_proj.forward(a.act, T, scratch);
}

const float* Qwen3MLP::backward(const float* dy_local, const StageBatch& b, const MlpActivations& a,
                                Workspace& scratch) const {
  const int64_t T = b.T;
  float* dact = scratch.get("mlp.dact", {T, I_}).f32();
  down_proj.backward(a.act, dy_local, dact, T, scratch);
  float* dgate = scratch.get("mlp.dgate", {T, I_}).f32();
  float* dup = scratch.get("mlp.dup", {T, I_}).f32();
  k::swiglu_backward(a.gate, a.up, dact, dgate, dup, T * I_);
  const float* const dproj[2] = {dgate, dup};
  return gate_up_proj.backward(a.x, dproj, T, scratch);
}

}  // namespace twinkle
