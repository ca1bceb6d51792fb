// Dataset mixtures (twinkle/data/mixture.h): ms-swift's `ID#N` sampling rule, Twinkle's
// mix_dataset (concatenate / interleave) and the seeded shuffle, against orders computed by hand
// (and the interleave example of datasets' interleave_datasets docstring); the same global batches
// on dp 1 / 2 / 4 and an exact resume from a saved DataLoader position.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "error_of.h"
#include "twinkle/core/error.h"
#include "twinkle/data/dataloader.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/mixture.h"

using namespace twinkle;
using Order = std::vector<std::pair<int32_t, int64_t>>;

using twinkle::test_support::error_of;

namespace {

// rows {"v": base + i} for i < n
Dataset numbers(int base, int n, const std::string& name) {
  std::vector<json> rows;
  for (int i = 0; i < n; ++i) rows.push_back(json{{"v", base + i}});
  return Dataset::from_rows(rows, name);
}

std::vector<int> values(const Dataset& d) {
  std::vector<int> v;
  for (int64_t i = 0; i < d.size(); ++i) v.push_back(d[i]["v"].get<int>());
  return v;
}

MixOptions ordered(MixMode m) {
  MixOptions o;
  o.mode = m;
  o.sample_shuffle = false;
  return o;
}

}  // namespace

TEST(DatasetSpec, ParsesCountsRatiosAndPathsWithHashes) {
  auto s = DatasetSpec::parse("a.jsonl");
  EXPECT_EQ(s.id, "a.jsonl");
  EXPECT_FALSE(s.count || s.ratio);
  s = DatasetSpec::parse("ms://swift/self-cognition#500");
  EXPECT_EQ(s.id, "ms://swift/self-cognition");
  EXPECT_EQ(*s.count, 500);
  EXPECT_EQ(s.rows(100), 500);
  s = DatasetSpec::parse("d/x#0.25");
  EXPECT_EQ(s.id, "d/x");
  EXPECT_DOUBLE_EQ(*s.ratio, 0.25);
  EXPECT_EQ(s.rows(10), 2);  // floor(2.5)
  EXPECT_EQ(DatasetSpec::parse("d#2.0").rows(7), 14);
  EXPECT_EQ(DatasetSpec::parse("dir#v2/a.jsonl").id, "dir#v2/a.jsonl");
  for (const char* bad : {"a#", "a#0", "a#-3", "a#0.0", "a#1e3", "a#+1", "#5", "a#1.2.3"})
    EXPECT_NE(error_of([&] { DatasetSpec::parse(bad); }).find(std::string("--dataset '") + bad + "'"), std::string::npos)
        << bad;
  EXPECT_NE(error_of([] { DatasetSpec::parse("a#0.01").rows(10); }).find("selects no row"), std::string::npos);
  EXPECT_EQ(parse_mix_mode("interleave"), MixMode::Interleave);
  EXPECT_NE(error_of([] { parse_mix_mode("zip"); }).find("--dataset-mix 'zip'"), std::string::npos);
}

// ms-swift's sample_dataset: floor(N/n) whole copies in order, then N mod n rows of a permutation
// (dataset_shuffle=False: rows 0.. in order).
TEST(SampleIndices, MsSwiftRepeatThenRemainder) {
  EXPECT_EQ(sample_indices(5, 3, false, 1), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(sample_indices(5, 12, false, 1), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1}));
  EXPECT_EQ(sample_indices(3, 6, true, 1), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));  // no remainder: no draw
  EXPECT_EQ(sample_indices(4, 0, true, 1), std::vector<int64_t>{});
  for (uint64_t seed : {1u, 2u, 3u}) {
    const auto a = sample_indices(50, 113, true, seed);  // 2 copies + 13 sampled rows
    ASSERT_EQ(a.size(), 113u);
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(a[static_cast<size_t>(i)], i % 50);
    std::set<int64_t> rest(a.begin() + 100, a.end());
    EXPECT_EQ(rest.size(), 13u);  // without repeats
    EXPECT_TRUE(*rest.rbegin() < 50 && *rest.begin() >= 0);
    EXPECT_EQ(a, sample_indices(50, 113, true, seed));
  }
  // the remainder is random, not rows 0..12: seeds give different subsets
  EXPECT_NE(sample_indices(50, 13, true, 1), sample_indices(50, 13, true, 2));
  EXPECT_NE(sample_indices(50, 13, true, 1), sample_indices(50, 13, false, 1));
  EXPECT_NE(error_of([] { sample_indices(0, 1, true, 1); }).find("0 rows"), std::string::npos);
}

