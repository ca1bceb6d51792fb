// twinkle/model/qwen3_decoder_layer.h — one Qwen3 decoder layer, tensor-parallel.
//
// HF Qwen3DecoderLayer (pre-norm):
//   h   = x + self_attn(input_layernorm(x))
//   out = h + mlp(post_attention_layernorm(h))
// where mlp is the dense Qwen3MLP, or for a Qwen3-MoE layer (ModelConfig::is_moe_layer,
// transformers' Qwen3MoeDecoderLayer rule) the sparse Qwen3MoeBlock.
// x, h, out are [Tl, H] (this rank's token rows under sequence parallelism, else all T);
// the parallel regions and their collectives live in the layer types underneath
// (parallel/column_parallel_linear.h, parallel/row_parallel_linear.h).
#pragma once
#include <cstdint>
#include <memory>

#include "twinkle/model/qwen3_attention.h"
#include "twinkle/model/qwen3_mlp.h"
#include "twinkle/model/qwen3_moe_block.h"

namespace twinkle {

class Qwen3DecoderLayer {
 public:
  Qwen3DecoderLayer() = default;
  /// Adds the layer's tensors to `table` in HF order: input_layernorm, self_attn (q, k, v,
  /// o, q_norm, k_norm), post_attention_layernorm, mlp (gate, up, down; or for an MoE layer
  /// the router gate and the experts, qwen3_moe_block.h). `ep`: the expert-parallel group of
  /// an MoE layer (nullptr: one ep rank).
  Qwen3DecoderLayer(parallel::TensorTable& table, const parallel::TensorParallel& tp, const ModelConfig& cfg,
                    int64_t layer, const kernels::cpu::RopeTable* rope,
                    std::shared_ptr<dist::ProcessGroup> ep = nullptr,
                    std::shared_ptr<dist::ProcessGroup> etp = nullptr);

  /// x [Tl, H] (kept by the caller until backward). Saves into `a`; the output is a.out.
  void forward(const float* x, const StageBatch& b, DecoderLayerActivations& a, Workspace& scratch) const;
  /// dy [Tl, H] = d(out). Writes dx [Tl, H] (must not alias dy) and accumulates the gradients.
  void backward(const float* x, const float* dy, float* dx, const StageBatch& b, const DecoderLayerActivations& a,
                Workspace& scratch) const;

  RMSNorm input_layernorm;
  Qwen3Attention self_attn;
  RMSNorm post_attention_layernorm;
  Qwen3MLP mlp;        ///< dense layers
  Qwen3MoeBlock moe;   ///< MoE layers
  bool is_moe = false;

 private:
  int64_t H_ = 0;
  parallel::TensorParallel tp_;
};

}  // namespace twinkle
