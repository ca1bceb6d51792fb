// collate_padded / collate_packed (src/data/batch.cpp) with hand-computed expectations.
#include <gtest/gtest.h>

#include "twinkle/core/error.h"
#include "twinkle/data/batch.h"
#include "twinkle/data/dataloader.h"

using namespace twinkle;

namespace {
EncodedRow row(std::vector<int32_t> ids, std::vector<int32_t> labels) {
  EncodedRow r;
  r.input_ids = std::move(ids);
  r.labels = std::move(labels);
  r.length = static_cast<int64_t>(r.input_ids.size());
  r.attention_mask.assign(r.input_ids.size(), 1);
  for (size_t t = 0; t < r.input_ids.size(); ++t) r.position_ids.push_back(static_cast<int32_t>(t));
  return r;
}
constexpr int32_t X = kIgnoreIndex;
}  // namespace

TEST(Collate, PaddedLayout) {
  std::vector<EncodedRow> rows = {row({1, 2, 3}, {X, 2, 3}), row({4, 5}, {X, 5})};
  MicroBatch mb = collate_padded(rows, 9);
  EXPECT_EQ(mb.batch, 2);
  EXPECT_EQ(mb.seq, 3);
  EXPECT_EQ(mb.tokens(), 6);
  EXPECT_EQ(mb.input_ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 9}));
  EXPECT_EQ(mb.labels, (std::vector<int32_t>{X, 2, 3, X, 5, X}));
  EXPECT_EQ(mb.position_ids, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(mb.cu_seqlens, (std::vector<int32_t>{0, 3, 6}));
  // Shifted labels counted: row 0 -> positions 0,1 predict 2,3 (2); row 1 -> position 0 predicts 5 (1).
  EXPECT_EQ(mb.num_label_tokens(), 3);
}

TEST(Collate, PackedLayout) {
  std::vector<EncodedRow> rows = {row({1, 2, 3}, {X, 2, 3}), row({4, 5}, {X, 5})};
  MicroBatch mb = collate_packed(rows);
  EXPECT_EQ(mb.batch, 1);
  EXPECT_EQ(mb.seq, 5);
  EXPECT_EQ(mb.input_ids, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(mb.labels, (std::vector<int32_t>{X, 2, 3, X, 5}));
  EXPECT_EQ(mb.position_ids, (std::vector<int32_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(mb.cu_seqlens, (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(mb.num_label_tokens(), 3);
}

TEST(Collate, LabelCountMatchesAcrossLayouts) {
  // A label on a row's first token is never a target (nothing precedes it) in either layout,
  // and the shift must not cross from one packed row into the next.
  std::vector<EncodedRow> rows = {row({1, 2}, {1, 2}), row({3, 4, 5, 6}, {3, X, 5, 6}), row({7}, {7})};
  MicroBatch p = collate_padded(rows, 0), k = collate_packed(rows);
  EXPECT_EQ(p.num_label_tokens(), 3);  // 2 | 5, 6 | (none)
  EXPECT_EQ(k.num_label_tokens(), 3);
  for (int64_t mbs : {1, 2, 3}) {
    int64_t a = 0, b = 0;
    for (auto& m : make_micro_batches(rows, mbs, 0, false)) a += m.num_label_tokens();
    for (auto& m : make_micro_batches(rows, mbs, 0, true)) b += m.num_label_tokens();
    EXPECT_EQ(a, 3) << mbs;
    EXPECT_EQ(b, 3) << mbs;
  }
}

TEST(Collate, Errors) {
  EXPECT_THROW(collate_padded({}, 0), Error);
  EXPECT_THROW(collate_packed({}), Error);
  EXPECT_THROW(collate_padded({row({1, 2}, {1})}, 0), Error);
  EXPECT_THROW(collate_packed({row({1, 2}, {1})}), Error);
}
