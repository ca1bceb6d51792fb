// The interleaved 1F1B schedule (parallel/pipeline_interleaved.h) with stub chunks on p in-process
// ranks (thread_group.h): Megatron-core's schedule table and warm-up counts, the order of forwards
// and backwards per chunk and micro-batch on every rank written out by hand from Megatron's rules
// (forward_backward_pipelining_with_interleaving: groups of N = p micro-batches, each chunk in turn;
// (p - r - 1)*2 + (v - 1)*N warm-up forwards; backwards through the chunks in reverse), and every
// activation and gradient reaching the right virtual stage for the right micro-batch.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/parallel/pipeline_interleaved.h"
#include "thread_group.h"

using namespace twinkle;
using twinkle::testing::Mailbox;
using twinkle::testing::ThreadGroup;
using twinkle::testing::joined;

namespace {

// Value leaving virtual stage vs for micro-batch mb (forward) and its gradient (backward).
float act_value(int mb, int vs) { return static_cast<float>(1000 * mb + vs); }
float grad_value(int mb, int vs) { return -static_cast<float>(1000 * mb + vs) - 1.0f; }
int64_t elems(int mb) { return 2 + mb % 3; }

struct RankLog {
  std::vector<std::string> events;  // "F0.3" = forward of chunk 0, micro-batch 3
  std::vector<std::string> errors;
};

std::vector<RankLog> run(int p, int v, int m, bool forward_only) {
  Mailbox box;
  std::vector<RankLog> logs(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      ThreadGroup g(box, r, p);
      RankLog& log = logs[static_cast<size_t>(r)];
      std::map<std::pair<int, int>, std::vector<float>> out, din;
      std::map<std::pair<int, int>, int> forwarded;  // (chunk, mb) -> forwards not yet backwarded
      auto expect_all = [&](const float* buf, int mb, float val, const std::string& what) {
        if (!buf) return log.errors.push_back(what + " missing");
        for (int64_t i = 0; i < elems(mb); ++i)
          if (buf[i] != val) return log.errors.push_back(what + " is " + std::to_string(buf[i]));
      };
      const int last_vs = p * v - 1;
      parallel::ChunkedPipelineStage st;
      st.forward = [&](int c, int mb, const float* in) {
        const int vs = c * p + r;
        log.events.push_back("F" + std::to_string(c) + "." + std::to_string(mb));
        if (vs > 0) expect_all(in, mb, act_value(mb, vs - 1), "input of " + log.events.back());
        else if (in) log.errors.push_back("the first virtual stage got an input");
        ++forwarded[{c, mb}];
        out[{c, mb}].assign(static_cast<size_t>(elems(mb)), act_value(mb, vs));
      };
      st.output = [&](int c, int mb) { return out.at({c, mb}).data(); };
      st.backward = [&](int c, int mb, const float* dout) -> const float* {
        const int vs = c * p + r;
        log.events.push_back("B" + std::to_string(c) + "." + std::to_string(mb));
        if (vs < last_vs) expect_all(dout, mb, grad_value(mb, vs + 1), "output gradient of " + log.events.back());
        else if (dout) log.errors.push_back("the last virtual stage got an output gradient");
        if (forwarded[{c, mb}]-- != 1) log.errors.push_back("backward without its forward: " + log.events.back());
        din[{c, mb}].assign(static_cast<size_t>(elems(mb)), grad_value(mb, vs));
        return din[{c, mb}].data();
      };
      st.hidden_elems = [](int mb) { return elems(mb); };
      try {
        parallel::run_interleaved_1f1b(g, m, v, st, forward_only);
      } catch (const std::exception& e) {
        log.errors.push_back(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return logs;
}

void expect_order(int p, int v, int m, const std::vector<std::string>& expected) {
  auto logs = run(p, v, m, false);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(joined(logs[static_cast<size_t>(r)].events), expected[static_cast<size_t>(r)])
        << "p=" << p << " v=" << v << " m=" << m << " rank " << r;
    EXPECT_TRUE(logs[static_cast<size_t>(r)].errors.empty()) << "rank " << r << ": " << joined(logs[static_cast<size_t>(r)].errors);
  }
}

}  // namespace

TEST(PipelineInterleaved, ScheduleTableAsMegatronsExample) {
  // schedules.py's own example, PP2 N3 M5 VP2: virtual ids 0..9 -> micro-batch 0 1 2 0 1 2 3 4 3 4,
  // chunk 0 0 0 1 1 1 0 0 1 1.
  const auto t = parallel::interleaved_schedule_table(5, 2, 3);
  std::vector<int> mb, ch;
  for (auto [a, b] : t) {
    mb.push_back(a);
    ch.push_back(b);
  }
  EXPECT_EQ(mb, (std::vector<int>{0, 1, 2, 0, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(ch, (std::vector<int>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}));
}

TEST(PipelineInterleaved, WarmupCounts) {
  // (p - r - 1)*2 + (v - 1)*N, capped at m*v (then every forward is warm-up).
  EXPECT_EQ(parallel::interleaved_counts(2, 0, 4, 2, 2, false).warmup, 4);
  EXPECT_EQ(parallel::interleaved_counts(2, 1, 4, 2, 2, false).warmup, 2);
  EXPECT_EQ(parallel::interleaved_counts(4, 0, 8, 2, 4, false).warmup, 10);
  EXPECT_EQ(parallel::interleaved_counts(4, 3, 8, 2, 4, false).warmup, 4);
  const auto all = parallel::interleaved_counts(4, 0, 4, 2, 4, false);  // 6 + 4 > 8
  EXPECT_EQ(all.warmup, 8);
  EXPECT_TRUE(all.all_warmup);
  EXPECT_EQ(all.remaining, 0);
  EXPECT_EQ(parallel::interleaved_counts(4, 2, 8, 3, 4, true).warmup, 24);
}

TEST(PipelineInterleaved, MicroBatchesMustBeAMultipleOfPp) {
  EXPECT_NO_THROW(parallel::check_interleaved_micro_batches(4, 2, 2));
  EXPECT_THROW(parallel::check_interleaved_micro_batches(3, 2, 2), Error);
  EXPECT_THROW(parallel::check_interleaved_micro_batches(2, 4, 2), Error);
  try {
    parallel::check_interleaved_micro_batches(6, 4, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of pp 4"), std::string::npos) << e.what();
  }
}

// Written out by hand for p = 2, v = 2, m = 4 (N = 2). Table: F order per rank
// (c0 mb0, c0 mb1, c1 mb0, c1 mb1, c0 mb2, c0 mb3, c1 mb2, c1 mb3); backward k uses chunk 1 - c(k).
// Rank 0: 4 warm-up forwards; rank 1: 2.
TEST(PipelineInterleaved, TwoRanksTwoChunksFourMicroBatches) {
  expect_order(2, 2, 4,
               {"F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3",
                "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3"});
}

// p = 2, v = 3, m = 2: warm-up (2 - r - 1)*2 + 2*2 = 6 / 4 of 6 forwards: rank 0 all warm-up.
TEST(PipelineInterleaved, AllWarmupOnTheFirstRank) {
  expect_order(2, 3, 2,
               {"F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 B2.0 B2.1 B1.0 B1.1 B0.0 B0.1",
                "F0.0 F0.1 F1.0 F1.1 F2.0 B2.0 F2.1 B2.1 B1.0 B1.1 B0.0 B0.1"});
}

// Larger grids: only the data flow and per-chunk micro-batch order (checked inside run()).
TEST(PipelineInterleaved, DataReachesEveryVirtualStageOnAGrid) {
  for (int p : {2, 3, 4})
    for (int v : {2, 3})
      for (int groups : {1, 2, 3}) {
        const int m = p * groups;
        for (bool fo : {false, true}) {
          auto logs = run(p, v, m, fo);
          for (int r = 0; r < p; ++r) {
            const RankLog& l = logs[static_cast<size_t>(r)];
            EXPECT_TRUE(l.errors.empty()) << "p=" << p << " v=" << v << " m=" << m << " fo=" << fo << " rank " << r
                                          << ": " << joined(l.errors);
            EXPECT_EQ(l.events.size(), static_cast<size_t>(m * v * (fo ? 1 : 2)));
            // per chunk, forwards and backwards each in increasing micro-batch order
            std::map<std::string, int> last;
            for (const auto& e : l.events) {
              const std::string key = e.substr(0, e.find('.'));
              const int mb = std::stoi(e.substr(e.find('.') + 1));
              if (last.count(key)) {
                EXPECT_EQ(mb, last[key] + 1) << e;
              }
              last[key] = mb;
            }
          }
        }
      }
}

// The slots `twinkle plan` counts, read off the hand-written orders above (pp2 vpp2 m4): rank 0
// holds 4 forwards of chunk 0 before its first backward of chunk 0 and 2 of chunk 1; rank 1 3 and 1.
TEST(PipelineInterleaved, PeakSlotsPerChunk) {
  EXPECT_EQ(parallel::interleaved_peak_slots(2, 0, 4, 2), (std::vector<int>{4, 2}));
  EXPECT_EQ(parallel::interleaved_peak_slots(2, 1, 4, 2), (std::vector<int>{3, 1}));
}
