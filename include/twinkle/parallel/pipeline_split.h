// twinkle/parallel/pipeline_split.h — which decoder layers each pipeline stage holds.
//
// Megatron-core's default: layers split evenly over pp stages, the first
// num_layers % pp stages taking one more (get_num_layers_to_build without uneven
// first/last overrides); a custom split lists the count per stage.
#pragma once
#include <cstdint>
#include <vector>

namespace twinkle::parallel {

struct LayerSplit {
  std::vector<int64_t> first;  ///< first global layer of each stage
  std::vector<int64_t> count;  ///< layers of each stage
  /// Stage holding global layer `layer` (throws twinkle::Error when out of range).
  int stage_of(int64_t layer) const;
};

/// Splits `num_layers` over `pp` stages: `custom` (one count per stage, each >= 1, summing
/// to num_layers) or, when empty, evenly. Throws twinkle::Error naming the mismatch
/// ("pp 4 is larger than num_hidden_layers 2", a custom split of the wrong size or sum).
LayerSplit split_layers(int64_t num_layers, int pp, const std::vector<int64_t>& custom = {});

}  // namespace twinkle::parallel
