// twinkle/parallel/pipeline_schedule.h — the 1F1B pipeline schedule.
//
// Megatron-core forward_backward_pipelining_without_interleaving
// (megatron/core/pipeline_parallel/schedules.py; Narayanan et al. 2021, arXiv 2104.04473):
// stage s of p runs min(p-s-1, m) warm-up forwards, then alternates one forward and one
// backward (steady state), then cools down with the remaining backwards. At most p-s
// micro-batches are in flight on stage s, so activation memory is bounded by p, not m.
// Bubble fraction (p-1)/m. Neighbouring stages exchange activations and gradients with
// combined send/recv so two stages exchanging at once never deadlock.
#pragma once
#include <cstdint>
#include <functional>

#include "twinkle/dist/process_group.h"

namespace twinkle::parallel {

struct PipelineStage {
  /// Runs the forward of micro-batch `mb`; `in` is the received hidden state (nullptr on
  /// the first stage).
  std::function<void(int mb, const float* in)> forward;
  /// This stage's output hidden state of micro-batch `mb` (non-last stages).
  std::function<const float*(int mb)> output;
  /// Runs the backward of `mb` given d(output) (nullptr on the last stage); returns
  /// d(input) (ignored on the first stage).
  std::function<const float*(int mb, const float* d_out)> backward;
  /// Elements of the hidden state exchanged for micro-batch `mb` (same on both sides).
  std::function<int64_t(int mb)> hidden_elems;
  /// Optional: a buffer of `elems` floats for received hidden states (which = 0) or gradients
  /// (which = 1) in the stage's memory (device "cuda": on the GPU). Valid until the next call with
  /// the same `which`. Unset: host vectors.
  std::function<float*(int which, int64_t elems)> recv_buffer;
};

struct PipelineTimes {
  double compute_s = 0;  ///< time inside forward/backward callbacks
  double comm_s = 0;     ///< time blocked in send/recv (includes the bubble)
};

/// Runs `num_microbatches` through the pipeline group `pp` with 1F1B (or forwards only).
/// Every rank of `pp` must call it with the same count. Returns the time split.
PipelineTimes run_1f1b(dist::ProcessGroup& pp, int num_microbatches, const PipelineStage& stage, bool forward_only);

/// Slot in which stage `stage` of `p` keeps the activations of micro-batch `mb`.
inline int pipeline_slot(int mb, int stage, int p) { return mb % (p - stage); }

}  // namespace twinkle::parallel
