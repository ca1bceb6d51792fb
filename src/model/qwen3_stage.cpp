// Qwen3Model: one pipeline stage's forward/backward (embedding, layers, fused lm head + loss).
#include <algorithm>
#include <cstring>
#include <vector>

#include "twinkle/kernels/cpu/cross_entropy.h"
#include "twinkle/kernels/cpu/embedding.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/reduce.h"
#include "twinkle/kernels/cpu/rmsnorm.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle {

namespace k = kernels::cpu;

double Qwen3Model::head_forward(int slot, const StageBatch& b, const float* x, float grad_scale, bool training) {
  Workspace& ws = slot_ws(slot);
  auto& tpg = *ps_->tp;
  const int64_t T = b.T, Tl = hidden_rows(b), H = H_, Vl = vocab_.local;
  float* fn = ws.get("fn", {Tl, H}).f32();
  float* rstdf = ws.get("rstdf", {Tl}).f32();
  k::rmsnorm_forward(x, P(final_norm_), fn, rstdf, Tl, H, static_cast<float>(cfg_.rms_norm_eps));
  const float* fnf = sp_all_gather(scratch_, "fnf", fn, T, Tl);
  const bool grad = training && grad_scale != 0.0f;
  if (!grad && b.num_targets == 0) return 0.0;  // nothing to score (generation)
  float* dfnf = grad ? scratch_.get("dfnf", {T, H}).f32() : nullptr;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(opts_.lm_head_chunk_tokens, T));
  float* logits = scratch_.get("logits", {chunk, Vl}).f32();
  float* lse = scratch_.get("lse", {chunk}).f32();
  float* rmax = scratch_.get("rmax", {chunk}).f32();
  float* tgt = scratch_.get("tgt", {chunk}).f32();
  float* rscale = scratch_.get("rscale", {chunk}).f32();
  double loss = 0;
  const float* W = P(lm_head_);
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c = std::min(chunk, T - c0);
    const float* X = fnf + c0 * H;
    k::linear_forward(X, W, logits, c, Vl, H);
    loss += parallel::vocab_parallel_ce_forward(tpg, vocab_, logits, b.targets.data() + c0, c, lse, rmax, tgt);
    if (grad) {
      std::fill(rscale, rscale + c, grad_scale);
      k::ce_backward(logits, b.targets.data() + c0, lse, c, Vl, vocab_.valid, vocab_.start, rscale, logits);
      k::linear_backward(X, W, logits, dfnf + c0 * H, G(lm_head_), c, Vl, H);
    }
  }
  if (grad) {
    float* dfn = ws.get("dfn", {Tl, H}).f32();
    std::memcpy(dfn, tp_reduce_rows(dfnf, "dfn_local", T, Tl), static_cast<size_t>(Tl * H) * 4);
  }
  return loss;
}

double Qwen3Model::forward(int slot, const StageBatch& b, const float* in_hidden, float grad_scale, bool training) {
  Workspace& ws = slot_ws(slot);
  const int64_t T = b.T, Tl = hidden_rows(b), H = H_;
  float* x0 = ws.get("x0", {Tl, H}).f32();
  if (first_) {
    if (tp_ == 1) {
      k::embedding_forward(P(embed_), b.ids.data(), x0, T, H, vocab_.start, vocab_.local);
    } else {
      float* ef = scratch_.get("embf", {T, H}).f32();
      k::embedding_forward(P(embed_), b.ids.data(), ef, T, H, vocab_.start, vocab_.local);
      std::memcpy(x0, tp_reduce_rows(ef, "emb_local", T, Tl), static_cast<size_t>(Tl * H) * 4);
    }
  } else {
    check(in_hidden != nullptr, "Qwen3Model::forward: a non-first stage needs the previous stage's hidden state");
    std::memcpy(x0, in_hidden, static_cast<size_t>(Tl * H) * 4);
  }
  const float* x = x0;
  for (int64_t i = 0; i < nlayers_; ++i) {
    float* y = ws.get("l" + std::to_string(i) + ".y", {Tl, H}).f32();
    layer_forward(slot, i, b, x, y);
    x = y;
  }
  if (!last_) return 0.0;
  return head_forward(slot, b, x, grad_scale, training);
}

