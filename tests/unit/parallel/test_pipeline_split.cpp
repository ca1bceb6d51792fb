// The balanced pipeline split (src/parallel/pipeline_split.cpp balanced_split) against a brute-force
// enumeration of every composition of the layers, and hand-worked cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "twinkle/core/error.h"
#include "twinkle/parallel/pipeline_layout.h"
#include "twinkle/parallel/pipeline_split.h"

using namespace twinkle;
using namespace twinkle::parallel;
using V = std::vector<int64_t>;

namespace {

// Every composition of L layers into pp stages of >= 1; the smallest largest-stage cost, then the
// smallest sum of squared stage costs, then the lexicographically largest counts.
V brute_force(const StageCosts& c, int pp) {
  const int64_t L = static_cast<int64_t>(c.layer.size());
  V best;
  int64_t best_cost = -1, best_sq = 0;
  V cur;
  std::function<void(int64_t)> rec = [&](int64_t used) {
    if (static_cast<int>(cur.size()) == pp - 1) {
      cur.push_back(L - used);
      if (cur.back() >= 1) {
        int64_t worst = 0, at = 0, sq = 0;
        for (int s = 0; s < pp; ++s) {
          int64_t v = 0;
          for (int64_t k = 0; k < cur[static_cast<size_t>(s)]; ++k) v += c.layer[static_cast<size_t>(at + k)];
          at += cur[static_cast<size_t>(s)];
          if (s == 0) v += c.first_extra;
          if (s == pp - 1) v += c.last_extra;
          worst = std::max(worst, v);
          sq += v * v;
        }
        if (best_cost < 0 || worst < best_cost || (worst == best_cost && sq < best_sq) ||
            (worst == best_cost && sq == best_sq && cur > best))
          best_cost = worst, best_sq = sq, best = cur;
      }
      cur.pop_back();
      return;
    }
    for (int64_t n = 1; used + n < L; ++n) {
      cur.push_back(n);
      rec(used + n);
      cur.pop_back();
    }
  };
  rec(0);
  return best;
}

}  // namespace

TEST(BalancedSplit, EqualLayersNoExtrasIsTheEvenSplit) {
  for (int64_t L : {4, 7, 8, 13})
    for (int pp = 1; pp <= std::min<int64_t>(L, 5); ++pp)
      EXPECT_EQ(balanced_split({V(static_cast<size_t>(L), 10), 0, 0}, pp).count, split_layers(L, pp).count)
          << L << " layers, pp " << pp;
}

TEST(BalancedSplit, HeavyHeadMovesLayersOffTheLastStage) {
  // "small" of bench/layout_bench: 4 layers of 1,572,864 FLOPs per token, lm head 2 * 32000 * 256.
  StageCosts c{V(4, 1'572'864), 0, 16'384'000};
  EXPECT_EQ(balanced_split(c, 2).count, (V{3, 1}));
  // Megatron's account_for_embedding / loss rule on 14 layers, pp 4: embedding and loss count
  // as one layer each; by cost the same split comes out when each extra costs one layer.
  EXPECT_EQ(balanced_split({V(14, 5), 5, 5}, 4).count, (V{3, 4, 4, 3}));
}

TEST(BalancedSplit, MatchesBruteForceOnRandomCosts) {
  std::mt19937_64 g(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t L = 1 + static_cast<int64_t>(g() % 9);
    const int pp = 1 + static_cast<int>(g() % static_cast<uint64_t>(L));
    StageCosts c;
    for (int64_t i = 0; i < L; ++i) c.layer.push_back(1 + static_cast<int64_t>(g() % 20));
    c.first_extra = static_cast<int64_t>(g() % 30);
    c.last_extra = static_cast<int64_t>(g() % 60);
    const LayerSplit s = balanced_split(c, pp);
    EXPECT_EQ(s.count, brute_force(c, pp)) << "trial " << trial;
    int64_t sum = 0;
    for (size_t k = 0; k < s.count.size(); ++k) {
      EXPECT_EQ(s.first[k], sum);
      sum += s.count[k];
    }
    EXPECT_EQ(sum, L);
  }
}

TEST(BalancedSplit, Errors) {
  EXPECT_THROW(balanced_split({V(2, 1), 0, 0}, 3), Error);   // pp larger than the layers
  EXPECT_THROW(balanced_split({V{1, -1}, 0, 0}, 2), Error);  // negative cost
  EXPECT_TRUE(is_balanced_split_mode("balanced"));
  EXPECT_FALSE(is_balanced_split_mode("even"));
  EXPECT_THROW(is_balanced_split_mode("uniform"), Error);
}

// Megatron's pipeline_model_parallel_layout strings (pipeline_parallel_layer_layout.py), counted by hand.
TEST(PipelineLayout, MegatronsSyntax) {
  using twinkle::parallel::parse_pipeline_layout;
  EXPECT_EQ(parse_pipeline_layout("Et|t|t|tL"), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(parse_pipeline_layout("Et*3|(tt|)*2tL"), (std::vector<int64_t>{3, 2, 2, 1}));
  EXPECT_EQ(parse_pipeline_layout("E tt | ttt L", 2), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(parse_pipeline_layout("Et|((t|)*2)*2tL"), (std::vector<int64_t>{1, 1, 1, 1, 1, 1}));
  auto refuses = [](const std::string& s, const std::string& part, int stages = 0) {
    try {
      parse_pipeline_layout(s, stages);
      ADD_FAILURE() << s << " accepted";
    } catch (const twinkle::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << s << ": " << e.what();
    }
  };
  refuses("E|tt|ttL", "holds no decoder layer");       // a stage of only E
  refuses("Et|tt|L", "holds no decoder layer");
  refuses("tt|ttL", "first stage must start with 'E'");
  refuses("Ett|tt", "last stage must end with 'L'");
  refuses("Et|Et|tL", "'E' must open the first stage");
  refuses("EtL|tL", "'L' must close the last stage");
  refuses("Et|tm|tL", "multi-token prediction");
  refuses("Et|tx|tL", "unknown character 'x'");
  refuses("Et|tt|tL", "3 stages; pp x vpp is 4", 4);
  refuses("Et|(tt|*2tL", "'(' without ')'");
  refuses("EL*2|tL", "only 't'");
}
