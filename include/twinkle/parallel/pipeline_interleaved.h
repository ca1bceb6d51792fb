// twinkle/parallel/pipeline_interleaved.h — the interleaved 1F1B pipeline schedule (virtual pipeline
// stages).
//
// Megatron-core forward_backward_pipelining_with_interleaving
// (megatron/core/pipeline_parallel/schedules.py; Narayanan et al. 2021, arXiv 2104.04473, §2.2):
// each of the p pipeline ranks holds v model chunks; chunk c of rank r is virtual stage c*p + r, so
// a micro-batch passes every rank v times (rank p-1's chunk c sends to rank 0's chunk c+1). The
// bubble shrinks from (p-1)/m to (p-1)/(v*m). The order of (micro-batch, chunk) pairs is Megatron's
// schedule table with micro-batch groups of N = p (microbatch_group_size_per_vp_stage's default):
// for each group of N micro-batches, every chunk in order runs the group's micro-batches. Rank r
// runs (p - r - 1)*2 + (v - 1)*N warm-up forwards (all m*v when that is more, or forward-only),
// then one forward and one backward per step, then the remaining backwards; backwards visit the
// chunks in reverse order. After each compute step the rank exchanges with both ring neighbours
// in one batch (ProcessGroup::batch_send_recv; Megatron's send_forward_backward_recv_forward_backward
// without p2p overlap), so no pair of ranks can wait on each other.
//
// Megatron requires N <= m and (m mod N) either 0 or >= p; with N = p that is: m a multiple of p.
// check_interleaved_micro_batches refuses the rest by name; the engine pads a step's micro-batches
// with empty fillers to the next multiple of p instead (train/engine.h).
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "twinkle/dist/process_group.h"
#include "twinkle/parallel/pipeline_schedule.h"

namespace twinkle::parallel {

/// Megatron's get_schedule_table: the (micro-batch, chunk) of each virtual micro-batch id
/// 0..m*v-1 in forward order, micro-batch groups of `group` (the last group takes the rest).
std::vector<std::pair<int, int>> interleaved_schedule_table(int num_microbatches, int num_chunks, int group);

/// Megatron's get_pp_rank_microbatches for the interleaved schedule.
struct InterleavedCounts {
  int total = 0;            ///< m * v
  int warmup = 0;           ///< forwards before the first backward
  int remaining = 0;        ///< steady-state steps (one forward + one backward each)
  bool all_warmup = false;  ///< warm-up covers every forward
};
InterleavedCounts interleaved_counts(int p, int rank, int num_microbatches, int num_chunks, int group, bool forward_only);

/// The activation slots each chunk of pipeline rank `rank` holds at most at once in a training step
/// of run_interleaved_1f1b (forwards not yet backwarded, per chunk; the engine gives a slot back at
/// the backward and reuses it): what `twinkle plan` counts per chunk.
std::vector<int> interleaved_peak_slots(int p, int rank, int num_microbatches, int num_chunks);

/// Throws twinkle::Error unless `num_microbatches` fits Megatron's rule for micro-batch groups of p
/// (a positive multiple of p), naming the count, p and v.
void check_interleaved_micro_batches(int num_microbatches, int p, int num_chunks);

/// A rank's model chunks as the schedule drives them (all callbacks required but recv_buffer).
struct ChunkedPipelineStage {
  /// Forward of micro-batch `mb` on chunk `chunk`; `in` the received hidden state (nullptr on the
  /// first chunk of pipeline rank 0). The buffer is reused after the call returns.
  std::function<void(int chunk, int mb, const float* in)> forward;
  /// The chunk's output hidden state of `mb` (not asked of the last chunk of rank p-1).
  std::function<const float*(int chunk, int mb)> output;
  /// Backward of `mb` on `chunk` given d(output) (nullptr on the last chunk of rank p-1); returns
  /// d(input) (ignored on chunk 0 of rank 0), read before the next backward.
  std::function<const float*(int chunk, int mb, const float* d_out)> backward;
  /// Elements of the hidden state exchanged for micro-batch `mb` (same on every rank and chunk).
  std::function<int64_t(int mb)> hidden_elems;
  /// Optional: a buffer of `elems` floats in the stage's memory for a received hidden state
  /// (which = 0) or gradient (which = 1); `index` tells apart the receives held at once (valid
  /// until the next call with the same which and index). Unset: host vectors.
  std::function<float*(int which, int64_t elems, int index)> recv_buffer;
};

/// Runs `num_microbatches` (a positive multiple of p: check_interleaved_micro_batches) through the
/// pipeline group `pp` with `num_chunks` chunks per rank, interleaved 1F1B (or forwards only, in
/// the schedule table's order). Every rank of `pp` must call it with the same counts. For each
/// chunk, forwards and backwards run in increasing micro-batch order. Returns the time split.
PipelineTimes run_interleaved_1f1b(dist::ProcessGroup& pp, int num_microbatches, int num_chunks,
                                   const ChunkedPipelineStage& stage, bool forward_only);

}  // namespace twinkle::parallel
