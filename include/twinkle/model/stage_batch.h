// twinkle/model/stage_batch.h — a micro-batch as one pipeline stage sees it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "twinkle/core/tensor.h"
#include "twinkle/parallel/cp_attention.h"

namespace twinkle {

/// The MicroBatch (data/batch.h) plus shifted targets and, under sequence parallelism,
/// padding so the token count divides by tp. Built by Qwen3Model::prepare.
struct StageBatch {
  int64_t T = 0;                      ///< tokens (padded to a multiple of tp under SP)
  std::vector<int32_t> ids;           ///< [T]
  std::vector<int32_t> targets;       ///< [T]: labels shifted by one inside each segment, -100 elsewhere
  std::vector<int32_t> positions;     ///< [T]
  std::vector<int32_t> cu_seqlens;    ///< segments of the token axis
  int64_t num_targets = 0;            ///< targets != -100
  std::vector<uint8_t> token_mask;    ///< [T] 1 = real token, 0 = right padding or SP padding
  int64_t num_real = 0;               ///< tokens with token_mask 1
  /// [T] each token's identity in the step's global batch, parallel::lora_token_key(row of
  /// MicroBatch::segment_row, position in the segment); SP padding gets keys no row has. Set
  /// only when the model's adapter has lora_dropout > 0 (the dropout masks are keyed by it).
  std::vector<uint64_t> lora_token_key;
  /// Context parallelism (cp > 1; null otherwise): the tokens above are this cp rank's
  /// load-balanced share (parallel/cp_split.h: ids, shifted targets and GLOBAL positions),
  /// `cp` the layout the attention needs and `cp_attention` the model's ring / Ulysses entry,
  /// which the attention layers call instead of the flash kernel (cu_seqlens is then unused).
  std::shared_ptr<const parallel::CpLayout> cp;
  std::shared_ptr<parallel::ContextParallelAttention> cp_attention;

  /// Device "cuda" (Qwen3Model::prepare uploads once per micro-batch; null on the host): device
  /// copies of ids, targets, positions, cu_seqlens and token_mask, and the ids the embedding backward reads
  /// (the padding id masked to -1, so its row gets no gradient), carved from `device_ints`.
  Tensor device_ints;
  const int32_t* dev_ids = nullptr;
  const int32_t* dev_targets = nullptr;
  const int32_t* dev_positions = nullptr;
  const int32_t* dev_cu_seqlens = nullptr;
  const int32_t* dev_ids_nopad = nullptr;
  const uint8_t* dev_token_mask = nullptr;  ///< [T] the device copy of token_mask
  /// The pointers the kernels read: the device copies when present, else the host vectors.
  const int32_t* ids_ptr() const { return dev_ids ? dev_ids : ids.data(); }
  const int32_t* targets_ptr() const { return dev_targets ? dev_targets : targets.data(); }
  const int32_t* positions_ptr() const { return dev_positions ? dev_positions : positions.data(); }
  const int32_t* cu_seqlens_ptr() const { return dev_cu_seqlens ? dev_cu_seqlens : cu_seqlens.data(); }
  const uint8_t* token_mask_ptr() const { return dev_token_mask ? dev_token_mask : token_mask.data(); }
};

}  // namespace twinkle
