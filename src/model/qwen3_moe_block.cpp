#include "twinkle/model/qwen3_moe_block.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/parallel/expert_layout.h"
#include "twinkle/parallel/lora_dropout.h"
#include "twinkle/parallel/moe_dispatcher.h"

namespace twinkle {

namespace {
// Buffers of `ws` (f32 only) reinterpreted for the integer and key arrays of the same byte size.
int32_t* i32_buffer(Workspace& ws, const char* key, int64_t n) {
  return reinterpret_cast<int32_t*>(ws.get(key, {std::max<int64_t>(n, 1)}).f32());
}
uint64_t* u64_buffer(Workspace& ws, const char* key, int64_t n) {
  return reinterpret_cast<uint64_t*>(ws.get(key, {2 * std::max<int64_t>(n, 1)}).f32());
}
float* f32_buffer(Workspace& ws, const char* key, int64_t n) { return ws.get(key, {std::max<int64_t>(n, 1)}).f32(); }

// The router runs on this tp rank's SP shard (Tl rows) while the stage's LoRA dropout covers the
// micro-batch's T tokens: under SP this narrows it to the shard's token identities (rows
// tp.rank * Tl ...), so the router's masks equal the single-process ones (lora_dropout.h).
class RouterDropout {
 public:
  RouterDropout(const parallel::TensorParallel& tp, const StageBatch& b, int64_t Tl) {
    const parallel::LoraDropout* d = parallel::current_lora_dropout();
    if (d == nullptr || !tp.sequence_parallel || tp.size == 1) return;
    check(d->T == b.T, "LoRA dropout: the router's dropout context has " + std::to_string(d->T) +
                           " tokens, the micro-batch " + std::to_string(b.T));
    sub_ = *d;
    sub_.token_key = d->token_key + static_cast<int64_t>(tp.rank) * Tl;
    sub_.T = Tl;
    sub_.dump_dir.clear();  // the test hook is single-process
    scope_.emplace(&sub_);
  }

