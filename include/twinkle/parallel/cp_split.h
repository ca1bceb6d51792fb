// twinkle/parallel/cp_split.h — context-parallel input side: per-segment right padding and the
// load-balanced ("zig-zag") split of a micro-batch's token axis over the cp ranks.
//
// Semantics (Twinkle's `pad_cp` / `split_cp`, src/twinkle/processor/base.py; Megatron-core
// get_batch_on_this_cp_rank and TE's THD split, docs/source/api-guide/context_parallel.rst):
//  * every split unit — each segment (a packed row, or a padded row: Megatron's THD split per
//    document), or, when asked, each row of the micro-batch (the BSHD split, which lets segment
//    boundaries fall inside chunks) — is right-padded to a multiple
//    of `multiple` = 2·cp (2·cp·tp under sequence parallelism, so each rank's share divides by tp):
//    pad input id 0, target -100 (a pad token never enters a loss or a statistic), position ids
//    continuing the segment's last position (Twinkle pads position_ids with -1; the value is never
//    observable: a pad token carries no target and no real token attends to it, so we keep a valid
//    RoPE angle instead); pad tokens belong to the unit's last segment;
//  * every padded unit of length L is cut into 2·cp chunks of L/(2·cp) tokens; cp rank r keeps
//    chunks r and 2·cp-1-r (cp = 4: r0 {0,7}, r1 {1,6}, r2 {2,5}, r3 {3,4}), so causal attention
//    costs every rank the same.
// Targets are the HF-shifted labels (targets[t] = labels[t+1] inside a segment, -100 at a
// segment's last token), computed BEFORE padding and splitting, so the shift never sees a pad
// token or crosses a rank boundary.
//
// Local token order ("two halves"): the first half of a rank's tokens is chunk r of every unit
// (units in order), the second half chunk 2·cp-1-r of every unit. All per-token modules
// (embedding, norms, MLP, loss) are indifferent to the order; RoPE uses `positions` and attention
// uses `global_index` / `segment`, never the local index. With this order the ring attention's
// "keys of an earlier rank" block is the first half of that rank's K/V and the "queries that see a
// later rank" block is the second half of the local Q (parallel/ring_attention.h).
#pragma once
#include <cstdint>
#include <vector>

#include "twinkle/data/batch.h"

namespace twinkle::parallel {

/// One cp rank's share of a micro-batch.
struct CpShard {
  int cp = 1;                             ///< context-parallel size
  int rank = 0;                           ///< this rank in the cp group
  int64_t global_tokens = 0;              ///< padded token count of the whole micro-batch
  std::vector<int32_t> global_cu_seqlens; ///< [n_seg+1] padded segments on the global token axis
  std::vector<int32_t> global_unit_cu;    ///< [n_unit+1] padded split units on the global axis
  std::vector<int32_t> chunk_len;         ///< [n_unit] padded unit length / (2·cp)
  std::vector<int32_t> ids;               ///< [T] input ids (0 on pad tokens)
  std::vector<int32_t> targets;           ///< [T] shifted labels, -100 = no loss
  std::vector<int32_t> positions;         ///< [T] position ids (global: RoPE angle of the token)
  std::vector<int32_t> global_index;      ///< [T] index of each local token on the padded global axis
  std::vector<int32_t> segment;           ///< [T] segment of each local token
  int64_t num_targets = 0;                ///< local targets != -100
  /// Local tokens T = global_tokens / cp (first half = chunks r, second half = chunks 2cp-1-r).
  int64_t tokens() const { return static_cast<int64_t>(ids.size()); }
};

/// HF causal-LM shift inside each segment: targets[t] = labels[t+1] when t+1 is in t's segment,
/// -100 at the last token of a segment (transformers ForCausalLMLoss; the same rule as
/// Qwen3Model::prepare). Throws twinkle::Error when cu_seqlens does not start at 0, decrease or
/// end at labels.size().
std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, const std::vector<int32_t>& cu_seqlens);

/// Pads every split unit of (ids, targets, positions) to a multiple of `multiple` and keeps cp rank
/// `rank`'s chunks (see the file comment). `targets` are already shifted. `cu_seqlens` are the
/// attention segments; `unit_cu` the split units (cumulative, each boundary also a segment
/// boundary; empty = one unit per segment). Throws twinkle::Error for cp < 1, rank outside
/// [0, cp), a multiple that is not a positive multiple of 2·cp, arrays of different lengths, bad
/// cu_seqlens or a unit boundary inside a segment (each message names the value).
CpShard cp_pad_and_split(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                         const std::vector<int32_t>& positions, const std::vector<int32_t>& cu_seqlens, int cp,
                         int rank, int64_t multiple, const std::vector<int32_t>& unit_cu = {});

/// The micro-batch path: shift_labels(mb.labels), then cp_pad_and_split with multiple 2·cp, or
/// 2·cp·tp when `sequence_parallel` (Megatron needs (L/cp) % tp == 0; Twinkle's pad_cp uses 2·cp
/// only). `per_row`: split units are the mb.batch rows of mb.seq tokens
/// instead of the segments (for a packed micro-batch: the whole row).
CpShard cp_split_micro_batch(const MicroBatch& mb, int cp, int rank, int tp = 1, bool sequence_parallel = false,
                             bool per_row = false);

/// Global indices (padded axis) of cp rank `rank`'s tokens in local order, from the padded global
/// split units (CpShard::global_unit_cu) — what cp_pad_and_split puts in CpShard::global_index,
/// computable for any rank (the Ulysses all-to-all needs every rank's order). Unit lengths must
/// divide by 2·cp (else twinkle::Error).
std::vector<int32_t> cp_local_global_index(const std::vector<int32_t>& global_unit_cu, int cp, int rank);

}  // namespace twinkle::parallel
