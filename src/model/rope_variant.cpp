// ModelConfig -> kernels::cpu::RopeVariant (see twinkle/model/rope_variant.h).
#include "twinkle/model/rope_variant.h"

#include "twinkle/core/error.h"

namespace twinkle {

kernels::cpu::RopeVariant rope_variant(const ModelConfig& cfg) {
  const auto& r = cfg.rope_scaling;
  check(r.rope_type == "default" || r.rope_type == "linear" || r.rope_type == "dynamic" || r.rope_type == "yarn",
        (cfg.source.empty() ? std::string("ModelConfig") : cfg.source) + ": rope_type '" + r.rope_type +
            "' is not supported (supported: default, linear, dynamic, yarn)");
  kernels::cpu::RopeVariant v;
  v.type = r.rope_type;
  v.factor = r.factor;
  v.max_position_embeddings = cfg.max_position_embeddings;
  v.original_max_position_embeddings = r.original_max_position_embeddings;
  v.attention_factor = r.attention_factor;
  v.mscale = r.mscale;
  v.mscale_all_dim = r.mscale_all_dim;
  v.beta_fast = r.beta_fast;
  v.beta_slow = r.beta_slow;
  v.truncate = r.truncate;
  return v;
}

}  // namespace twinkle
