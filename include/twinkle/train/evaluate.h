// twinkle/train/evaluate.h — evaluation during training: the validation loss of K global batches
// (Megatron's --eval-iters) every N steps (--eval-interval), as `twinkle train --val-dataset /
// --split-dataset-ratio` runs it.
//
// Source of the semantics: Megatron-LM megatron/training/training.py.
//  * evaluate(): eval_iters times a forward-only pass over one global batch (eval_global_batch_size
//    defaults to global_batch_size) with torch.no_grad; for each batch the last pipeline stage sums
//    its micro-batches' (loss sum, token count) pairs, all-reduces them over the data-parallel (+ cp)
//    group and adds them to a running [numerator, denominator]; the result is numerator / denominator,
//    i.e. the token-weighted mean over every labelled token of the K batches (not the mean of the
//    per-batch means; a batch of twice the tokens weighs twice). Here each batch is
//    MegatronModel::forward_only (the Engine's forward-only pipeline on every layout: tp / pp / dp / cp
//    / ep / vpp), whose lm_loss_sum and label tokens are already global, summed in double.
//  * evaluate_and_print_results(): ppl = exp(min(20, loss)); the line
//    " validation loss at iteration N | lm loss value: X | lm loss PPL: Y | " (validation_line).
//  * The validation iterator continues across evaluations (args.consumed_valid_samples; Megatron's
//    dataloaders restart it at (iteration // eval_interval) * eval_iters * eval_global_batch_size
//    samples after a resume) and wraps around at the end of the set (cyclic_iter): validation_first_row.
//    Rows are taken in order, wrapping row by row, so every global batch has batch_size rows.
// No gradient, optimizer, scheduler, step counter or training data position changes; dropout is off
// (Megatron's model.eval()).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/data/batch.h"
#include "twinkle/train/megatron_model.h"

namespace twinkle {

struct EvalResult {
  double lm_loss = 0;        ///< token-weighted mean of -log p(label) over the K batches (nats)
  double ppl = 0;            ///< exp(min(20, lm_loss)) (Megatron's PPL)
  double lm_loss_sum = 0;    ///< the numerator: sum of token losses over the K batches
  int64_t label_tokens = 0;  ///< the denominator: labelled tokens of the K batches (all dp ranks)
  int64_t iters = 0;         ///< global batches evaluated (K)
  int64_t rows = 0;          ///< validation rows evaluated (K * batch_size; repeats counted)
  int64_t first_row = 0;     ///< validation row the first batch started at (before wrapping)
  bool has_loss = false;     ///< false when no batch had a labelled token (lm_loss and ppl then 0)
};

/// Megatron's consumed_valid_samples before the evaluation after step `step` (>= 1): the rows of the
/// interval evaluations before it, (ceil(step / eval_interval) - 1) * eval_iters * batch_size — for an
/// evaluation at an interval step (step / eval_interval - 1 before it) and for the final one of a run that
/// ends between intervals (floor(step / eval_interval) before it) alike; eval_interval 0 (no interval
/// evaluations) gives 0. The same after a resume, so a restarted run's curve is the uninterrupted one's.
/// Throws twinkle::Error on step < 1, a negative eval_interval / eval_iters, or batch_size < 1.
int64_t validation_first_row(int64_t step, int64_t eval_interval, int64_t eval_iters, int64_t batch_size);

/// Indices into a validation set of `n_rows` rows of data-parallel rank `dp_rank`'s block of the global
/// batch that starts at row `first` (mod n_rows): rows (first + i) mod n_rows for i in [dp_rank * b / dp_size,
/// (dp_rank + 1) * b / dp_size), b = batch_size (the DataLoader's contiguous blocks, twinkle/data/dataloader.h).
/// Throws twinkle::Error when n_rows < 1, batch_size < 1, dp_size < 1, dp_rank is outside [0, dp_size) or
/// batch_size is not divisible by dp_size.
std::vector<int64_t> validation_batch_indices(int64_t n_rows, int64_t first, int64_t batch_size, int dp_rank, int dp_size);

/// Megatron's evaluate over `rows` (every rank holds the whole encoded validation set): `iters` global
/// batches of `batch_size` rows starting at row `first_row`, this rank's blocks by the model's mesh
/// (data-parallel rank and size), each through m.forward_only. Collective over the world. Throws
/// twinkle::Error when iters < 1, rows is empty or what validation_batch_indices / forward_only refuse
/// (on every rank alike).
EvalResult evaluate(MegatronModel& m, const std::vector<EncodedRow>& rows, int64_t first_row, int64_t iters,
                    int64_t batch_size);

/// Megatron's perplexity of a loss: exp(min(20, loss)).
double validation_ppl(double lm_loss);

/// Megatron's evaluate_and_print_results line for an evaluation after step `step`:
/// " validation loss at iteration N | lm loss value: X | lm loss PPL: Y | " (X, Y as %.6E); "no labelled
/// tokens" instead of the values when the batches had none.
std::string validation_line(const EvalResult& r, int64_t step);

}  // namespace twinkle
