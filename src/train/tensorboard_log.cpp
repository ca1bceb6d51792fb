// One step's metrics as TensorBoard scalars (twinkle/train/tensorboard_log.h).
#include "twinkle/train/tensorboard_log.h"

namespace twinkle {

void write_step_scalars(TensorBoardWriter& tb, const MegatronModel::StepMetrics& m, int64_t step) {
  if (m.has_loss) tb.add_scalar("lm loss", m.moe ? m.lm_loss : m.loss, step);
  if (m.moe) {
    if (m.has_loss) tb.add_scalar("loss", m.loss, step);
    tb.add_scalar("load_balancing_loss", m.aux_loss, step);
    tb.add_scalar("z_loss", m.z_loss, step);
    tb.add_scalar("expert-grad-norm", m.expert_grad_norm, step);
    tb.add_scalar("expert-load-max", m.expert_load_max, step);
    tb.add_scalar("expert-load-min", m.expert_load_min, step);
  }
  tb.add_scalar("grad-norm", m.grad_norm, step);
  tb.add_scalar("learning-rate", m.lr, step);
  tb.add_scalar("tokens-per-sec", m.tokens_per_s, step);
  tb.add_scalar("mfu", m.mfu, step);
  tb.add_scalar("iteration-time", m.step_time_s, step);
  if (m.peak_memory_bytes > 0) tb.add_scalar("mem-max-allocated-bytes", static_cast<double>(m.peak_memory_bytes), step);
  tb.flush();
}

void write_eval_scalars(TensorBoardWriter& tb, const EvalResult& r, int64_t step) {
  if (!r.has_loss) return;
  tb.add_scalar("lm loss validation", r.lm_loss, step);
  tb.add_scalar("lm loss validation ppl", r.ppl, step);
  tb.flush();
}

}  // namespace twinkle
