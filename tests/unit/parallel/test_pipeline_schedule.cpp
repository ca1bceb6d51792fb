// run_1f1b with stub stages on p in-process ranks (threads and a mailbox standing in for MPI):
// the order of forwards and backwards per micro-batch on every stage equals the 1F1B order
// written out by hand from Narayanan et al. 2021 (fig. 4) / Megatron's
// forward_backward_pipelining_without_interleaving, the activations and gradients reach the
// right stage for the right micro-batch, and no two in-flight micro-batches share a slot.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/parallel/pipeline_schedule.h"
#include "thread_group.h"

using namespace twinkle;
using twinkle::testing::Mailbox;
using twinkle::testing::ThreadGroup;
using twinkle::testing::joined;

namespace {

// Hidden state of micro-batch mb leaving stage s: hidden_elems(mb) copies of 1000*mb + s;
// gradient leaving stage s backwards: -(1000*mb + s) - 1.
float act_value(int mb, int s) { return static_cast<float>(1000 * mb + s); }
float grad_value(int mb, int s) { return -static_cast<float>(1000 * mb + s) - 1.0f; }
int64_t elems(int mb) { return 3 + mb % 4; }

struct StageLog {
  std::vector<std::string> events;  // "F3", "B0", ...
  std::vector<std::string> errors;
};

std::vector<StageLog> run(int p, int m, bool forward_only) {
  Mailbox box;
  std::vector<StageLog> logs(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int s = 0; s < p; ++s) {
    threads.emplace_back([&, s] {
      ThreadGroup g(box, s, p);
      StageLog& log = logs[static_cast<size_t>(s)];
      std::map<int, std::vector<float>> out, din;  // by micro-batch
      std::map<int, int> slot_owner;               // slot -> micro-batch in flight
      auto expect_all = [&](const float* buf, int mb, float v, const char* what) {
        if (!buf) {
          log.errors.push_back(std::string(what) + " missing for mb " + std::to_string(mb));
          return;
        }
        for (int64_t i = 0; i < elems(mb); ++i)
          if (buf[i] != v) {
            log.errors.push_back(std::string(what) + " of mb " + std::to_string(mb) + " is " + std::to_string(buf[i]));
            return;
          }
      };
      parallel::PipelineStage st;
      st.forward = [&](int mb, const float* in) {
        log.events.push_back("F" + std::to_string(mb));
        if (s > 0) expect_all(in, mb, act_value(mb, s - 1), "input");
        const int slot = parallel::pipeline_slot(mb, s, p);
        if (!forward_only) {
          if (slot_owner.count(slot)) log.errors.push_back("slot " + std::to_string(slot) + " reused while in flight");
          slot_owner[slot] = mb;
        }
        out[mb].assign(static_cast<size_t>(elems(mb)), act_value(mb, s));
      };
      st.output = [&](int mb) { return out.at(mb).data(); };
      st.backward = [&](int mb, const float* dout) -> const float* {
        log.events.push_back("B" + std::to_string(mb));
        if (s < p - 1) expect_all(dout, mb, grad_value(mb, s + 1), "output gradient");
        const int slot = parallel::pipeline_slot(mb, s, p);
        if (slot_owner.count(slot) == 0 || slot_owner[slot] != mb)
          log.errors.push_back("backward of mb " + std::to_string(mb) + " finds slot " + std::to_string(slot) +
                               " not holding it");
        slot_owner.erase(slot);
        din[mb].assign(static_cast<size_t>(elems(mb)), grad_value(mb, s));
        return din[mb].data();
      };
      st.hidden_elems = [](int mb) { return elems(mb); };
      try {
        parallel::run_1f1b(g, m, st, forward_only);
      } catch (const std::exception& e) {
        log.errors.push_back(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return logs;
}

void expect_order(int p, int m, const std::vector<std::string>& expected) {
  auto logs = run(p, m, false);
  ASSERT_EQ(logs.size(), expected.size());
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(joined(logs[static_cast<size_t>(s)].events), expected[static_cast<size_t>(s)])
        << "p=" << p << " m=" << m << " stage " << s;
    EXPECT_TRUE(logs[static_cast<size_t>(s)].errors.empty())
        << "p=" << p << " m=" << m << " stage " << s << ": " << joined(logs[static_cast<size_t>(s)].errors);
  }
}

}  // namespace

// Written out by hand: stage s of p runs p-s-1 warm-up forwards, then alternates one forward
// and one backward, then drains the remaining backwards.
TEST(Pipeline1F1B, OneStage) {
  expect_order(1, 6, {"F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"});
}

TEST(Pipeline1F1B, TwoStages) {
  expect_order(2, 6, {"F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5",
                      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"});
}

TEST(Pipeline1F1B, ThreeStages) {
  expect_order(3, 6, {"F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5",
                      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5",
                      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"});
}

TEST(Pipeline1F1B, FourStages) {
  expect_order(4, 6, {"F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5",
                      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5",
                      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5",
                      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5"});
}

TEST(Pipeline1F1B, FewerMicroBatchesThanStages) {
  // m < p: the warm-up is cut at m forwards, leaving no steady state on the first stages.
  expect_order(4, 2, {"F0 F1 B0 B1",
                      "F0 F1 B0 B1",
                      "F0 F1 B0 B1",
                      "F0 B0 F1 B1"});
  expect_order(3, 1, {"F0 B0", "F0 B0", "F0 B0"});
}

TEST(Pipeline1F1B, ForwardOnly) {
  for (int p = 1; p <= 4; ++p) {
    auto logs = run(p, 5, true);
    for (int s = 0; s < p; ++s) {
      EXPECT_EQ(joined(logs[static_cast<size_t>(s)].events), "F0 F1 F2 F3 F4") << "p=" << p << " stage " << s;
      EXPECT_TRUE(logs[static_cast<size_t>(s)].errors.empty()) << joined(logs[static_cast<size_t>(s)].errors);
    }
  }
}
