// Context-parallel padding and load-balanced split (src/parallel/cp_split.cpp) against
// hand-computed layouts (Megatron's chunk assignment: rank r keeps chunks r and 2cp-1-r).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "twinkle/core/error.h"
#include "twinkle/data/batch.h"
#include "twinkle/parallel/cp_split.h"

using namespace twinkle;
using namespace twinkle::parallel;
using V = std::vector<int32_t>;

namespace {
constexpr int32_t X = kIgnoreIndex;

// Packed: segment 0 = 3 tokens, segment 1 = 5 tokens (odd lengths), one unlabelled token mid-segment.
MicroBatch packed_3_5() {
  MicroBatch mb;
  mb.batch = 1;
  mb.seq = 8;
  mb.input_ids = {10, 11, 12, 20, 21, 22, 23, 24};
  mb.labels = {X, 11, 12, X, 21, 22, X, 24};
  mb.position_ids = {0, 1, 2, 0, 1, 2, 3, 4};
  mb.cu_seqlens = {0, 3, 8};
  return mb;
}
}  // namespace

TEST(CpSplit, ShiftLabelsStaysInsideSegments) {
  MicroBatch mb = packed_3_5();
  EXPECT_EQ(shift_labels(mb.labels, mb.cu_seqlens), (V{11, 12, X, 21, 22, X, 24, X}));
  EXPECT_THROW(shift_labels(mb.labels, V{0, 3, 7}), Error);
  EXPECT_THROW(shift_labels(mb.labels, V{0, 5, 3, 8}), Error);
}