TEST(MixtureOrder, ConcatInterleaveAndShuffleByHand) {
  // concatenate_datasets: the first dataset's rows, then the second's
  EXPECT_EQ(mixture_order({3, 2}, {3, 2}, ordered(MixMode::Concat)), (Order{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}}));
  // with counts: #2 of 3 (rows 0, 1), #5 of 2 (rows 0 1 0 1 0)
  EXPECT_EQ(mixture_order({3, 2}, {2, 5}, ordered(MixMode::Concat)),
            (Order{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, 0}, {1, 1}, {1, 0}}));
  // interleave_datasets' docstring: d1 = [0, 1, 2], d2 = [10, 11, 12, 13], d3 = [20, 21, 22] give
  // [0, 10, 20, 1, 11, 21, 2, 12, 22] (round robin, first_exhausted: 3 · min(len) rows)
  Dataset d1 = numbers(0, 3, "d1"), d2 = numbers(10, 4, "d2"), d3 = numbers(20, 3, "d3");
  Dataset il = mix_datasets({&d1, &d2, &d3}, {DatasetSpec{"d1"}, DatasetSpec{"d2"}, DatasetSpec{"d3"}},
                            ordered(MixMode::Interleave));
  EXPECT_EQ(values(il), (std::vector<int>{0, 10, 20, 1, 11, 21, 2, 12, 22}));
  EXPECT_EQ(il.id(), "d1 + d2 + d3");
  // interleave after sampling: d2#8 is d2 twice, d1#2 its first two rows: 2 rounds
  Dataset il2 = mix_datasets({&d1, &d2}, {DatasetSpec::parse("d1#2"), DatasetSpec::parse("d2#8")},
                             ordered(MixMode::Interleave));
  EXPECT_EQ(values(il2), (std::vector<int>{0, 10, 1, 11}));
  // shuffle: a permutation of the concatenation, fixed by the seed
  MixOptions sh;
  sh.seed = 7;
  const Order a = mixture_order({3, 4}, {3, 4}, sh), b = mixture_order({3, 4}, {3, 4}, sh);
  EXPECT_EQ(a, b);
  Order sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, mixture_order({3, 4}, {3, 4}, ordered(MixMode::Concat)));
  const Order s7 = mixture_order({30, 40}, {30, 40}, sh);
  sh.seed = 8;
  EXPECT_NE(mixture_order({30, 40}, {30, 40}, sh), s7);
  EXPECT_NE(s7, mixture_order({30, 40}, {30, 40}, ordered(MixMode::Concat)));
}

