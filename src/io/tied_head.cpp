// tie_word_embeddings versus the checkpoint's lm_head (see twinkle/io/tied_head.h).
#include "twinkle/io/tied_head.h"

#include <algorithm>
#include <cstdint>

namespace twinkle {

namespace {
const char* const kEmbed = "model.embed_tokens.weight";
const char* const kHead = "lm_head.weight";
}  // namespace

bool checkpoint_head_differs(const CheckpointReader& ck) {
  if (!ck.contains(kEmbed) || !ck.contains(kHead)) return false;
  const TensorInfo& e = ck.info(kEmbed);
  const TensorInfo& h = ck.info(kHead);
  if (e.shape != h.shape) return true;
  if (e.shape.empty() || e.shape[0] == 0) return false;
  int64_t row = 1;
  for (size_t i = 1; i < e.shape.size(); ++i) row *= e.shape[i];
  const int64_t rows = e.shape[0];
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(1, row));  // ~16 MiB of f32
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    Tensor a = ck.load_f32_narrow(kEmbed, 0, r0, n);
    Tensor b = ck.load_f32_narrow(kHead, 0, r0, n);
    const float* pa = a.f32();
    const float* pb = b.f32();
    for (int64_t i = 0, m = a.numel(); i < m; ++i)
      if (pa[i] != pb[i]) return true;
  }
  return false;
}

std::string untie_if_checkpoint_head_differs(ModelConfig& cfg, const CheckpointReader& ck) {
  if (!cfg.tie_word_embeddings || !checkpoint_head_differs(ck)) return "";
  cfg.tie_word_embeddings = false;
  return ck.dir() + ": tie_word_embeddings is true but the checkpoint's lm_head.weight differs from "
                    "model.embed_tokens.weight: keeping both (untied, as transformers 5 does); the head is "
                    "trained separately and saved with tie_word_embeddings false";
}

}  // namespace twinkle
