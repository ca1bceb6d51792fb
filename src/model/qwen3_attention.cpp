#include "twinkle/model/qwen3_attention.h"

#include <cmath>
#include <string>


namespace twinkle {

Qwen3Attention::Qwen3Attention(parallel::TensorTable& table, const parallel::TensorParallel& tp,
                               const ModelConfig& cfg, int64_t layer, const kernels::cpu::RopeTable* rope)
    : rope_(rope), layer_(layer), D_(cfg.head_dim), hq_(cfg.num_attention_heads / tp.size),
      hkv_(cfg.num_key_value_heads / tp.size), window_(cfg.attention_window(layer)) {
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn.";
  const int64_t D = cfg.head_dim;
  qkv_proj = parallel::ColumnParallelLinear(table, tp, cfg.hidden_size,
                                            {{p + "q_proj", cfg.num_attention_heads * D},
                                             {p + "k_proj", cfg.num_key_value_heads * D},
                                             {p + "v_proj", cfg.num_key_value_heads * D}},
                                            cfg.attention_bias);
  o_proj = parallel::RowParallelLinear(table, tp, p + "o_proj", cfg.num_attention_heads * D, cfg.hidden_size,
                                       cfg.attention_bias);
  // Each tp rank normalises only its own heads: the weight gradient is a tp-partial sum.
  q_norm = RMSNorm(table, p + "q_norm.weight", D, cfg.rms_norm_eps, tp.size > 1);
  k_norm = RMSNorm(table, p + "k_norm.weight", D, cfg.rms_norm_eps, tp.size > 1);
}

const float* Qwen3Attention::forward(const float* x_local, const StageBatch& b, AttentionActivations& a,
                                     Workspace& scratch) const {
  const int64_t T = b.T;
  float* const proj[3] = {a.q_pre, a.k_pre, a.v};
  a.x = qkv_proj.forward(x_local, a.x_full, proj, T, scratch);
  // q_norm / k_norm and RoPE in one pass per head row (the qk_norm_rope op)
  q_norm.forward_rope(a.q_pre, a.q, a.rstd_q, b.positions_ptr(), *rope_, T, hq_);
  k_norm.forward_rope(a.k_pre, a.k, a.rstd_k, b.positions_ptr(), *rope_, T, hkv_);
  recompute_core(b, a);
  return o_proj.forward(a.ctx, T, scratch);
}

void Qwen3Attention::recompute_core(const StageBatch& b, AttentionActivations& a) const {
  const int64_t D = D_;
  const int64_t nseg = static_cast<int64_t>(b.cu_seqlens.size()) - 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  if (b.cp) {  // context parallelism: ring or Ulysses over the cp group (state keyed by this record)
    b.cp_attention->forward(&a, *b.cp, a.q, a.k, a.v, a.ctx, a.lse, hq_, hkv_, D, scale, window_,
                            &qkv_proj.kernels().attention);
  } else {
    qkv_proj.kernels().attention.forward(a.q, a.k, a.v, a.ctx, a.lse, b.cu_seqlens_ptr(), nseg, hq_, hkv_, D,
                                         scale, window_);
  }
}

const float* Qwen3Attention::backward(const float* dy_local, const StageBatch& b, const AttentionActivations& a,
                                      Workspace& scratch) const {
  const int64_t T = b.T, D = D_, nq = hq_ * D, nkv = hkv_ * D;
  const int64_t nseg = static_cast<int64_t>(b.cu_seqlens.size()) - 1;
  float* dctx = scratch.get("attn.dctx", {T, nq}).f32();
  o_proj.backward(a.ctx, dy_local, dctx, T, scratch);
  float* dq = scratch.get("attn.dq", {T, nq}).f32();
  float* dk = scratch.get("attn.dk", {T, nkv}).f32();
  float* dv = scratch.get("attn.dv", {T, nkv}).f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  if (b.cp)
    b.cp_attention->backward(&a, *b.cp, a.q, a.k, a.v, a.ctx, a.lse, dctx, dq, dk, dv, hq_, hkv_, D, scale, window_,
                             &qkv_proj.kernels().attention);
  else
    qkv_proj.kernels().attention.backward(a.q, a.k, a.v, a.ctx, a.lse, dctx, dq, dk, dv, b.cu_seqlens_ptr(), nseg,
                                          hq_, hkv_, D, scale, window_);
  q_norm.backward_rope(a.q_pre, a.rstd_q, b.positions_ptr(), *rope_, dq, dq, T, hq_);
  k_norm.backward_rope(a.k_pre, a.rstd_k, b.positions_ptr(), *rope_, dk, dk, T, hkv_);
  const float* const dproj[3] = {dq, dk, dv};
  return qkv_proj.backward(a.x, dproj, T, scratch);
}

}  // namespace twinkle
