#include "twinkle/model/qwen3_mlp.h"

#include <string>


namespace twinkle {

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
  if (gate_up_proj.has_weight_block()) {  // gate|up as one GEMM + SwiGLU (gate_up_swiglu op)
    a.x = gate_up_proj.forward_swiglu(x_local, a.x_full, a.gu, a.act, T);
  } else {  // two GEMMs: gate in the first T*I floats of gu, up in the second
    float* const proj[2] = {a.gu, a.gu + T * I_};
    a.x = gate_up_proj.forward(x_local, a.x_full, proj, T, scratch);
    gate_up_proj.kernels().swiglu.forward(a.gu, a.gu + T * I_, a.act, T * I_);
  }
  return down_proj.forward(a.act, T, scratch);
}

const float* Qwen3MLP::backward(const float* dy_local, const StageBatch& b, const MlpActivations& a,
                                Workspace& scratch) const {
  const int64_t T = b.T;
  float* dact = scratch.get("mlp.dact", {T, I_}).f32();
  down_proj.backward(a.act, dy_local, dact, T, scratch);
  if (gate_up_proj.has_weight_block()) return gate_up_proj.backward_swiglu(a.x, a.gu, dact, T, scratch);
  float* dgu = scratch.get("mlp.dgu", {T, 2 * I_}).f32();
  gate_up_proj.kernels().swiglu.backward(a.gu, a.gu + T * I_, dact, dgu, dgu + T * I_, T * I_);
  const float* const dproj[2] = {dgu, dgu + T * I_};
  return gate_up_proj.backward(a.x, dproj, T, scratch);
}

}  // namespace twinkle
