// twinkle/model/stage_batch.h — a micro-batch as one pipeline stage sees it.
#pragma once
#include <cstdint>
#include <vector>

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
};

}  // namespace twinkle
