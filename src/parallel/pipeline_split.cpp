#include "twinkle/parallel/pipeline_split.h"

#include <algorithm>
#include <limits>
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

namespace twinkle::parallel {

bool is_balanced_split_mode(const std::string& mode) {
  if (mode == "balanced") return true;
  if (mode == "even") return false;
  throw Error("pipeline_split must be \"balanced\" or \"even\", got \"" + mode + "\"");
}

LayerSplit balanced_split(const StageCosts& c, int pp) {
  const auto L = static_cast<int64_t>(c.layer.size());
  if (pp > L)
    throw Error("model does not fit the mesh: pp " + std::to_string(pp) + " is larger than num_hidden_layers " +
                std::to_string(L));
  check(pp >= 1, "balanced_split: pp must be >= 1");
  check(c.first_extra >= 0 && c.last_extra >= 0, "balanced_split: negative stage cost");
  std::vector<int64_t> prefix(static_cast<size_t>(L) + 1, 0);
  for (int64_t i = 0; i < L; ++i) {
    check(c.layer[static_cast<size_t>(i)] >= 0, "balanced_split: negative layer cost");
    prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + c.layer[static_cast<size_t>(i)];
  }
  // cost of stage s holding layers [a, b)
  auto cost = [&](int s, int64_t a, int64_t b) {
    int64_t v = prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)];
    if (s == 0) v += c.first_extra;
    if (s == pp - 1) v += c.last_extra;
    return v;
  };
  // best[s][i]: smallest possible maximum stage cost of stages s..pp-1 holding layers i..L-1.
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(pp) + 1,
                                         std::vector<int64_t>(static_cast<size_t>(L) + 1, inf));
  best[static_cast<size_t>(pp)][static_cast<size_t>(L)] = 0;
  for (int s = pp - 1; s >= 0; --s)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = i + 1; j <= L - (pp - 1 - s); ++j) {
        const int64_t rest = best[static_cast<size_t>(s) + 1][static_cast<size_t>(j)];
        if (rest == inf) continue;
        best[static_cast<size_t>(s)][static_cast<size_t>(i)] =
            std::min(best[static_cast<size_t>(s)][static_cast<size_t>(i)], std::max(cost(s, i, j), rest));
      }
  const int64_t target = best[0][0];
  // Among the splits reaching it: the smallest sum of squared stage costs (equal stages win, so
  // equal layers give the even split), then the most layers on earlier stages.
  // sq[s][i]: that sum for stages s..pp-1 holding layers i..L-1 with every stage <= target.
  using LD = long double;
  const LD none = std::numeric_limits<LD>::infinity();
  std::vector<std::vector<LD>> sq(static_cast<size_t>(pp) + 1, std::vector<LD>(static_cast<size_t>(L) + 1, none));
  sq[static_cast<size_t>(pp)][static_cast<size_t>(L)] = 0;
  auto term = [&](int s, int64_t a, int64_t b) {
    const LD v = static_cast<LD>(cost(s, a, b));
    return v * v + sq[static_cast<size_t>(s) + 1][static_cast<size_t>(b)];
  };
  for (int s = pp - 1; s >= 0; --s)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = i + 1; j <= L - (pp - 1 - s); ++j)
        if (cost(s, i, j) <= target && sq[static_cast<size_t>(s) + 1][static_cast<size_t>(j)] != none)
          sq[static_cast<size_t>(s)][static_cast<size_t>(i)] =
              std::min(sq[static_cast<size_t>(s)][static_cast<size_t>(i)], term(s, i, j));
  // Walk forward: each stage takes as many layers as keep that optimum.
  std::vector<int64_t> counts;
  int64_t i = 0;
  for (int s = 0; s < pp; ++s) {
    for (int64_t j = L - (pp - 1 - s); j > i; --j) {
      if (cost(s, i, j) <= target && sq[static_cast<size_t>(s) + 1][static_cast<size_t>(j)] != none &&
          term(s, i, j) == sq[static_cast<size_t>(s)][static_cast<size_t>(i)]) {
        counts.push_back(j - i);
        i = j;
        break;
      }
    }
  }
  check(i == L && static_cast<int>(counts.size()) == pp, "balanced_split: internal error");
  return split_layers(L, pp, counts);
}

}  // namespace twinkle::parallel
