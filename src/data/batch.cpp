#include "twinkle/data/batch.h"

#include <algorithm>

#include "twinkle/core/error.h"

namespace twinkle {

int64_t MicroBatch::num_label_tokens() const {
  int64_t n = 0;
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s)
    for (int32_t t = cu_seqlens[s]; t + 1 < cu_seqlens[s + 1]; ++t)
      if (labels[static_cast<size_t>(t) + 1] != kIgnoreIndex) ++n;
  return n;
}

MicroBatch collate_padded(const std::vector<EncodedRow>& rows, int32_t pad_id) {
  check(!rows.empty(), "collate_padded: no rows");
  MicroBatch mb;
  mb.batch = static_cast<int64_t>(rows.size());
  for (const auto& r : rows) mb.seq = std::max<int64_t>(mb.seq, static_cast<int64_t>(r.input_ids.size()));
  check(mb.seq > 0, "collate_padded: all rows are empty");
  const size_t T = static_cast<size_t>(mb.batch * mb.seq);
  mb.input_ids.assign(T, pad_id);
  mb.labels.assign(T, kIgnoreIndex);
  mb.position_ids.assign(T, 0);
  mb.attention_mask.assign(T, 0);
  for (size_t b = 0; b < rows.size(); ++b) {
    const auto& r = rows[b];
    check(r.labels.size() == r.input_ids.size(), "collate_padded: row " + std::to_string(b) +
                                                     " has labels of a different length than input_ids");
    size_t base = b * static_cast<size_t>(mb.seq);
    for (size_t t = 0; t < static_cast<size_t>(mb.seq); ++t) {
      if (t < r.input_ids.size()) {
        mb.input_ids[base + t] = r.input_ids[t];
        mb.labels[base + t] = r.labels[t];
        mb.attention_mask[base + t] = 1;
      }
      mb.position_ids[base + t] = static_cast<int32_t>(t);
    }
  }
  for (int64_t b = 0; b <= mb.batch; ++b) mb.cu_seqlens.push_back(static_cast<int32_t>(b * mb.seq));
  for (int64_t b = 0; b < mb.batch; ++b) mb.segment_row.push_back(b);
  return mb;
}

MicroBatch collate_packed(const std::vector<EncodedRow>& rows) {
  check(!rows.empty(), "collate_packed: no rows");
  MicroBatch mb;
  mb.batch = 1;
  mb.cu_seqlens.push_back(0);
  for (size_t b = 0; b < rows.size(); ++b) {
    const auto& r = rows[b];
    check(r.labels.size() == r.input_ids.size(), "collate_packed: row " + std::to_string(b) +
                                                     " has labels of a different length than input_ids");
    if (r.input_ids.empty()) continue;
    for (size_t t = 0; t < r.input_ids.size(); ++t) {
      mb.input_ids.push_back(r.input_ids[t]);
      mb.labels.push_back(r.labels[t]);
      mb.position_ids.push_back(static_cast<int32_t>(t));
    }
    mb.cu_seqlens.push_back(static_cast<int32_t>(mb.input_ids.size()));
    mb.segment_row.push_back(static_cast<int64_t>(b));
  }
  mb.seq = static_cast<int64_t>(mb.input_ids.size());
  check(mb.seq > 0, "collate_packed: all rows are empty");
  return mb;
}

}  // namespace twinkle
