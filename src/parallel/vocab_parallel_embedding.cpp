#include "twinkle/parallel/vocab_parallel_embedding.h"

#include <cstring>
#include <vector>

#include "twinkle/core/device_copy.h"


namespace twinkle::parallel {

TensorEntry vocab_entry(const std::string& name, const VocabShard& shard, int64_t hidden) {
  TensorEntry e = replicated_entry(name, {shard.vocab, hidden}, ParamInit::Normal);
  e.local = {shard.local, hidden};
  e.shard = ShardSpec{0, shard.vocab, hidden, shard.start, shard.valid};
  return e;
}

VocabParallelEmbedding::VocabParallelEmbedding(TensorTable& table, const TensorParallel& tp, const std::string& name,
                                               const VocabShard& shard, int64_t hidden, bool tied)
    : table_(&table), tp_(tp), shard_(shard), H_(hidden) {
  TensorEntry e = vocab_entry(name, shard, hidden);
  if (tied) e.load_names = {name, "lm_head.weight"};
  weight_ = table.add(std::move(e));
}

void VocabParallelEmbedding::forward(const int32_t* ids, int64_t T, float* out_local, Workspace& scratch) const {
  const float* W = table_->data(weight_);
  if (tp_.size == 1) {
    table_->kernels().embedding.forward(W, ids, out_local, T, H_, shard_.start, shard_.local);
    return;
  }
  float* full = scratch.get("tp.emb_full", {T, H_}).f32();
  table_->kernels().embedding.forward(W, ids, full, T, H_, shard_.start, shard_.local);
  const float* rows = tp_reduce_rows(tp_, full, out_local, T, H_);
  if (rows != out_local) copy_bytes(table_->device(), out_local, rows, static_cast<size_t>(tp_.local_rows(T) * H_) * 4);
}

void VocabParallelEmbedding::backward(const float* dy_local, const int32_t* ids, int64_t T,
                                      std::optional<int64_t> padding_idx, Workspace& scratch) const {
  if (table_->grad(weight_) == nullptr) return;  // frozen (LoRA): no gradient to accumulate
  float* dy_full = tp_.sequence_parallel ? scratch.get("tp.dy_full", {T, H_}).f32() : nullptr;
  const float* dy = sp_gather_rows(tp_, dy_local, dy_full, T, H_);
  float* dW = table_->grad(weight_);
  if (!padding_idx) {
    table_->kernels().embedding.backward(dy, ids, dW, T, H_, shard_.start, shard_.local);
    return;
  }
  // The padding row gets no gradient from the lookup (a tied lm head still contributes to it).
  // (Device ids come pre-masked from the model, with padding_idx unset: StageBatch::dev_ids_nopad.)
  check(table_->device() == Device::CPU, "VocabParallelEmbedding::backward: padding_idx masking needs host ids");
  std::vector<int32_t> masked(ids, ids + T);
  for (auto& id : masked)
    if (id == *padding_idx) id = -1;  // outside every shard: skipped
  table_->kernels().embedding.backward(dy, masked.data(), dW, T, H_, shard_.start, shard_.local);
}

}  // namespace twinkle::parallel
