// Validation of the model/training option set and the max-steps rule shared by `twinkle
// train` and the recipes (see validate() and resolve_max_steps() in megatron_model.h).
#include "twinkle/core/option_check.h"
#include "twinkle/train/megatron_model.h"

namespace twinkle {

void validate(const MegatronModelOptions& o) {
  const char* s = "train";
  check_option(o.micro_batch_size >= 0, s, "micro_batch_size", ">= 0 (0 = min(2, rows of the rank))",
               o.micro_batch_size);
  check_option(o.lm_head_chunk_tokens >= 1, s, "lm_head_chunk_tokens", ">= 1", o.lm_head_chunk_tokens);
  for (int64_t n : o.layers_per_stage) check_option(n >= 1, s, "layers_per_stage", "a list of counts >= 1", n);
  check_option(o.pipeline_split == "balanced" || o.pipeline_split == "even", s, "pipeline_split",
               "\"balanced\" (equal FLOPs per stage) or \"even\"", o.pipeline_split);
  check_option(o.recompute_granularity == "full" || o.recompute_granularity == "selective" ||
                   o.recompute_granularity == "none",
               s, "recompute_granularity", "\"full\", \"selective\" or \"none\"", o.recompute_granularity);
  check_option(o.on_nonfinite == "error" || o.on_nonfinite == "skip", s, "on_nonfinite", "\"error\" or \"skip\"",
               o.on_nonfinite);
  check_option(o.cp_comm_type == "p2p" || o.cp_comm_type == "a2a", s, "cp_comm_type",
               "\"p2p\" (ring attention) or \"a2a\" (Ulysses)", o.cp_comm_type);
  check_option(o.bucket_size >= 0, s, "bucket_size", ">= 0 elements (0 = the optimizer's bucket_bytes)",
               o.bucket_size);
  check_option(o.kernels == "fused" || o.kernels == "reference", s, "kernels", "\"fused\" or \"reference\"",
               o.kernels);
  check_option(o.mixed_precision == "fp32" || o.mixed_precision == "bf16", s, "mixed_precision",
               "\"fp32\" or \"bf16\" (--fp32 / --bf16)", o.mixed_precision);
}

int64_t resolve_max_steps(int64_t max_steps, int64_t batches_per_epoch) {
  check_option(max_steps >= 0, "train", "max_steps", ">= 0 (0 = one epoch)", max_steps);
  return max_steps > 0 ? max_steps : batches_per_epoch;
}

}  // namespace twinkle
