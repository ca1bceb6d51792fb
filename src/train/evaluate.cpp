// Evaluation during training, Megatron's evaluate (twinkle/train/evaluate.h).
#include "twinkle/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"

namespace twinkle {

int64_t validation_first_row(int64_t step, int64_t eval_interval, int64_t eval_iters, int64_t batch_size) {
  check(step >= 1 && eval_interval >= 0 && eval_iters >= 0 && batch_size >= 1,
        "validation_first_row: step " + std::to_string(step) + ", eval_interval " + std::to_string(eval_interval) +
            ", eval_iters " + std::to_string(eval_iters) + ", batch_size " + std::to_string(batch_size) +
            " (need step >= 1, eval_interval >= 0, eval_iters >= 0, batch_size >= 1)");
  if (eval_interval == 0) return 0;
  const int64_t before = (step + eval_interval - 1) / eval_interval - 1;  // ceil(step / interval) - 1
  return before * eval_iters * batch_size;
}

std::vector<int64_t> validation_batch_indices(int64_t n_rows, int64_t first, int64_t batch_size, int dp_rank,
                                              int dp_size) {
  check(n_rows >= 1, "validation set: no rows");
  check(batch_size >= 1 && dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size && batch_size % dp_size == 0,
        "validation batch: batch_size " + std::to_string(batch_size) + " over dp rank " + std::to_string(dp_rank) +
            " of " + std::to_string(dp_size) + " (batch_size >= 1, divisible by the dp size)");
  check(first >= 0, "validation batch: first row " + std::to_string(first) + " < 0");
  const int64_t lo = dp_rank * batch_size / dp_size, hi = (dp_rank + 1) * batch_size / dp_size;
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(hi - lo));
  for (int64_t i = lo; i < hi; ++i) idx.push_back((first % n_rows + i) % n_rows);
  return idx;
}

double validation_ppl(double lm_loss) { return std::exp(std::min(20.0, lm_loss)); }

EvalResult evaluate(MegatronModel& m, const std::vector<EncodedRow>& rows, int64_t first_row, int64_t iters,
                    int64_t batch_size) {
  check(iters >= 1, "evaluate: eval_iters must be >= 1, got " + std::to_string(iters));
  check(!rows.empty(), "evaluate: the validation set has no rows");
  const auto& ps = parallel_state();
  const int dp_rank = ps.coord.dp, dp_size = ps.mesh.dp_size();
  EvalResult r;
  r.first_row = first_row;
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<EncodedRow> mine;
  for (int64_t k = 0; k < iters; ++k) {
    mine.clear();
    for (int64_t i : validation_batch_indices(n, first_row + k * batch_size, batch_size, dp_rank, dp_size))
      mine.push_back(rows[static_cast<size_t>(i)]);
    (void)m.forward_only(mine);
    // Megatron's total_loss_dict[key] += [sum of losses, tokens] of the batch (already global here)
    r.lm_loss_sum += m.last_eval_lm_loss_sum();
    r.label_tokens += m.last_eval_label_tokens();
  }
  r.iters = iters;
  r.rows = iters * batch_size;
  r.has_loss = r.label_tokens > 0;
  r.lm_loss = r.has_loss ? r.lm_loss_sum / static_cast<double>(r.label_tokens) : 0.0;
  r.ppl = r.has_loss ? validation_ppl(r.lm_loss) : 0.0;
  return r;
}

std::string validation_line(const EvalResult& r, int64_t step) {
  char buf[256];
  if (r.has_loss)
    std::snprintf(buf, sizeof buf, " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E | ",
                  static_cast<long long>(step), r.lm_loss, r.ppl);
  else
    std::snprintf(buf, sizeof buf, " validation loss at iteration %lld | lm loss: no labelled tokens | ",
                  static_cast<long long>(step));
  return buf;
}

}  // namespace twinkle
