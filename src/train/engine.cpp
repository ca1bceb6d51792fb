#include "twinkle/train/engine.h"

#include <algorithm>
#include <exception>
#include <map>
#include <utility>

#include "twinkle/dist/agreed_error.h"
#include "twinkle/kernels/cpu/moe_aux_loss.h"

namespace twinkle {

Engine::Engine(CausalLM& model) : model_(model) {}

StepResult Engine::forward_backward(const std::vector<MicroBatch>& mbs, const std::string& input_error) {
  return run(mbs, true, input_error);
}

void Engine::set_optimizer(DistributedOptimizer* opt) {
  opt_ = opt;
  if (!opt) {
    model_.set_comm_hooks({});
    return;
  }
  CommHooks h;
  h.grad_ready = [opt](const Param& p) { opt->grad_ready(p); };
  h.param_use = [opt](const Param& p) { opt->param_use(p); };
  h.progress = [opt] { opt->progress(); };
  model_.set_comm_hooks(std::move(h));
}
StepResult Engine::forward_only(const std::vector<MicroBatch>& mbs, const std::string& input_error) {
  return run(mbs, false, input_error);
}

namespace {

// A micro-batch that contributes nothing: one pad token, no label, attention_mask 0 (so no
// router statistic or router-loss gradient either).
MicroBatch filler_micro_batch() {
  MicroBatch f;
  f.batch = f.seq = 1;
  f.input_ids = {0};
  f.labels = {kIgnoreIndex};
  f.position_ids = {0};
  f.cu_seqlens = {0, 1};
  f.attention_mask = {0};
  return f;
}

}  // namespace

StepResult Engine::run(const std::vector<MicroBatch>& mbs_in, bool training, const std::string& input_error) {
  auto& ps = model_.ps();
  // Refusals that every rank reaches alike come before any communication (a second backward under
  // overlap_grad_reduce: the optimizer's state is the same on every rank).
  if (training && opt_) opt_->check_backward_allowed();
  // No micro-batch is allowed: a data-parallel rank without a row of a short last batch
  // still joins the token count, the pipeline (0 micro-batches on every stage of its
  // replica) and the loss reduction, contributing 0.
  // Under expert parallelism every micro-batch's dispatch is a collective over the ep group
  // (and, with etp > 1, the etp group), which spans data-parallel replicas: a replica with fewer
  // micro-batches (a short last batch) runs filler micro-batches up to the most any replica
  // runs (they hold no real token).
  const std::vector<MicroBatch>* src = &mbs_in;
  std::vector<MicroBatch> padded;
  const size_t real_mbs = mbs_in.size();
  if ((ps.ep_size() > 1 || ps.mesh.etp_size() > 1) && ps.world->size() > 1) {
    int64_t most[1] = {static_cast<int64_t>(real_mbs)};
    ps.world->all_reduce(most, 1, DType::I64, dist::ReduceOp::Max);
    if (most[0] > static_cast<int64_t>(real_mbs)) {
      padded = mbs_in;
      while (static_cast<int64_t>(padded.size()) < most[0]) padded.push_back(filler_micro_batch());
      src = &padded;
    }
  }
  // The interleaved schedule runs micro-batch groups of pp (a multiple of pp per step,
  // parallel/pipeline_interleaved.h): a replica's step is padded with fillers to the next multiple.
  const int vchunks = model_.num_chunks(), p = ps.pp_size();
  if (vchunks > 1 && !src->empty() && src->size() % static_cast<size_t>(p)) {
    if (src != &padded) padded = *src;
    while (padded.size() % static_cast<size_t>(p)) padded.push_back(filler_micro_batch());
    src = &padded;
  }
  const std::vector<MicroBatch>& mbs = *src;
  std::vector<StageBatch> sb;
  sb.reserve(mbs.size());
  // labelled tokens, tokens, sequences, their real tokens; ranks that refused their micro-batches
  int64_t counts[5] = {0, 0, 0, 0, 0};
  // A refused micro-batch (bad token id, label, position, shape) is this rank's data: the other
  // ranks would go on into the reductions below. The refusal is counted in the token-count
  // reduction over dp-cp and, when the world is larger than dp-cp (tp, pp, ep), in one more
  // int64 sum over the world: a replica's tp and pp ranks hold the same rows only when the caller
  // gave them the same (a Python program may not), so the group follows from the mesh, not from
  // that assumption. Every rank then throws the same error.
  const std::string call = training ? "forward_backward: " : "forward_only: ";
  std::string refused = input_error.empty() ? std::string() : call + input_error;
  if (refused.empty()) try {
      for (size_t i = 0; i < mbs.size(); ++i) {
        const MicroBatch& mb = mbs[i];
        sb.push_back(model_.prepare(mb));
        counts[0] += sb.back().num_targets;
        // every cp rank holds a share of the same rows: count them once (on cp rank 0); fillers hold none
        if (ps.cp_rank() == 0 && i < real_mbs) {
          counts[1] += static_cast<int64_t>(mb.input_ids.size());
          counts[2] += static_cast<int64_t>(mb.cu_seqlens.size()) - 1;
          counts[3] += mb.attention_mask.empty()
                           ? static_cast<int64_t>(mb.input_ids.size())
                           : static_cast<int64_t>(std::count(mb.attention_mask.begin(), mb.attention_mask.end(), 1));
        }
      }
    } catch (const std::exception& e) {  // twinkle::Error, or a std:: error (length, allocation) of this replica's data
      refused = call + e.what();
    }
  counts[4] = refused.empty() ? 0 : 1;
  if (ps.dp_cp->size() > 1) ps.dp_cp->all_reduce(counts, 5, DType::I64, dist::ReduceOp::Sum);
  int64_t refusals = counts[4];
  if (ps.world->size() > ps.dp_cp->size()) {
    refusals = refused.empty() ? 0 : 1;
    ps.world->all_reduce(&refusals, 1, DType::I64, dist::ReduceOp::Sum);
  }
  dist::throw_agreed_error(*ps.world, refusals, refused);
  if (training && opt_) opt_->backward_started();
  const bool moe = model_.is_moe();
  const int64_t E = moe ? model_.config().num_experts : 0;
  // Per micro-batch router statistics of this stage: prob_sum[E], counts[E], N, aux_per_layer, z.
  const size_t W = static_cast<size_t>(2 * E + 3);
  std::vector<double> mstats;
  if (moe) {
    int64_t nmb[1] = {static_cast<int64_t>(real_mbs)};
    if (ps.dp->size() > 1) ps.dp->all_reduce(nmb, 1, DType::I64, dist::ReduceOp::Sum);
    model_.set_global_micro_batches(nmb[0]);
    mstats.assign(W * mbs.size(), 0.0);
  }
  StepResult res;
  res.label_tokens = counts[0];
  res.tokens = counts[1];
  res.sequences = counts[2];
  res.sequence_tokens = counts[3];
  const float grad_scale = counts[0] > 0 ? 1.0f / static_cast<float>(counts[0]) : 0.0f;
  const int s = ps.pp_rank();
  double loss_sum = 0;
  // This stage's router statistics of micro-batch mb from chunk c's forward, summed over the chunks.
  auto add_moe_stats = [&](const PipelineChunk& c, int slot, int mb) {
    if (!moe) return;
    const MoeStageStats& m = c.moe_stats(slot);
    double* o = mstats.data() + W * static_cast<size_t>(mb);
    for (int64_t e = 0; e < E; ++e) {
      o[e] += m.prob_sum[static_cast<size_t>(e)];
      o[E + e] += static_cast<double>(m.counts[static_cast<size_t>(e)]);
    }
    o[2 * E] += static_cast<double>(m.n);
    o[2 * E + 1] += m.aux_per_layer;
    o[2 * E + 2] += m.z;
  };
  // The model's hooks cover its base parameters; an adapter store's all-gathers finish first.
  if (opt_ && &opt_->store() != &model_.store()) opt_->finish_param_sync();
  const int last_mb = static_cast<int>(mbs.size()) - 1;
  const bool final_hooks = opt_ && training;  // the schedules run each chunk's backwards in micro-batch order
  if (vchunks == 1) {
    PipelineChunk& chunk = model_.pipeline_chunk(0);
    parallel::PipelineStage st;
    st.forward = [&](int mb, const float* in) {
      const int slot = parallel::pipeline_slot(mb, s, p);
      loss_sum += chunk.forward(slot, sb[static_cast<size_t>(mb)], in, grad_scale, training);
      add_moe_stats(chunk, slot, mb);
    };
    st.output = [&](int mb) { return chunk.output_hidden(parallel::pipeline_slot(mb, s, p)); };
    st.backward = [&](int mb, const float* dout) {
      if (final_hooks) chunk.set_final_backward(mb == last_mb);
      return chunk.backward(parallel::pipeline_slot(mb, s, p), sb[static_cast<size_t>(mb)], dout);
    };
    st.hidden_elems = [&](int mb) {
      return model_.hidden_rows(sb[static_cast<size_t>(mb)]) * model_.config().hidden_size;
    };
    if (model_.device() != Device::CPU)  // received hidden states / gradients land in device memory
      st.recv_buffer = [&](int which, int64_t elems) { return model_.pipeline_buffer(which, elems, 0); };
    res.times = parallel::run_1f1b(*ps.pp, static_cast<int>(mbs.size()), st, !training);
  } else if (!mbs.empty()) {
    // Activation slots per chunk: taken by a forward, given back by its backward (training); a
    // forward-only pass reuses slot 0, its output sent before the chunk's next forward.
    std::vector<std::vector<int>> free_slots(static_cast<size_t>(vchunks));
    std::vector<int> slots_made(static_cast<size_t>(vchunks), 0);
    std::map<std::pair<int, int>, int> slot_of;
    auto take_slot = [&](int c, int mb) {
      if (!training) return 0;
      auto& f = free_slots[static_cast<size_t>(c)];
      int slot;
      if (f.empty()) {
        slot = slots_made[static_cast<size_t>(c)]++;
      } else {
        slot = f.back();
        f.pop_back();
      }
      slot_of[{c, mb}] = slot;
      return slot;
    };
    auto held_slot = [&](int c, int mb) { return training ? slot_of.at({c, mb}) : 0; };
    parallel::ChunkedPipelineStage st;
    st.forward = [&](int c, int mb, const float* in) {
      PipelineChunk& chunk = model_.pipeline_chunk(c);
      const int slot = take_slot(c, mb);
      loss_sum += chunk.forward(slot, sb[static_cast<size_t>(mb)], in, grad_scale, training);
      add_moe_stats(chunk, slot, mb);
    };
    st.output = [&](int c, int mb) { return model_.pipeline_chunk(c).output_hidden(held_slot(c, mb)); };
    st.backward = [&](int c, int mb, const float* dout) {
      PipelineChunk& chunk = model_.pipeline_chunk(c);
      const int slot = held_slot(c, mb);
      if (final_hooks) chunk.set_final_backward(mb == last_mb);
      const float* din = chunk.backward(slot, sb[static_cast<size_t>(mb)], dout);
      free_slots[static_cast<size_t>(c)].push_back(slot);
      slot_of.erase({c, mb});
      return din;
    };
    st.hidden_elems = [&](int mb) {
      return model_.hidden_rows(sb[static_cast<size_t>(mb)]) * model_.config().hidden_size;
    };
    if (model_.device() != Device::CPU)
      st.recv_buffer = [&](int which, int64_t elems, int index) { return model_.pipeline_buffer(which, elems, index); };
    res.times = parallel::run_interleaved_1f1b(*ps.pp, static_cast<int>(mbs.size()), vchunks, st, !training);
  }
  if (training) model_.finalize_grads();
  if (opt_) opt_->finish_param_sync();  // a stage without a micro-batch read no parameter
  // loss: sum over dp-cp on the last stage, then broadcast from the last stage over pp
  double v[1] = {ps.is_last_stage() ? loss_sum : 0.0};
  if (ps.dp_cp->size() > 1) ps.dp_cp->all_reduce_f64(v, 1, dist::ReduceOp::Sum);
  if (p > 1) ps.pp->broadcast(v, 1, DType::I64, p - 1);  // 8-byte payload (a double)
  res.lm_loss_sum = v[0];
  res.loss = counts[0] > 0 ? v[0] / static_cast<double>(counts[0]) : 0.0;
  res.lm_loss = res.loss;
  if (moe) {
    // Each stage holds its MoE layers' part of every micro-batch: sum the parts over pp, then
    // evaluate each micro-batch's value and sum the values and the expert counts over dp.
    if (p > 1 && !mstats.empty()) ps.pp->all_reduce_f64(mstats.data(), static_cast<int64_t>(mstats.size()), dist::ReduceOp::Sum);
    const MoeLossSettings mls = model_.moe_loss_settings();
    const bool global = mls.aux_type == "global";
    std::vector<double> tot(static_cast<size_t>(E + 3), 0.0);  // counts[E], aux sum, z sum, micro-batches
    std::vector<int64_t> cnt(static_cast<size_t>(E));
    for (size_t mb = 0; mb < real_mbs; ++mb) {  // filler micro-batches hold no statistics
      const double* o = mstats.data() + W * mb;
      for (int64_t e = 0; e < E; ++e) cnt[static_cast<size_t>(e)] = static_cast<int64_t>(o[E + e]);
      const double aux = global ? kernels::cpu::moe_aux_loss_value(o, cnt.data(), E,
                                                                    kernels::cpu::moe_aux_scale_global(
                                                                        E, static_cast<int64_t>(o[2 * E])))
                                : o[2 * E + 1];
      for (int64_t e = 0; e < E; ++e) tot[static_cast<size_t>(e)] += o[E + e];
      tot[static_cast<size_t>(E)] += aux;
      tot[static_cast<size_t>(E + 1)] += o[2 * E + 2];
      tot[static_cast<size_t>(E + 2)] += 1.0;
    }
    if (ps.dp->size() > 1) ps.dp->all_reduce_f64(tot.data(), static_cast<int64_t>(tot.size()), dist::ReduceOp::Sum);
    const double nmb = std::max(1.0, tot[static_cast<size_t>(E + 2)]);
    for (int64_t e = 0; e < E; ++e) cnt[static_cast<size_t>(e)] = static_cast<int64_t>(tot[static_cast<size_t>(e)]);
    const auto load = kernels::cpu::moe_expert_load(cnt.data(), E);
    res.moe = true;
    res.aux_loss = tot[static_cast<size_t>(E)] / nmb;
    res.z_loss = tot[static_cast<size_t>(E + 1)] / nmb;
    res.expert_load_max = load.max_share;
    res.expert_load_min = load.min_share;
    res.loss = res.lm_loss + mls.aux_coeff * res.aux_loss + mls.z_coeff * res.z_loss;
  }
  return res;
}

}  // namespace twinkle
