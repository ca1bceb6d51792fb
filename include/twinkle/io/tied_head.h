// twinkle/io/tied_head.h — tie_word_embeddings versus the lm_head a checkpoint holds.
//
// transformers 5's rule (as summarised in vllm-project/vllm#51063): a config that says
// tie_word_embeddings = true is tied when the
// checkpoint holds only one of model.embed_tokens.weight / lm_head.weight, or both with equal
// values; when it holds both with DIFFERENT values, both are kept (the model is untied) and a
// warning names the two tensors. (transformers 4.54 tied unconditionally and dropped the head.)
#pragma once
#include <string>

#include "twinkle/io/model_config.h"
#include "twinkle/io/safetensors.h"

namespace twinkle {

/// True when `ck` holds both model.embed_tokens.weight and lm_head.weight and they differ in
/// shape or in any element (compared as f32 values, a block of rows at a time). Throws
/// twinkle::Error from the reader (a malformed tensor).
bool checkpoint_head_differs(const CheckpointReader& ck);

/// Applies the rule above: when cfg.tie_word_embeddings and checkpoint_head_differs(ck), sets
/// cfg.tie_word_embeddings = false and returns the warning to print once ("<dir>:
/// tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight: ...").
/// Returns "" when nothing changed.
std::string untie_if_checkpoint_head_differs(ModelConfig& cfg, const CheckpointReader& ck);

}  // namespace twinkle
