// twinkle/train/tensorboard_log.h — one training step's metrics as TensorBoard scalars, the same tags
// for `twinkle train --tensorboard-dir`, the recipes' --tensorboard-dir and
// MegatronModelOptions::tensorboard_dir (Python: MegatronModel(..., tensorboard_dir=...)) (the event file
// format: twinkle/io/tensorboard.h).
#pragma once
#include <cstdint>

#include "twinkle/io/tensorboard.h"
#include "twinkle/train/evaluate.h"
#include "twinkle/train/megatron_model.h"

namespace twinkle {

/// Writes the step's metrics (MegatronModel::last_metrics()) at `step` under Megatron's tag names where it
/// has them (megatron/training/training.py training_log): "lm loss" (a step whose global batch has no
/// labelled token writes none), "grad-norm", "learning-rate", "tokens-per-sec", "mfu", "iteration-time"
/// (seconds), "mem-max-allocated-bytes" (StepMetrics::peak_memory_bytes: the writing rank's peak memory,
/// Megatron's log_memory_to_tensorboard tag; none when it is 0); a Qwen3-MoE model also "loss" (lm loss +
/// the router losses), "load_balancing_loss",
/// "z_loss", "expert-grad-norm", "expert-load-max", "expert-load-min". Then flushes the file, so
/// TensorBoard sees each step as it ends. Call on one rank (rank 0). Throws twinkle::Error on a write error.
void write_step_scalars(TensorBoardWriter& tb, const MegatronModel::StepMetrics& m, int64_t step);

/// Writes an evaluation after step `step` under Megatron's tags (megatron/training/training.py
/// evaluate_and_print_results, key "lm loss"): "lm loss validation" = r.lm_loss and "lm loss validation ppl" =
/// r.ppl at `step` (Megatron writes the ppl only with --log-validation-ppl-to-tensorboard; twinkle always does).
/// Nothing when r has no loss. Megatron's "... vs samples" twins (x = consumed training samples) are not
/// written: a resumed run's SessionLog START at step N + 1 makes TensorBoard drop every earlier event whose
/// step field is >= N + 1 (twinkle/io/tensorboard.h), which for a samples axis is nearly the whole earlier
/// curve. Flushes the file. Call on one rank (rank 0). Throws twinkle::Error on a write error.
void write_eval_scalars(TensorBoardWriter& tb, const EvalResult& r, int64_t step);

}  // namespace twinkle
