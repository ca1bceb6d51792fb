// Per-token FLOPs of the parts of a Qwen3 model (see twinkle/model/qwen3_flops.h).
#include "twinkle/model/qwen3_flops.h"

namespace twinkle {

int64_t qwen3_layer_matmul_flops(const ModelConfig& c, int64_t layer) {
  const int64_t H = c.hidden_size, D = c.head_dim;
  const int64_t q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  int64_t f = 2 * H * (q + 2 * kv) + 2 * q * H;
  if (c.is_moe_layer(layer))
    f += 2 * H * c.num_experts + 2 * c.num_experts_per_tok * 3 * H * c.moe_intermediate_size;
  else
    f += 2 * 3 * H * c.intermediate_size;
  return f;
}

int64_t qwen3_head_matmul_flops(const ModelConfig& c) { return 2 * c.vocab_size * c.hidden_size; }

double qwen3_attention_flops(const ModelConfig& c, double S) {
  return 4.0 * static_cast<double>(c.num_attention_heads * c.head_dim) * S;
}

parallel::StageCosts qwen3_stage_costs(const ModelConfig& c) {
  parallel::StageCosts s;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) s.layer.push_back(qwen3_layer_matmul_flops(c, l));
  s.first_extra = 0;
  s.last_extra = qwen3_head_matmul_flops(c);
  return s;
}

}  // namespace twinkle