// interleave_datasets(probabilities=..., stopping_strategy="first_exhausted"): rows drawn by weight,
// each dataset's in order, the order ending right after some dataset's last row.
TEST(MixtureOrder, InterleaveWithProbabilities) {
  MixOptions o = ordered(MixMode::Interleave);
  o.probabilities = {1, 0};
  EXPECT_EQ(mixture_order({3, 4}, {3, 4}, o), (Order{{0, 0}, {0, 1}, {0, 2}}));
  o.probabilities = {0, 2};
  EXPECT_EQ(mixture_order({3, 4}, {3, 4}, o), (Order{{1, 0}, {1, 1}, {1, 2}, {1, 3}}));
  o.probabilities = {0.5, 0.5};
  for (uint64_t seed : {1u, 2u, 3u}) {
    o.seed = seed;
    const Order a = mixture_order({20, 20}, {20, 20}, o);
    EXPECT_EQ(a, mixture_order({20, 20}, {20, 20}, o));
    int64_t next[2] = {0, 0};
    for (const auto& [d, r] : a) EXPECT_EQ(r, next[d]++) << "seed " << seed;  // each dataset in order
    EXPECT_TRUE(next[0] == 20 || next[1] == 20) << "seed " << seed;        // ends when one is exhausted
    EXPECT_EQ(a.back().second, 19);
    EXPECT_GT(std::min(next[0], next[1]), 0);
  }
  o.seed = 1;
  const Order s1 = mixture_order({20, 20}, {20, 20}, o);
  o.seed = 2;
  EXPECT_NE(s1, mixture_order({20, 20}, {20, 20}, o));
  // a 9:1 weighting takes about 9 rows of the first per row of the second
  o.probabilities = {9, 1};
  const Order w = mixture_order({2000, 2000}, {2000, 2000}, o);
  int64_t firsts = std::count_if(w.begin(), w.end(), [](const auto& p) { return p.first == 0; });
  EXPECT_EQ(firsts, 2000);
  EXPECT_NEAR(static_cast<double>(w.size() - firsts) / static_cast<double>(w.size()), 0.1, 0.03);
  for (const auto& bad : {std::vector<double>{1}, std::vector<double>{1, -1}, std::vector<double>{0, 0}})
    EXPECT_NE(error_of([&] {
                o.probabilities = bad;
                mixture_order({3, 4}, {3, 4}, o);
              }),
              "");
  MixOptions c = ordered(MixMode::Concat);
  c.probabilities = {1, 1};
  EXPECT_NE(error_of([&] { mixture_order({3, 4}, {3, 4}, c); }).find("interleave only"), std::string::npos);
}

TEST(MixDatasets, RowsKeepTheirNamesAndEachPartItsPreprocessor) {
  Dataset a = Dataset::from_rows({json{{"instruction", "i0"}, {"output", "o0"}}, json{{"instruction", "i1"}, {"output", "o1"}}},
                                 "alpaca.jsonl");
  Dataset b = Dataset::from_rows({json{{"query", "q0"}, {"response", "r0"}}}, "sc.jsonl");
  a.map(AlpacaPreprocessor());
  b.map(SelfCognitionProcessor("N", "A"));
  Dataset m = mix_datasets({&a, &b}, {DatasetSpec{"a"}, DatasetSpec::parse("b#3")}, ordered(MixMode::Concat));
  ASSERT_EQ(m.size(), 5);
  EXPECT_EQ(m.row_name(1), "alpaca.jsonl:2");
  EXPECT_EQ(m.row_name(4), "sc.jsonl:1");
  EXPECT_EQ(m[0]["messages"][0]["content"], "i0");
  EXPECT_EQ(m[3]["messages"][1]["content"], "q0");
  a.set_encoder([](const std::vector<Message>& ms, const std::string&) {
    EncodedRow r;
    r.input_ids = {static_cast<int32_t>(ms.size())};
    r.labels = r.input_ids;
    return std::vector<EncodedRow>{r};
  });
  a.encode();
  EXPECT_NE(error_of([&] { mix_datasets({&a, &b}, {DatasetSpec{"a"}, DatasetSpec{"b"}}, MixOptions{}); })
                .find("mix datasets before encode()"),
            std::string::npos);
}