 private:
  parallel::LoraDropout sub_;
  std::optional<parallel::LoraDropoutScope> scope_;
};
}  // namespace

Qwen3MoeBlock::Qwen3MoeBlock(parallel::TensorTable& table, const parallel::TensorParallel& tp,
                             std::shared_ptr<dist::ProcessGroup> ep, const ModelConfig& cfg, int64_t layer,
                             std::shared_ptr<dist::ProcessGroup> etp)
    : table_(&table),
      tp_(tp),
      ep_(std::move(ep)),
      etp_(std::move(etp)),
      H_(cfg.hidden_size),
      E_(cfg.num_experts),
      k_(cfg.num_experts_per_tok),
      I_(cfg.moe_intermediate_size),
      norm_topk_prob_(cfg.norm_topk_prob) {
  check(E_ > 0 && k_ >= 1 && k_ <= E_ && I_ > 0,
        "Qwen3MoeBlock: layer " + std::to_string(layer) + " needs num_experts > 0, 1 <= num_experts_per_tok <= "
        "num_experts and moe_intermediate_size > 0");
  check(tp.size == 1 || tp.sequence_parallel,
        "Qwen3MoeBlock: tp = " + std::to_string(tp.size) + " needs sequence parallelism for a MoE layer");
  ep_size_ = ep_ ? ep_->size() : 1;
  const int ep_rank = ep_ ? ep_->rank() : 0;
  check(E_ % ep_size_ == 0, "expert parallelism: num_experts = " + std::to_string(E_) + " is not divisible by ep = " +
                                std::to_string(ep_size_) + " (each ep rank holds num_experts / ep experts)");
  El_ = E_ / ep_size_;
  first_ = static_cast<int64_t>(ep_rank) * El_;
  etp_size_ = etp_ ? etp_->size() : 1;
  const int etp_rank = etp_ ? etp_->rank() : 0;
  check(etp_size_ == 1 || ep_ != nullptr,
        "Qwen3MoeBlock: etp = " + std::to_string(etp_size_) + " needs the expert-parallel group (size 1 allowed)");
  parallel::check_expert_tensor_split(I_, etp_size_);
  Il_ = I_ / etp_size_;
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  // The router is replicated over tp; under SP each tp rank's gradient covers its own tokens.
  parallel::TensorEntry g = parallel::replicated_entry(p + "gate.weight", {E_, H_}, parallel::ParamInit::Normal);
  g.tp_duplicate = true;
  g.tp_grad_allreduce = tp.size > 1;
  gate_ = table.add(std::move(g));
  const char* proj[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int j = 0; j < 3; ++j) {
    const Shape full = j < 2 ? Shape{I_, H_} : Shape{H_, I_};
    experts_[j].reserve(static_cast<size_t>(E_));
    for (int64_t e = 0; e < E_; ++e) {
      const std::string name = p + "experts." + std::to_string(e) + "." + proj[j] + ".weight";
      // etp > 1: gate/up split by output rows (column-parallel), down by input columns
      // (row-parallel) inside the etp group (Megatron-core experts.py, TEGroupedMLP / SequentialMLP).
      parallel::TensorEntry en =
          etp_size_ > 1 ? parallel::split_entry(name, full, j < 2 ? 0 : 1, etp_rank, etp_size_, parallel::ParamInit::Normal)
                        : parallel::replicated_entry(name, full, parallel::ParamInit::Normal);
      // Reduced over the expert-dp group (which folds tp and dp, less etp), counted once there.
      en.expert = true;
      en.ep_owner = static_cast<int>(e / El_);
      experts_[j].push_back(table.add(std::move(en)));
    }
  }
}

const uint64_t* Qwen3MoeBlock::expert_dropout_keys(const StageBatch& b, int64_t Tl) const {
  const parallel::LoraDropout* d = parallel::current_lora_dropout();
  if (d == nullptr || d->p <= 0.0f || !has_expert_lora()) return nullptr;
  check(d->T == b.T, "LoRA dropout: the experts' dropout context has " + std::to_string(d->T) +
                         " tokens, the micro-batch " + std::to_string(b.T));
  // this tp rank's SP shard of the micro-batch's tokens (as the router's, RouterDropout above)
  return d->token_key + (tp_.sequence_parallel && tp_.size > 1 ? static_cast<int64_t>(tp_.rank) * Tl : 0);
}

Qwen3MoeBlock::Weights Qwen3MoeBlock::weights() const {
  Weights w{};
  w.router = table_->data(gate_);
  w.drouter = table_->grad(gate_);
  for (int j = 0; j < 3; ++j) {
    const size_t e0 = static_cast<size_t>(first_);
    const auto& ids = experts_[j];
    w.w[j] = table_->data(ids[e0]);
    w.dw[j] = table_->grad(ids[e0]);
    w.stride[j] = El_ > 1 ? table_->data(ids[e0 + 1]) - w.w[j] : Il_ * H_;
    // The grouped GEMM reads local expert e at W_0 + e * stride: the entries must be equally spaced.
    for (size_t e = 1; e < static_cast<size_t>(El_); ++e)
      check(table_->data(ids[e0 + e]) - w.w[j] == static_cast<int64_t>(e) * w.stride[j] &&
                (w.dw[j] == nullptr || table_->grad(ids[e0 + e]) - w.dw[j] == static_cast<int64_t>(e) * w.stride[j]),
            "Qwen3MoeBlock: expert tensors of one projection are not equally spaced in the ParamStore");
  }
  return w;
}

void Qwen3MoeBlock::set_expert_lora(int proj, std::vector<parallel::LoraPair> pairs) {
  check(proj >= 0 && proj < 3, "Qwen3MoeBlock::set_expert_lora: projection " + std::to_string(proj) + " not in [0, 3)");
  check(static_cast<int64_t>(pairs.size()) == E_, "Qwen3MoeBlock::set_expert_lora: " + std::to_string(pairs.size()) +
                                                      " LoRA pairs for " + std::to_string(E_) + " experts");
  const parallel::LoraPair* first = nullptr;
  for (const auto& p : pairs) {
    if (!p.active()) continue;
    if (first == nullptr) first = &p;
    check(p.r == first->r && p.scaling == first->scaling,
          "Qwen3MoeBlock::set_expert_lora: the experts' pairs differ in rank or scaling");
  }
  expert_lora_[proj] = first ? std::move(pairs) : std::vector<parallel::LoraPair>{};
}

// The LoRA dropout of local expert rows [row, row + m) (keys: a.lora_keys), or none.
struct Qwen3MoeBlock::ExpertDropout {
  ExpertDropout(const parallel::LoraDropout* d, const uint64_t* keys, bool keys_on_device, int64_t row, int64_t m,
                bool dump) {
    if (d == nullptr || d->p <= 0.0f) {
      scope.emplace(nullptr);
      return;
    }
    sub = *d;
    sub.token_key = keys + row;
    sub.token_key_on_device = keys_on_device;
    sub.T = m;
    if (!dump) sub.dump_dir.clear();
    scope.emplace(&sub);
  }
  parallel::LoraDropout sub;
  std::optional<parallel::LoraDropoutScope> scope;
};

bool Qwen3MoeBlock::has_expert_lora() const {
  return !expert_lora_[0].empty() || !expert_lora_[1].empty() || !expert_lora_[2].empty();
}

namespace {
// f(row, m, pair) for each local expert e with m = counts[e] > 0 rows (rows [row, row + m) of the
// expert-ordered block) whose LoRA pair on this target is active; pairs holds every expert's pair.
template <class F>
void for_each_lora_expert(const std::vector<parallel::LoraPair>& pairs, int64_t first, int64_t El,
                          const int64_t* counts, F&& f) {
  int64_t row = 0;
  for (int64_t e = 0; e < El; ++e) {
    const int64_t m = counts[e];
    const parallel::LoraPair& p = pairs[static_cast<size_t>(first + e)];
    if (m > 0 && p.active()) f(row, m, p);
    row += m;
  }
}
}  // namespace

void Qwen3MoeBlock::lora_forward(int j, const float* X, const int64_t* counts, int64_t N, int64_t K, float* y,
                                 const uint64_t* keys, Workspace& scratch) const {
  if (expert_lora_[j].empty()) return;
  const parallel::LoraDropout* d = parallel::current_lora_dropout();
  for_each_lora_expert(expert_lora_[j], first_, El_, counts, [&](int64_t row, int64_t m, const parallel::LoraPair& p) {
    // PEFT's Linear.forward on this expert's rows: y += s (dropout(x) A^T) B^T
    const ExpertDropout ed(d, keys, scratch.device() != Device::CPU, row, m, ep_size_ == 1 && tp_.size == 1);
    parallel::lora_column_forward(*table_, p, X + row * K, y + row * N, m, K, N, scratch);
  });
}

void Qwen3MoeBlock::lora_backward(int j, const float* X, const int64_t* counts, int64_t N, int64_t K, const float* dy,
                                  float* dX, const uint64_t* keys, Workspace& scratch) const {
  if (expert_lora_[j].empty()) return;
  const parallel::LoraDropout* d = parallel::current_lora_dropout();
  for_each_lora_expert(expert_lora_[j], first_, El_, counts, [&](int64_t row, int64_t m, const parallel::LoraPair& p) {
    // dA, dB accumulate; dX += dropout'(s dy B A)
    const ExpertDropout ed(d, keys, scratch.device() != Device::CPU, row, m, false);
    parallel::lora_column_backward(*table_, p, X + row * K, dy + row * N, dX + row * K, m, K, N, scratch);
  });
}

void Qwen3MoeBlock::experts_forward(const float* xin, const int64_t* counts, int64_t R, const Weights& w,
                                    MoeActivations& a, Workspace& scratch) const {
  const kernels::KernelTable& kt = table_->kernels();
  a.gate = f32_buffer(a.buf, "gate", R * Il_);
  a.up = f32_buffer(a.buf, "up", R * Il_);
  a.act = f32_buffer(a.buf, "act", R * Il_);
  a.y = f32_buffer(a.buf, "y", R * H_);
  kt.grouped_linear.forward(xin, w.w[0], w.stride[0], counts, El_, a.gate, Il_, H_, false);
  kt.grouped_linear.forward(xin, w.w[1], w.stride[1], counts, El_, a.up, Il_, H_, false);
  lora_forward(0, xin, counts, Il_, H_, a.gate, a.lora_keys, scratch);
  lora_forward(1, xin, counts, Il_, H_, a.up, a.lora_keys, scratch);
  kt.swiglu.forward(a.gate, a.up, a.act, R * Il_);
  kt.grouped_linear.forward(a.act, w.w[2], w.stride[2], counts, El_, a.y, H_, Il_, false);
  lora_forward(2, a.act, counts, H_, Il_, a.y, a.lora_keys, scratch);
}

void Qwen3MoeBlock::experts_backward(const float* xin, const int64_t* counts, int64_t R, const Weights& w,
                                     const MoeActivations& a, const float* dy, float* dxin, Workspace& scratch) const {
  const kernels::KernelTable& kt = table_->kernels();
  float* dact = scratch.get("moe.dact", {R, Il_}).f32();
  kt.grouped_linear.backward(a.act, w.w[2], w.stride[2], counts, El_, dy, dact, w.dw[2], H_, Il_, false);
  lora_backward(2, a.act, counts, H_, Il_, dy, dact, a.lora_keys, scratch);
  float* dgate = scratch.get("moe.dgate", {R, Il_}).f32();
  float* dup = scratch.get("moe.dup", {R, Il_}).f32();
  kt.swiglu.backward(a.gate, a.up, dact, dgate, dup, R * Il_);
  kt.grouped_linear.backward(xin, w.w[0], w.stride[0], counts, El_, dgate, dxin, w.dw[0], Il_, H_, false);
  kt.grouped_linear.backward(xin, w.w[1], w.stride[1], counts, El_, dup, dxin, w.dw[1], Il_, H_,
                             /*accumulate_dx=*/true);
  lora_backward(0, xin, counts, Il_, H_, dgate, dxin, a.lora_keys, scratch);
  lora_backward(1, xin, counts, Il_, H_, dup, dxin, a.lora_keys, scratch);
}

const float* Qwen3MoeBlock::forward(const float* x, const StageBatch& b, MoeActivations& a, Workspace& scratch) const {
  const int64_t T = local_rows(b), R = T * k_;
  const Weights w = weights();
  const kernels::KernelTable& kt = table_->kernels();
  const Device dev = scratch.device();
  if (a.buf.device() != dev) a.buf.set_device(dev);  // the slot's buffers on the model's device
  a.x = x;
  a.T = T;
  a.logits = f32_buffer(a.buf, "logits", T * E_);
  a.probs = f32_buffer(a.buf, "probs", T * E_);
  a.lse = f32_buffer(a.buf, "lse", T);
  a.topk_w = f32_buffer(a.buf, "topk_w", R);
  a.topk_idx = i32_buffer(a.buf, "topk_idx", R);
  a.lora_keys = nullptr;
  a.aux_counts = nullptr;
  a.aux_coeff_scale = 0.0;
  a.z_scale = 0.0;
  // Router: fp32 logits, softmax over all experts, top-k (kernels/ops.h MoeRouterOp).
  kt.linear.forward(x, w.router, a.logits, T, E_, H_, false);
  if (router_lora_.active()) {
    const RouterDropout rd(tp_, b, T);
    parallel::lora_column_forward(*table_, router_lora_, x, a.logits, T, H_, E_, scratch);
  }
  kt.moe_router.forward(a.logits, a.probs, a.topk_idx, a.topk_w, T, E_, k_, norm_topk_prob_);
  float* out = scratch.get("moe.out", {T, H_}).f32();
  if (ep_size_ > 1 || etp_size_ > 1) {
    // Expert parallelism: rows to their experts' ep ranks and back (Megatron's alltoall
    // dispatcher), with the etp all-gather / reduce-scatter around the experts when etp > 1.
    if (!a.dispatcher) a.dispatcher = std::make_shared<parallel::AlltoAllDispatcher>(ep_, E_, H_, etp_, &kt, dev);
    parallel::AlltoAllDispatcher& d = *a.dispatcher;
    d.dispatch(x, a.topk_idx, T, k_, &scratch);  // transient rows in the stage's scratch
    if (const uint64_t* keys = expert_dropout_keys(b, T)) {
      a.lora_keys = u64_buffer(a.buf, "lora_keys", d.expert_rows());
      d.dispatch_tags(keys, a.lora_keys, &scratch);
    }
    experts_forward(d.expert_input(), d.local_counts(), d.expert_rows(), w, a, scratch);
    d.combine(a.y, a.topk_w, out, &scratch);
    return out;
  }
  // One ep rank: permute the k copies of each token into expert order, run the experts, combine.
  const kernels::MoePermuteOp& perm = kt.moe_permute;
  a.row_of_slot = i32_buffer(a.buf, "row_of_slot", R);
  a.slot_of_row = i32_buffer(a.buf, "slot_of_row", R);
  a.counts.resize(static_cast<size_t>(E_));
  a.xp = f32_buffer(a.buf, "xp", R * H_);
  perm.sort_by_expert(a.topk_idx, T, k_, E_, a.counts.data(), a.row_of_slot, a.slot_of_row);  // host counts
  perm.permute_forward(x, a.slot_of_row, a.xp, R, k_, H_);
  if (const uint64_t* keys = expert_dropout_keys(b, T)) {  // the rows' tokens, as the permutation reads them
    const uint64_t* tok = keys;
    if (dev != Device::CPU) {  // the tokens' keys are host memory: the permutation reads a device copy
      uint64_t* k = u64_buffer(a.buf, "token_keys", T);
      upload_bytes(dev, k, keys, static_cast<size_t>(T) * sizeof(uint64_t));
      tok = k;
    }
    a.lora_keys = u64_buffer(a.buf, "lora_keys", R);
    perm.permute_keys(tok, a.slot_of_row, a.lora_keys, R, k_);
  }
  experts_forward(a.xp, a.counts.data(), R, w, a, scratch);
  perm.unpermute_forward(a.y, a.row_of_slot, a.topk_w, out, T, k_, H_);
  return out;
}

const float* Qwen3MoeBlock::backward(const float* dout, const StageBatch& b, const MoeActivations& a,
                                     Workspace& scratch) const {
  const int64_t T = local_rows(b), R = T * k_;
  check(a.topk_idx != nullptr && a.T == T, "Qwen3MoeBlock::backward: no forward of this micro-batch");
  const Device dev = scratch.device();
  const Weights w = weights();
  const kernels::KernelTable& kt = table_->kernels();
  float* dtopk_w = scratch.get("moe.dtopk_w", {T, k_}).f32();
  float* dx = scratch.get("moe.dx", {T, H_}).f32();
  if (ep_size_ > 1 || etp_size_ > 1) {
    check(a.dispatcher != nullptr, "Qwen3MoeBlock::backward: no dispatch of this micro-batch");
    parallel::AlltoAllDispatcher& d = *a.dispatcher;
    const int64_t Rr = d.expert_rows();
    float* dy = scratch.get("moe.dy", {Rr, H_}).f32();
    d.combine_backward(dout, a.topk_w, dy, dtopk_w, &scratch);
    float* dxin = scratch.get("moe.dxp", {Rr, H_}).f32();
    experts_backward(d.expert_input(), d.local_counts(), Rr, w, a, dy, dxin, scratch);
    d.dispatch_backward(dxin, dx, /*accumulate=*/false, &scratch);
  } else {
    float* dy = scratch.get("moe.dy", {R, H_}).f32();
    kt.moe_permute.unpermute_backward(a.y, a.row_of_slot, a.topk_w, dout, dy, dtopk_w, T, k_, H_);
    float* dxp = scratch.get("moe.dxp", {R, H_}).f32();
    experts_backward(a.xp, a.counts.data(), R, w, a, dy, dxp, scratch);
    kt.moe_permute.permute_backward(dxp, a.row_of_slot, dx, T, k_, H_, /*accumulate=*/false);
  }
  // Router: the combine weights' gradient through the top-k renormalisation and the full
  // softmax, plus the load-balancing loss on the probabilities and the z-loss on the logits.
  const uint8_t* mask = local_mask(b);
  const kernels::MoeRouterLossOp& loss = kt.moe_router_loss;
  const size_t TE = static_cast<size_t>(T * E_) * sizeof(float);
  float* dprobs = nullptr;
  if (a.aux_counts != nullptr && a.aux_coeff_scale != 0.0) {
    dprobs = scratch.get("moe.dprobs", {T, E_}).f32();
    zero_bytes(dev, dprobs, TE);
    loss.aux_loss_backward(a.aux_counts, mask, T, E_, a.aux_coeff_scale, dprobs);
  }
  float* dz = nullptr;
  if (a.z_scale != 0.0) {
    dz = scratch.get("moe.dz", {T, E_}).f32();
    zero_bytes(dev, dz, TE);
    loss.z_loss_backward(a.probs, a.lse, mask, T, E_, a.z_scale, dz);
  }
  float* dlogits = scratch.get("moe.dlogits", {T, E_}).f32();
  kt.moe_router.backward(a.probs, a.topk_idx, a.topk_w, dtopk_w, dprobs, dz, dlogits, T, E_, k_, norm_topk_prob_);
  kt.linear.backward(a.x, w.router, dlogits, dx, w.drouter, T, E_, H_, /*accumulate_dx=*/true);
  if (router_lora_.active()) {
    const RouterDropout rd(tp_, b, T);
    parallel::lora_column_backward(*table_, router_lora_, a.x, dlogits, dx, T, H_, E_, scratch);
  }
  return dx;
}

}  // namespace twinkle
