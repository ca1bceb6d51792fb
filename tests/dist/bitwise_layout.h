// Shared by the "changes timing or memory, not results" layout checks (overlap_check,
// recompute_check): the tiny dense / MoE config, the seeded variable-length rows split over dp
// (bench/layout_bench's generator), what a run records, and the byte comparison of two runs.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "twinkle/data/batch.h"
#include "twinkle/io/model_config.h"

namespace twinkle::testutil {

// Tiny Qwen3 (or Qwen3-MoE with 4 experts top-2 and one dense layer, mlp_only_layers = {1})
// small enough for 8 ranks on 2 cores.
inline ModelConfig tiny_layout_config(bool moe) {
  ModelConfig c;
  c.model_type = moe ? "qwen3_moe" : "qwen3";
  c.vocab_size = 301; c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 4;
  c.num_attention_heads = 4; c.num_key_value_heads = 2; c.head_dim = 16; c.tie_word_embeddings = true;
  c.max_position_embeddings = 256; c.rope_theta = 1e6;
  if (moe) {
    c.num_experts = 4; c.num_experts_per_tok = 2; c.moe_intermediate_size = 24; c.norm_topk_prob = true;
    c.mlp_only_layers = {1};  // one dense layer among the MoE ones
  }
  return c;
}

// rows_n seeded rows of 12..31 tokens (first 3 labels -100), dp replica dp_rank's contiguous
// share, collated padded into micro-batches of 2 rows (the last may hold 1; none when the share
// is empty).
inline std::vector<MicroBatch> seeded_micro_batches(int64_t dp, int64_t dp_rank, int64_t rows_n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<EncodedRow> rows;
  for (int64_t i = 0; i < rows_n; ++i) {
    EncodedRow r;
    const int64_t L = 12 + static_cast<int64_t>(g() % 20);
    for (int64_t t = 0; t < L; ++t) {
      r.input_ids.push_back(static_cast<int32_t>(g() % 301));
      r.labels.push_back(t < 3 ? -100 : r.input_ids.back());
      r.position_ids.push_back(static_cast<int32_t>(t));
    }
    r.length = L;
    rows.push_back(r);
  }
  std::vector<EncodedRow> mine(rows.begin() + dp_rank * rows_n / dp, rows.begin() + (dp_rank + 1) * rows_n / dp);
  std::vector<MicroBatch> out;
  for (size_t i = 0; i < mine.size(); i += 2)
    out.push_back(collate_padded(std::vector<EncodedRow>(mine.begin() + static_cast<long>(i),
                                                         mine.begin() + static_cast<long>(std::min(i + 2, mine.size()))),
                                 0));
  return out;
}

// What one run of a few steps records on a rank.
struct StepTrace {
  std::vector<double> losses, norms;
  std::vector<float> grads, params;  // the last step's reduced gradients / the final parameters
};

// Compares r with ref byte for byte (memcmp: bit-identical, not close), prints one line per
// differing quantity naming the rank and both runs, and returns how many differ.
inline int64_t count_bitwise_differences(int rank, const StepTrace& r, const char* name, const StepTrace& ref,
                                         const char* ref_name) {
  int64_t bad = 0;
  auto fail = [&](const char* what) {
    std::printf("rank %d: %s differs from %s in %s\n", rank, name, ref_name, what);
    ++bad;
  };
  auto same = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  if (!same(r.losses, ref.losses)) fail("the losses");
  if (!same(r.norms, ref.norms)) fail("the grad norms");
  if (!same(r.grads, ref.grads)) fail("the gradients");
  if (!same(r.params, ref.params)) fail("the parameters");
  return bad;
}

}  // namespace twinkle::testutil
