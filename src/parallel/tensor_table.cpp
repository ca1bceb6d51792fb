#include "twinkle/parallel/tensor_table.h"

#include "twinkle/core/error.h"

namespace twinkle::parallel {

namespace {
ShardSpec whole(const Shape& full) {
  const int64_t rows = full.empty() ? 1 : full[0];
  const int64_t cols = full.size() > 1 ? full[1] : 1;
  return ShardSpec{-1, rows, cols, 0, rows};
}
}  // namespace

TensorEntry replicated_entry(const std::string& name, const Shape& full, ParamInit init) {
  TensorEntry e;
  e.name = name;
  e.full = full;
  e.local = full;
  e.shard = whole(full);
  e.init = init;
  return e;
}

TensorEntry split_entry(const std::string& name, const Shape& full, int dim, int tp_rank, int tp, ParamInit init) {
  check(dim >= 0 && static_cast<size_t>(dim) < full.size(), "split_entry: " + name + " has no dim " + std::to_string(dim));
  check(full[static_cast<size_t>(dim)] % tp == 0, "split_entry: dim " + std::to_string(dim) + " of " + name + " (" +
                                                      std::to_string(full[static_cast<size_t>(dim)]) +
                                                      ") is not divisible by tp " + std::to_string(tp));
  TensorEntry e = replicated_entry(name, full, init);
  const int64_t part = full[static_cast<size_t>(dim)] / tp;
  e.local[static_cast<size_t>(dim)] = part;
  e.shard.split_dim = dim;
  e.shard.offset = part * tp_rank;
  e.shard.valid = part;
  return e;
}

size_t TensorTable::add(TensorEntry e) {
  check(store_ == nullptr || (e.adapter && adapter_store_ == nullptr),
        "TensorTable::add after materialize (" + e.name + ")");
  for (const auto& x : entries_)
    check(!(x.name == e.name && x.stage == stage_), "TensorTable: '" + e.name + "' added twice on stage " +
                                                        std::to_string(stage_));
  e.stage = stage_;
  if (e.load_names.empty()) e.load_names = {e.name};
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

void TensorTable::materialize(int stage, ParamStore& store, int ep_rank) {
  check(store_ == nullptr, "TensorTable::materialize called twice");
  for (auto& e : entries_) {
    if (e.stage != stage || e.adapter || (e.ep_owner >= 0 && e.ep_owner != ep_rank)) continue;
    Param p;
    p.name = e.name;
    p.shape = e.local;
    p.shard = e.shard;
    p.weight_decay = e.weight_decay;
    p.tp_duplicate = e.tp_duplicate;
    p.tp_grad_allreduce = e.tp_grad_allreduce;
    p.tied_copy = e.tied_copy;
    p.expert = e.expert;
    e.param = store.add(std::move(p));
  }
  store_ = &store;
}

void TensorTable::materialize_adapters(int stage, ParamStore& store, int ep_rank) {
  check(adapter_store_ == nullptr, "TensorTable::materialize_adapters called twice");
  for (auto& e : entries_) {
    if (e.stage != stage || !e.adapter || (e.ep_owner >= 0 && e.ep_owner != ep_rank)) continue;
    Param p;
    p.name = e.name;
    p.shape = e.local;
    p.shard = e.shard;
    p.weight_decay = e.weight_decay;
    p.tp_duplicate = e.tp_duplicate;
    p.tp_grad_allreduce = e.tp_grad_allreduce;
    p.expert = e.expert;
    e.param = store.add(std::move(p));
  }
  adapter_store_ = &store;
}

Param& TensorTable::param(size_t id) const {
  const TensorEntry& e = entries_.at(id);
  ParamStore* s = e.adapter ? adapter_store_ : store_;
  check(s != nullptr && e.param != kNoParam,
        "TensorTable: '" + e.name + "' (stage " + std::to_string(e.stage) + ") is not held by this rank");
  return s->params()[e.param];
}

}  // namespace twinkle::parallel