// cp = 2: segments padded to 4 and 8 (chunks of 1 and 2 tokens). Global padded axis:
//   ids     10 11 12  0 | 20 21 22 23 24  0  0  0
//   targets 11 12  X  X | 21 22  X 24  X  X  X  X
//   pos      0  1  2  3 |  0  1  2  3  4  5  6  7
// rank 0 keeps chunks 0 and 3: first half {0} {4,5}, second half {3} {10,11};
// rank 1 keeps chunks 1 and 2: first half {1} {6,7}, second half {2} {8,9}.
TEST(CpSplit, PackedSegmentsCp2HandComputed) {
  MicroBatch mb = packed_3_5();
  CpShard r0 = cp_split_micro_batch(mb, 2, 0);
  CpShard r1 = cp_split_micro_batch(mb, 2, 1);
  EXPECT_EQ(r0.global_tokens, 12);
  EXPECT_EQ(r0.global_cu_seqlens, (V{0, 4, 12}));
  EXPECT_EQ(r0.chunk_len, (V{1, 2}));
  EXPECT_EQ(r0.global_index, (V{0, 4, 5, 3, 10, 11}));
  EXPECT_EQ(r0.ids, (V{10, 20, 21, 0, 0, 0}));
  EXPECT_EQ(r0.targets, (V{11, 21, 22, X, X, X}));
  EXPECT_EQ(r0.positions, (V{0, 0, 1, 3, 6, 7}));
  EXPECT_EQ(r0.segment, (V{0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(r0.num_targets, 3);
  EXPECT_EQ(r1.global_index, (V{1, 6, 7, 2, 8, 9}));
  EXPECT_EQ(r1.ids, (V{11, 22, 23, 12, 24, 0}));
  EXPECT_EQ(r1.targets, (V{12, X, 24, X, X, X}));
  EXPECT_EQ(r1.positions, (V{1, 2, 3, 2, 4, 5}));
  EXPECT_EQ(r1.segment, (V{0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(r1.num_targets, 2);
  // every labelled token of the batch is on exactly one rank
  EXPECT_EQ(r0.num_targets + r1.num_targets, mb.num_label_tokens());
}

// cp = 4 (chunks 0..7; r0 {0,7}, r1 {1,6}, r2 {2,5}, r3 {3,4}) on one row of 13 tokens -> padded to 16.
TEST(CpSplit, OddRowCp4ChunkAssignment) {
  MicroBatch mb;
  mb.batch = 1;
  mb.seq = 13;
  for (int32_t t = 0; t < 13; ++t) {
    mb.input_ids.push_back(100 + t);
    mb.labels.push_back(100 + t);
    mb.position_ids.push_back(t);
  }
  mb.cu_seqlens = {0, 13};
  const V expect[4] = {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
  int64_t total = 0;
  for (int r = 0; r < 4; ++r) {
    CpShard sh = cp_split_micro_batch(mb, 4, r);
    EXPECT_EQ(sh.global_index, expect[r]) << "rank " << r;
    for (size_t i = 0; i < sh.global_index.size(); ++i) {
      const int32_t g = sh.global_index[i];
      EXPECT_EQ(sh.ids[i], g < 13 ? 100 + g : 0);
      EXPECT_EQ(sh.targets[i], g < 12 ? 101 + g : X);  // shifted; token 12 is the segment's last
      EXPECT_EQ(sh.positions[i], g);                   // global positions, pads continue
    }
    total += sh.num_targets;
  }
  EXPECT_EQ(total, 12);
}

// Per-row split of a packed row: segment boundaries (3 | 5) fall inside the chunks. cp = 2, row of
// 8 tokens -> 2*cp = 4 chunks of 2: rank 0 gets {0,1} {6,7}, rank 1 {2,3} {4,5}; token 2 (segment 0)
// and token 3 (segment 1) share one chunk.
TEST(CpSplit, PerRowSegmentBoundaryInsideChunk) {
  MicroBatch mb = packed_3_5();
  CpShard r0 = cp_split_micro_batch(mb, 2, 0, 1, false, /*per_row=*/true);
  CpShard r1 = cp_split_micro_batch(mb, 2, 1, 1, false, true);
  EXPECT_EQ(r0.global_tokens, 8);
  EXPECT_EQ(r0.global_cu_seqlens, (V{0, 3, 8}));
  EXPECT_EQ(r0.global_unit_cu, (V{0, 8}));
  EXPECT_EQ(r0.global_index, (V{0, 1, 6, 7}));
  EXPECT_EQ(r0.segment, (V{0, 0, 1, 1}));
  EXPECT_EQ(r0.targets, (V{11, 12, 24, X}));
  EXPECT_EQ(r1.global_index, (V{2, 3, 4, 5}));
  EXPECT_EQ(r1.segment, (V{0, 1, 1, 1}));
  EXPECT_EQ(r1.ids, (V{12, 20, 21, 22}));
  EXPECT_EQ(r1.targets, (V{X, 21, 22, X}));  // the shift never crosses 12 -> 20
  EXPECT_EQ(r1.positions, (V{2, 0, 1, 2}));
}

// Padded rows (two rows of seq 5; segments = rows) with odd length, and an odd packed row per row
// split that needs padding: its pad joins the last segment.
TEST(CpSplit, PerRowPaddingJoinsLastSegment) {
  MicroBatch mb;
  mb.batch = 1;
  mb.seq = 7;
  mb.input_ids = {1, 2, 3, 4, 5, 6, 7};
  mb.labels = {X, 2, 3, X, 5, 6, 7};
  mb.position_ids = {0, 1, 2, 0, 1, 2, 3};
  mb.cu_seqlens = {0, 3, 7};
  CpShard r0 = cp_split_micro_batch(mb, 2, 0, 1, false, true);
  EXPECT_EQ(r0.global_tokens, 8);
  EXPECT_EQ(r0.global_cu_seqlens, (V{0, 3, 8}));
  EXPECT_EQ(r0.global_index, (V{0, 1, 6, 7}));
  EXPECT_EQ(r0.ids, (V{1, 2, 7, 0}));
  EXPECT_EQ(r0.targets, (V{2, 3, X, X}));
  EXPECT_EQ(r0.positions, (V{0, 1, 3, 4}));
  EXPECT_EQ(r0.segment, (V{0, 0, 1, 1}));
}

// Sequence parallelism: multiple 2*cp*tp; every rank's half divides by tp.
TEST(CpSplit, SequenceParallelMultiple) {
  MicroBatch mb = packed_3_5();
  CpShard sh = cp_split_micro_batch(mb, 2, 1, /*tp=*/2, /*sp=*/true);
  EXPECT_EQ(sh.global_cu_seqlens, (V{0, 8, 16}));
  EXPECT_EQ(sh.chunk_len, (V{2, 2}));
  EXPECT_EQ(sh.tokens(), 8);
  EXPECT_EQ(sh.tokens() % 2, 0);
  EXPECT_EQ(sh.global_index, (V{2, 3, 10, 11, 4, 5, 12, 13}));
}

// Property: over all ranks the local tokens cover the padded axis exactly once, for many shapes.
TEST(CpSplit, RanksPartitionThePaddedAxis) {
  for (int cp : {1, 2, 3, 4}) {
    for (int trial = 0; trial < 20; ++trial) {
      MicroBatch mb;
      mb.batch = 1;
      mb.cu_seqlens = {0};
      for (int s = 0; s < 1 + trial % 4; ++s) {
        const int L = 1 + (trial * 7 + s * 5) % 11;
        for (int t = 0; t < L; ++t) {
          mb.input_ids.push_back(static_cast<int32_t>(mb.input_ids.size()) + 1);
          mb.labels.push_back(t == 0 ? X : 5);
          mb.position_ids.push_back(t);
        }
        mb.cu_seqlens.push_back(static_cast<int32_t>(mb.input_ids.size()));
      }
      mb.seq = static_cast<int64_t>(mb.input_ids.size());
      for (bool per_row : {false, true}) {
        std::vector<int> seen;
        int64_t targets = 0;
        for (int r = 0; r < cp; ++r) {
          CpShard sh = cp_split_micro_batch(mb, cp, r, 1, false, per_row);
          EXPECT_EQ(sh.tokens() * cp, sh.global_tokens);
          seen.insert(seen.end(), sh.global_index.begin(), sh.global_index.end());
          targets += sh.num_targets;
          // a local token's segment is the one its global index falls in
          for (size_t i = 0; i < sh.global_index.size(); ++i) {
            const int32_t s = sh.segment[i];
            EXPECT_GE(sh.global_index[i], sh.global_cu_seqlens[s]);
            EXPECT_LT(sh.global_index[i], sh.global_cu_seqlens[s + 1]);
          }
        }
        std::sort(seen.begin(), seen.end());
        std::vector<int> all(seen.size());
        std::iota(all.begin(), all.end(), 0);
        EXPECT_EQ(seen, all) << "cp " << cp << " trial " << trial;
        EXPECT_EQ(targets, mb.num_label_tokens());
      }
    }
  }
}

TEST(CpSplit, BadInputNamesTheValue) {
  MicroBatch mb = packed_3_5();
  try {
    cp_split_micro_batch(mb, 2, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cp rank 2 is outside [0, 2)"), std::string::npos) << e.what();
  }
  try {
    cp_pad_and_split(mb.input_ids, mb.labels, mb.position_ids, mb.cu_seqlens, 2, 0, 6);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("padding multiple 6"), std::string::npos) << e.what();
  }
  try {
    cp_pad_and_split(mb.input_ids, mb.labels, mb.position_ids, mb.cu_seqlens, 2, 0, 4, V{0, 2, 8});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split unit 1 starts at token 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cp_local_global_index(V{0, 6}, 2, 0), Error);
}
