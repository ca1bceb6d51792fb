#include "twinkle/model/qwen3_decoder_layer.h"

#include <string>


namespace twinkle {

Qwen3DecoderLayer::Qwen3DecoderLayer(parallel::TensorTable& table, const parallel::TensorParallel& tp,
                                     const ModelConfig& cfg, int64_t layer, const kernels::cpu::RopeTable* rope,
                                     std::shared_ptr<dist::ProcessGroup> ep, std::shared_ptr<dist::ProcessGroup> etp)
    : is_moe(cfg.is_moe() && cfg.is_moe_layer(layer)), H_(cfg.hidden_size), tp_(tp) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  // Under sequence parallelism each rank normalises T/tp token rows: partial weight gradients.
  input_layernorm = RMSNorm(table, p + "input_layernorm.weight", H_, cfg.rms_norm_eps, tp.sequence_parallel);
  self_attn = Qwen3Attention(table, tp, cfg, layer, rope);
  post_attention_layernorm =
      RMSNorm(table, p + "post_attention_layernorm.weight", H_, cfg.rms_norm_eps, tp.sequence_parallel);
  if (is_moe)
    moe = Qwen3MoeBlock(table, tp, std::move(ep), cfg, layer, std::move(etp));
  else
    mlp = Qwen3MLP(table, tp, cfg, layer);
}

void Qwen3DecoderLayer::forward(const float* x, const StageBatch& b, DecoderLayerActivations& a,
                                Workspace& scratch) const {
  const int64_t Tl = tp_.local_rows(b.T);
  input_layernorm.forward(x, a.ln1, a.rstd1, Tl);
  // h = x + attention; ln2 = RMSNorm(h) in one pass (add_rms_norm op)
  post_attention_layernorm.add_forward(x, self_attn.forward(a.ln1, b, a.attn, scratch), a.h, a.ln2, a.rstd2, Tl);
  const float* y = is_moe ? moe.forward(a.ln2, b, a.moe, scratch) : mlp.forward(a.ln2, b, a.mlp, scratch);
  post_attention_layernorm.kernels().add.add(a.out, a.h, y, Tl * H_);
}

void Qwen3DecoderLayer::backward(const float* x, const float* dy, float* dx, const StageBatch& b,
                                 const DecoderLayerActivations& a, Workspace& scratch) const {
  const int64_t Tl = tp_.local_rows(b.T);
  float* dh = scratch.get("layer.dh", {Tl, H_}).f32();
  // h feeds ln2 and the residual: dh = RMSNorm backward + dy; likewise dx = ... + dh
  const float* dmlp = is_moe ? moe.backward(dy, b, a.moe, scratch) : mlp.backward(dy, b, a.mlp, scratch);
  post_attention_layernorm.add_backward(a.h, a.rstd2, dmlp, dy, dh, Tl);
  input_layernorm.add_backward(x, a.rstd1, self_attn.backward(dh, b, a.attn, scratch), dh, dx, Tl);
}

}  // namespace twinkle
