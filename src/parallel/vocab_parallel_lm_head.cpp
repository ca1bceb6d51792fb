#include "twinkle/parallel/vocab_parallel_lm_head.h"

#include <algorithm>
#include <cstring>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"
#include "twinkle/parallel/vocab_parallel_embedding.h"

namespace twinkle::parallel {

VocabParallelLMHead::VocabParallelLMHead(TensorTable& table, const TensorParallel& tp, const VocabShard& shard,
                                         int64_t hidden, int64_t chunk_tokens, Weight weight, size_t shared_entry)
    : table_(&table), tp_(tp), shard_(shard), H_(hidden), chunk_(chunk_tokens) {
  switch (weight) {
    case Weight::Own:
      weight_ = table.add(vocab_entry("lm_head.weight", shard, hidden));
      break;
    case Weight::TiedCopy: {
      TensorEntry e = vocab_entry("model.embed_tokens.weight", shard, hidden);
      e.tied_copy = true;
      e.saved = false;
      e.load_names = {"model.embed_tokens.weight", "lm_head.weight"};
      weight_ = table.add(std::move(e));
      break;
    }
    case Weight::Shared:
      check(shared_entry != kNoParam, "VocabParallelLMHead: a shared weight needs the embedding's entry");
      weight_ = shared_entry;
      break;
  }
}

double VocabParallelLMHead::forward(const float* x_local, const int32_t* targets, int64_t T, float grad_scale,
                                    float* dx_local, Workspace& scratch) const {
  const int64_t Vl = shard_.local, H = H_;
  const bool grad = dx_local != nullptr;
  float* x_full = tp_.sequence_parallel ? scratch.get("tp.x_full", {T, H}).f32() : nullptr;
  const float* x = sp_gather_rows(tp_, x_local, x_full, T, H);
  float* dx_full = grad ? scratch.get("tp.dx_full", {T, H}).f32() : nullptr;
  const kernels::KernelTable& K = table_->kernels();
  if (tp_.size == 1) {
    // One vocab shard: lm head GEMM + cross entropy fused over row chunks (the linear_cross_entropy op);
    // only the `valid` rows of the padded head are real, the padded rows keep a zero gradient.
    float* lse = scratch.get("head.lse", {T}).f32();
    const double loss = K.linear_cross_entropy.forward_backward(x, table_->data(weight_), targets, T, shard_.valid, H,
                                                               grad_scale, lse, dx_local,
                                                               grad ? table_->grad(weight_) : nullptr, chunk_);
    return loss;
  }
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(chunk_, T));
  float* logits = scratch.get("head.logits", {chunk, Vl}).f32();
  float* lse = scratch.get("head.lse", {chunk}).f32();
  float* rmax = scratch.get("head.rmax", {chunk}).f32();
  float* tgt = scratch.get("head.tgt", {chunk}).f32();
  float* rscale = scratch.get("head.rscale", {chunk}).f32();
  const float* W = table_->data(weight_);
  float* dW = grad ? table_->grad(weight_) : nullptr;
  const Device dev = table_->device();
  if (grad) {  // every row of every chunk has the same scale
    if (dev == Device::CPU) {
      std::fill(rscale, rscale + chunk, grad_scale);
    } else {
      const std::vector<float> h(static_cast<size_t>(chunk), grad_scale);
      upload_bytes(dev, rscale, h.data(), h.size() * 4);
    }
  }
  double loss = 0;
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t c = std::min(chunk, T - c0);
    const float* X = x + c0 * H;
    K.linear.forward(X, W, logits, c, Vl, H, false);
    loss += vocab_parallel_ce_forward(*tp_.group, shard_, logits, targets + c0, c, lse, rmax, tgt, K.cross_entropy, dev);
    if (grad) {
      K.cross_entropy.backward(logits, targets + c0, lse, c, Vl, shard_.valid, shard_.start, rscale, logits);
      K.linear.backward(X, W, logits, dx_full + c0 * H, dW, c, Vl, H, false);
    }
  }
  if (grad) {
    float* dx_part = tp_.sequence_parallel ? scratch.get("tp.dx_local", {tp_.local_rows(T), H}).f32() : nullptr;
    const float* rows = tp_reduce_rows(tp_, dx_full, dx_part, T, H);
    copy_bytes(dev, dx_local, rows, static_cast<size_t>(tp_.local_rows(T) * H) * 4);
  }
  return loss;
}

std::vector<float> VocabParallelLMHead::logits(const float* x) const {
  check(tp_.size == 1, "VocabParallelLMHead::logits needs tp = 1");
  std::vector<float> out(static_cast<size_t>(shard_.local));
  const Device dev = table_->device();
  if (dev != Device::CPU) {  // x is a device row: compute on the device, copy the [vocab] row back
    Tensor d = Tensor::zeros({shard_.local}, DType::F32, dev);
    table_->kernels().linear.forward(x, table_->data(weight_), d.f32(), 1, shard_.local, H_, false);
    download_bytes(dev, out.data(), d.f32(), out.size() * 4);
    out.resize(static_cast<size_t>(shard_.vocab));
    return out;
  }
  table_->kernels().linear.forward(x, table_->data(weight_), out.data(), 1, shard_.local, H_, false);
  out.resize(static_cast<size_t>(shard_.vocab));
  return out;
}

}  // namespace twinkle::parallel