const float* Qwen3Model::output_hidden(int slot) {
  Workspace& ws = slot_ws(slot);
  return ws.get("l" + std::to_string(nlayers_ - 1) + ".y", {0}).f32();
}

const float* Qwen3Model::backward(int slot, const StageBatch& b, const float* d_out) {
  Workspace& ws = slot_ws(slot);
  const int64_t T = b.T, Tl = hidden_rows(b), H = H_;
  auto layer_in = [&](int64_t i) -> const float* {
    return i == 0 ? ws.get("x0", {Tl, H}).f32() : ws.get("l" + std::to_string(i - 1) + ".y", {Tl, H}).f32();
  };
  float* bufs[2] = {scratch_.get("dA", {Tl, H}).f32(), scratch_.get("dB", {Tl, H}).f32()};
  int cur = 0;
  const float* dcur = d_out;
  if (last_) {
    const float* xl = ws.get("l" + std::to_string(nlayers_ - 1) + ".y", {Tl, H}).f32();
    k::rmsnorm_backward(xl, P(final_norm_), ws.get("rstdf", {Tl}).f32(), ws.get("dfn", {Tl, H}).f32(), bufs[cur],
                        G(final_norm_), Tl, H);
    dcur = bufs[cur];
    cur ^= 1;
  }
  check(dcur != nullptr, "Qwen3Model::backward: a non-last stage needs the next stage's gradient");
  for (int64_t i = nlayers_ - 1; i >= 0; --i) {
    layer_backward(slot, i, b, layer_in(i), dcur, bufs[cur]);
    dcur = bufs[cur];
    cur ^= 1;
  }
  if (!first_) return dcur;
  const float* dfull = sp_all_gather(scratch_, "gfull", dcur, T, Tl);
  if (cfg_.pad_token_id) {
    // HF builds nn.Embedding(vocab, hidden, padding_idx=config.pad_token_id): that row gets no
    // gradient from the lookup (a tied lm head still contributes to it).
    std::vector<int32_t> ids = b.ids;
    for (auto& id : ids)
      if (id == *cfg_.pad_token_id) id = -1;  // outside every shard: skipped
    k::embedding_backward(dfull, ids.data(), G(embed_), T, H, vocab_.start, vocab_.local);
  } else {
    k::embedding_backward(dfull, b.ids.data(), G(embed_), T, H, vocab_.start, vocab_.local);
  }
  return nullptr;
}

std::vector<float> Qwen3Model::last_token_logits(int slot, const StageBatch& b) {
  check(tp_ == 1 && first_ && last_, "last_token_logits needs a single-stage model with tp = 1");
  const int64_t H = H_;
  const float* fn = slot_ws(slot).get("fn", {b.T, H}).f32() + (b.T - 1) * H;
  std::vector<float> out(static_cast<size_t>(vocab_.local));
  k::linear_forward(fn, P(lm_head_), out.data(), 1, vocab_.local, H);
  out.resize(static_cast<size_t>(cfg_.vocab_size));
  return out;
}

void Qwen3Model::finalize_grads() {
  auto& tpg = *ps_->tp;
  if (tp_ > 1) {
    for (auto& p : store_.params())
      if (p.tp_grad_allreduce) parallel::all_reduce_sum(tpg, p.grad.f32(), p.grad.numel());
  }
  if (cfg_.tie_word_embeddings && ps_->pp_size() > 1 && (first_ || last_)) {
    Param& e = store_[first_ ? embed_ : lm_head_];
    parallel::all_reduce_sum(*ps_->embedding, e.grad.f32(), e.grad.numel());
  }
}

}  // namespace twinkle
