// twinkle/parallel/pipeline_split.h — which decoder layers each pipeline stage holds.
//
// Three ways: a custom split lists the count per stage; "even" is Megatron-core's default
// (layers split evenly over pp stages, the first num_layers % pp stages taking one more:
// get_num_layers_to_build without uneven first/last overrides); "balanced" (twinkle's default)
// gives each stage a contiguous run of layers so that the most expensive stage is as cheap as
// possible, counting the embedding on the first stage and the lm head + loss on the last one —
// the cost-based form of Megatron's account_for_embedding_in_pipeline_split /
// account_for_loss_in_pipeline_split, which count each as one decoder layer.
#pragma once
#include <cstdint>
#include <string>
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

/// What a stage costs, in any additive unit (twinkle passes forward matmul FLOPs per token,
/// model/qwen3_flops.h): one entry per decoder layer, plus what only the first stage
/// (embedding) and only the last stage (final norm, lm head, cross entropy) carry.
struct StageCosts {
  std::vector<int64_t> layer;
  int64_t first_extra = 0;
  int64_t last_extra = 0;
};

/// The balanced split: contiguous runs of >= 1 layer per stage minimising the largest stage
/// cost (first stage + first_extra, last + last_extra); among the splits reaching that minimum,
/// the one with the smallest sum of squared stage costs, then the one whose counts are
/// lexicographically largest (earlier stages take more, as the even rule gives the remainder to
/// the first stages), so equal costs and no extras give exactly the even split. Exact (dynamic
/// programming over the split points, O(pp * layers^2)); the same inputs give the same split
/// on every rank. Throws twinkle::Error when pp > layers or a cost
/// is negative.
LayerSplit balanced_split(const StageCosts& costs, int pp);

/// Parses the split mode of the options ("balanced" | "even"); throws twinkle::Error naming
/// pipeline_split otherwise.
bool is_balanced_split_mode(const std::string& mode);

}  // namespace twinkle::parallel
