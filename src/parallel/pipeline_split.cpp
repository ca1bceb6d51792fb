#include "twinkle/parallel/pipeline_split.h"

#include <string>

#include "twinkle/core/error.h"

namespace twinkle::parallel {

int LayerSplit::stage_of(int64_t layer) const {
  for (size_t s = 0; s < first.size(); ++s)
    if (layer >= first[s] && layer < first[s] + count[s]) return static_cast<int>(s);
  throw Error("layer " + std::to_string(layer) + " is outside the pipeline split");
}

LayerSplit split_layers(int64_t num_layers, int pp, const std::vector<int64_t>& custom) {
  if (pp > num_layers)
    throw Error("model does not fit the mesh: pp " + std::to_string(pp) + " is larger than num_hidden_layers " +
                std::to_string(num_layers));
  LayerSplit out;
  out.count = custom;
  if (out.count.empty())
    for (int s = 0; s < pp; ++s) out.count.push_back(num_layers / pp + (s < num_layers % pp ? 1 : 0));
  check(static_cast<int>(out.count.size()) == pp,
        "layers_per_stage has " + std::to_string(out.count.size()) + " entries but pp is " + std::to_string(pp));
  int64_t sum = 0;
  for (auto n : out.count) {
    check(n >= 1, "layers_per_stage: every stage needs at least one layer");
    out.first.push_back(sum);
    sum += n;
  }
  check(sum == num_layers, "layers_per_stage sums to " + std::to_string(sum) + " but num_hidden_layers is " +
                               std::to_string(num_layers));
  return out;
}

}  // namespace twinkle::parallel
