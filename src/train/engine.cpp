#include "twinkle/train/engine.h"

namespace twinkle {

Engine::Engine(Qwen3Model& model) : model_(model) {}

StepResult Engine::forward_backward(const std::vector<MicroBatch>& mbs) { return run(mbs, true); }
StepResult Engine::forward_only(const std::vector<MicroBatch>& mbs) { return run(mbs, false); }

StepResult Engine::run(const std::vector<MicroBatch>& mbs, bool training) {
  auto& ps = model_.ps();
  // No micro-batch is allowed: a data-parallel rank without a row of a short last batch
  // (B27) still joins the token count, the pipeline (0 micro-batches on every stage of its
  // replica) and the loss reduction, contributing 0.
  std::vector<StageBatch> sb;
  sb.reserve(mbs.size());
  int64_t counts[2] = {0, 0};  // labelled tokens, tokens
  for (const auto& mb : mbs) {
    sb.push_back(model_.prepare(mb));
    counts[0] += sb.back().num_targets;
    // every cp rank holds a share of the same rows: count them once (on cp rank 0)
    if (ps.cp_rank() == 0) counts[1] += static_cast<int64_t>(mb.input_ids.size());
  }
  if (ps.dp_cp->size() > 1) ps.dp_cp->all_reduce(counts, 2, DType::I64, dist::ReduceOp::Sum);
  StepResult res;
  res.label_tokens = counts[0];
  res.tokens = counts[1];
  const float grad_scale = counts[0] > 0 ? 1.0f / static_cast<float>(counts[0]) : 0.0f;
  const int p = ps.pp_size(), s = ps.pp_rank();
  double loss_sum = 0;
  parallel::PipelineStage st;
  st.forward = [&](int mb, const float* in) {
    loss_sum += model_.forward(parallel::pipeline_slot(mb, s, p), sb[static_cast<size_t>(mb)], in, grad_scale, training);
  };
  st.output = [&](int mb) { return model_.output_hidden(parallel::pipeline_slot(mb, s, p)); };
  st.backward = [&](int mb, const float* dout) {
    return model_.backward(parallel::pipeline_slot(mb, s, p), sb[static_cast<size_t>(mb)], dout);
  };
  st.hidden_elems = [&](int mb) {
    return model_.hidden_rows(sb[static_cast<size_t>(mb)]) * model_.config().hidden_size;
  };
  res.times = parallel::run_1f1b(*ps.pp, static_cast<int>(mbs.size()), st, !training);
  if (training) model_.finalize_grads();
  // loss: sum over dp-cp on the last stage, then broadcast from the last stage over pp
  double v[1] = {ps.is_last_stage() ? loss_sum : 0.0};
  if (ps.dp_cp->size() > 1) ps.dp_cp->all_reduce_f64(v, 1, dist::ReduceOp::Sum);
  if (p > 1) ps.pp->broadcast(v, 1, DType::I64, p - 1);  // 8-byte payload (a double)
  res.loss = counts[0] > 0 ? v[0] / static_cast<double>(counts[0]) : 0.0;
  return res;
}

}  // namespace twinkle