// The mixture is one Dataset: the DataLoader's global batches are the same on dp 1, 2 and 4, and a
// loader restored from a saved position yields exactly the batches the uninterrupted one does.
TEST(MixDatasets, SameGlobalBatchesOnEveryDpSizeAndExactResume) {
  Dataset d1 = numbers(0, 7, "d1"), d2 = numbers(100, 5, "d2");
  for (auto* d : {&d1, &d2}) d->map([](const json& r) { return json{{"messages", {{{"role", "user"}, {"content", std::to_string(r["v"].get<int>())}}}}}; });
  MixOptions o;
  o.seed = 11;
  Dataset m = mix_datasets({&d1, &d2}, {DatasetSpec::parse("d1#10"), DatasetSpec{"d2"}}, o);
  ASSERT_EQ(m.size(), 15);
  m.set_encoder([](const std::vector<Message>& ms, const std::string&) {
    EncodedRow r;
    r.input_ids = {std::stoi(ms[0].content)};
    r.labels = r.input_ids;
    return std::vector<EncodedRow>{r};
  });
  m.encode();
  auto global = [&](int64_t dp, int64_t epochs) {
    std::vector<std::vector<int32_t>> steps;
    std::vector<DataLoader> loaders;
    for (int64_t r = 0; r < dp; ++r) loaders.emplace_back(m, DataLoaderOptions{.batch_size = 4, .shuffle = true, .seed = 3, .dp_rank = r, .dp_size = dp});
    for (int64_t e = 0; e < epochs; ++e)
      for (int64_t k = 0; k < loaders[0].size(); ++k) {
        std::vector<int32_t> ids;
        for (auto& l : loaders)
          for (const auto& row : l.batch(e, k).rows) ids.push_back(row.input_ids[0]);
        steps.push_back(ids);
      }
    return steps;
  };
  const auto one = global(1, 2);
  ASSERT_EQ(one.size(), 8u);  // 15 rows, batches of 4: 4 per epoch
  EXPECT_EQ(global(2, 2), one);
  EXPECT_EQ(global(4, 2), one);
  // d1#10 = d1 once + 3 sampled rows; d2 whole: every row of d2 once per epoch, of d1 once or twice
  std::multiset<int32_t> epoch0;
  for (size_t k = 0; k < 4; ++k) epoch0.insert(one[k].begin(), one[k].end());
  for (int v = 100; v < 105; ++v) EXPECT_EQ(epoch0.count(v), 1u) << v;
  size_t twice = 0;
  for (int v = 0; v < 7; ++v) twice += epoch0.count(v) == 2;
  EXPECT_EQ(twice, 3u);

  // resume: run 3 batches, save, restore into a fresh loader (a fresh mixture too: same seed, same
  // order), continue; the rest equals the uninterrupted run's
  DataLoader full(m, DataLoaderOptions{.batch_size = 4, .shuffle = true, .seed = 3, .dp_size = 1});
  std::vector<std::vector<int32_t>> all, resumed;
  DataLoaderState saved;
  for (int e = 0; e < 2; ++e)
    for (const LocalBatch& b : full) {
      std::vector<int32_t> ids;
      for (const auto& r : b.rows) ids.push_back(r.input_ids[0]);
      all.push_back(ids);
      if (all.size() == 3) saved = full.get_state();
    }
  Dataset m2 = mix_datasets({&d1, &d2}, {DatasetSpec::parse("d1#10"), DatasetSpec{"d2"}}, o);
  m2.set_encoder([](const std::vector<Message>& ms, const std::string&) {
    EncodedRow r;
    r.input_ids = {std::stoi(ms[0].content)};
    r.labels = r.input_ids;
    return std::vector<EncodedRow>{r};
  });
  m2.encode();
  DataLoader again(m2, DataLoaderOptions{.batch_size = 4, .shuffle = true, .seed = 3, .dp_size = 1});
  again.set_state(saved);
  for (int e = 0; e < 2 && resumed.size() < all.size() - 3; ++e)
    for (const LocalBatch& b : again) {
      std::vector<int32_t> ids;
      for (const auto& r : b.rows) ids.push_back(r.input_ids[0]);
      resumed.push_back(ids);
    }
  ASSERT_EQ(resumed.size(), all.size() - 3);
  EXPECT_TRUE(std::equal(resumed.begin(), resumed.end(), all.begin() + 3));
}
