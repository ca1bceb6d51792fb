// Qwen3Model: weights out — full Hugging Face tensors gathered on rank 0 for saving.
#include <cstring>

#include "twinkle/dist/agreed_error.h"
#include "twinkle/model/qwen3_model.h"

namespace twinkle {

std::vector<std::pair<std::string, Tensor>> Qwen3Model::gather_state_dict(bool grads) { return gather(grads, false); }

std::vector<std::pair<std::string, Tensor>> Qwen3Model::gather_adapter_state_dict(bool grads) {
  return gather(grads, true);
}

std::vector<std::pair<std::string, Tensor>> Qwen3Model::gather_flat(const float* flat, bool adapters) {
  return gather(false, adapters, flat);
}

std::vector<std::pair<std::string, Tensor>> Qwen3Model::gather(bool grads, bool adapters, const float* flat) {
  auto& world = *ps_->world;
  const bool root = world.rank() == 0;
  // Only dp=0, cp=0 ranks hold the canonical copy of a dense tensor, and the edp=0, etp=0
  // rank of its ep owner the canonical copy of an expert; they send their shards to the root.
  std::vector<std::pair<std::string, Tensor>> out;
  const int tag = 7001;
  // Gradients of frozen tensors do not exist: refused on every rank before the first send (a
  // rank that threw mid-gather would leave rank 0 waiting in its receive).
  if (grads)
    dist::run_agreed(world, [&] {
      for (size_t id = 0; id < table_.size(); ++id) {
        const parallel::TensorEntry& e = table_[id];
        if (e.saved && e.adapter == adapters && e.param != parallel::kNoParam)
          check(table_.param(id).grad.defined(), "gather_state_dict: " + e.name + " is frozen (no gradient)");
      }
    });
  // The table lists every saved tensor once, in HF order (embed, layers, norm, lm_head).
  for (size_t id = 0; id < table_.size(); ++id) {
    const parallel::TensorEntry& e = table_[id];
    if (!e.saved || e.adapter != adapters) continue;
    std::vector<Tensor> pieces;
    std::vector<ShardSpec> specs;
    std::vector<Shape> locals;
    // A dense tensor: tp rank r of the entry's stage (dp = cp = 0), global rank
    // mesh.rank_of(r, 0, 0, stage). An expert: etp rank r of its ep owner at edp = 0 (one
    // whole copy for etp = 1; etp slices otherwise).
    const bool expert = e.expert && e.ep_owner >= 0;
    const int nsrc = expert ? ps_->mesh.etp_size() : tp_;
    for (int r = 0; r < nsrc; ++r) {
      const int src = expert ? ps_->mesh.expert_rank_of(r, e.ep_owner, 0, e.stage) : ps_->mesh.rank_of(r, 0, 0, e.stage);
      const bool mine = e.param != parallel::kNoParam &&
                        (expert ? ps_->coord.edp == 0 : ps_->coord.dp == 0 && ps_->coord.cp == 0);
      if (world.rank() == src && mine) {
        const Param& p = table_.param(id);
        Tensor dt = grads ? p.grad : p.data;
        if (flat) {  // the same slice of another buffer in the store's flat layout (host memory)
          dt = Tensor::empty(p.data.shape());
          std::memcpy(dt.f32(), flat + p.flat_offset, static_cast<size_t>(dt.numel()) * 4);
        }
        // Device tensors travel through host memory (the world group's MPI path).
        const Tensor t = dt.device() == Device::CPU ? dt : dt.to(Device::CPU);
        if (src == 0) {
          pieces.push_back(dt.device() == Device::CPU ? t.clone() : t);
          specs.push_back(p.shard);
          locals.push_back(p.shape);
        } else {
          int64_t hdr[7] = {p.shard.split_dim, p.shard.full_rows, p.shard.full_cols, p.shard.offset,
                            p.shard.valid,     t.numel(),         p.shape.size() > 1 ? p.shape[1] : 1};
          world.send(hdr, 7, DType::I64, 0, tag);
          world.send(t.f32(), t.numel(), DType::F32, 0, tag + 1);
        }
      }
      if (root && src != 0) {
        int64_t hdr[7];
        world.recv(hdr, 7, DType::I64, src, tag);
        Tensor t = Tensor::zeros({hdr[5]});
        world.recv(t.f32(), hdr[5], DType::F32, src, tag + 1);
        pieces.push_back(t);
        specs.push_back(ShardSpec{static_cast<int>(hdr[0]), hdr[1], hdr[2], hdr[3], hdr[4]});
        locals.push_back(e.full.size() > 1 ? Shape{hdr[5] / hdr[6], hdr[6]} : Shape{hdr[5]});
      }
    }
    if (!root) continue;
    check(!pieces.empty(), "gather_state_dict: no shard of " + e.name + " reached rank 0");
    Tensor full = Tensor::zeros(e.full);
    for (size_t i = 0; i < pieces.size(); ++i) shard_into_full(specs[i], locals[i], pieces[i].f32(), full.f32());
    out.emplace_back(e.name, full);
  }
  return out;
}

}  // namespace twinkle
