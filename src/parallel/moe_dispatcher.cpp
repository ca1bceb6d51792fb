// Megatron's alltoall token dispatcher for expert parallelism (see twinkle/parallel/moe_dispatcher.h).
#include "twinkle/parallel/moe_dispatcher.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"

namespace twinkle::parallel {

AlltoAllDispatcher::AlltoAllDispatcher(std::shared_ptr<dist::ProcessGroup> ep, int64_t num_experts, int64_t hidden,
                                       std::shared_ptr<dist::ProcessGroup> etp, const kernels::KernelTable* kernels,
                                       Device device)
    : ep_(std::move(ep)),
      etp_(std::move(etp)),
      kt_(kernels ? kernels : &kernels::default_cpu_kernels()),
      dev_(device),
      saved_(device),
      E_(num_experts),
      H_(hidden),
      own_scratch_(device) {
  if (!ep_) throw Error("AlltoAllDispatcher: no expert-parallel group");
  check(kernels != nullptr || dev_ == Device::CPU, "AlltoAllDispatcher: a device dispatcher needs its kernel table");
  ep_size_ = ep_->size();
  ep_rank_ = ep_->rank();
  if (etp_ && etp_->size() > 1) {
    etp_size_ = etp_->size();
    etp_rank_ = etp_->rank();
  }
  if (E_ < 1 || hidden < 1)
    throw Error("AlltoAllDispatcher: num_experts (" + std::to_string(E_) + ") and hidden (" + std::to_string(hidden) +
                ") must be >= 1");
  if (E_ % ep_size_ != 0)
    throw Error("expert parallelism: num_experts = " + std::to_string(E_) + " is not divisible by ep = " +
                std::to_string(ep_size_) + " (each ep rank holds num_experts / ep experts)");
  El_ = E_ / ep_size_;
  first_ = static_cast<int64_t>(ep_rank_) * El_;
  counts_.assign(static_cast<size_t>(E_), 0);
  recv_counts_.assign(static_cast<size_t>(E_), 0);
  local_counts_.assign(static_cast<size_t>(El_), 0);
  own_counts_.assign(static_cast<size_t>(El_), 0);
  etp_counts_.assign(static_cast<size_t>(El_ * etp_size_), 0);
  send_rows_.assign(static_cast<size_t>(ep_size_), 0);
  recv_rows_.assign(static_cast<size_t>(ep_size_), 0);
  sc_.assign(static_cast<size_t>(ep_size_), 0);
  sd_ = rc_ = rd_ = sc_;
}

float* AlltoAllDispatcher::scratch_rows(Workspace* ws, const char* key, int64_t n) {
  Workspace& w = scratch_of(ws);
  check(w.device() == dev_, "AlltoAllDispatcher: the workspace is not on the dispatcher's device");
  return w.get(key, {std::max<int64_t>(n, 1)}).f32();
}

float* AlltoAllDispatcher::saved_rows(const char* key, int64_t n) {
  return saved_.get(key, {std::max<int64_t>(n, 1)}).f32();
}

void AlltoAllDispatcher::copy_rows(float* dst, const float* src, int64_t rows) const {
  copy_bytes(dev_, dst, src, static_cast<size_t>(rows * H_) * sizeof(float));
}

void AlltoAllDispatcher::dispatch(const float* x, const int32_t* topk_idx, int64_t T, int64_t k, Workspace* scratch) {
  if (T < 0 || k < 1 || k > E_)
    throw Error("AlltoAllDispatcher::dispatch: need T >= 0 and 1 <= k <= num_experts (" + std::to_string(E_) +
                "), got T=" + std::to_string(T) + " k=" + std::to_string(k));
  T_ = T;
  k_ = k;
  const int64_t S = T * k;
  row_of_slot_ = reinterpret_cast<int32_t*>(saved_rows("row_of_slot", S));
  slot_of_row_ = reinterpret_cast<int32_t*>(saved_rows("slot_of_row", S));
  float* permuted = scratch_rows(scratch, "moe.a2a.send", S * H_);
  // 1. permute this rank's slots by global expert = by destination rank, then local expert
  kt_->moe_permute.sort_by_expert(topk_idx, T, k, E_, counts_.data(), row_of_slot_, slot_of_row_);  // host counts
  kt_->moe_permute.permute_forward(x, slot_of_row_, permuted, S, k, H_);
  // 2. exchange the per-expert counts: rank r gets counts_[r*El, (r+1)*El) from every source
  for (int r = 0; r < ep_size_; ++r) {
    sc_[r] = rc_[r] = El_;
    sd_[r] = rd_[r] = static_cast<int64_t>(r) * El_;
  }
  ep_->all_to_all_v(counts_.data(), sc_, sd_, recv_counts_.data(), rc_, rd_, DType::I64);
  R_own_ = 0;
  for (int64_t e = 0; e < El_; ++e) own_counts_[e] = 0;
  for (int r = 0; r < ep_size_; ++r) {
    int64_t s = 0, q = 0;
    for (int64_t e = 0; e < El_; ++e) {
      s += counts_[r * El_ + e];
      q += recv_counts_[r * El_ + e];
      own_counts_[e] += recv_counts_[r * El_ + e];
    }
    send_rows_[r] = s;
    recv_rows_[r] = q;
    R_own_ += q;
  }
  // 3. all-to-all-v of the rows, 4. [src][local expert] -> [local expert][src]
  float* recv = scratch_rows(scratch, "moe.a2a.recv", R_own_ * H_);
  exchange(permuted, recv, true);
  last_bytes_ = 0;
  for (int r = 0; r < ep_size_; ++r)
    if (r != ep_rank_) last_bytes_ += send_rows_[r] * H_ * static_cast<int64_t>(sizeof(float));
  if (etp_size_ == 1) {
    local_counts_ = own_counts_;
    R_ = R_own_;
    expert_in_ = saved_rows("expert_in", R_ * H_);
    src_to_expert_order(recv, expert_in_);
    return;
  }
  // 5. etp > 1: the etp group's rows of each local expert (counts first, then the rows)
  float* own = scratch_rows(scratch, "moe.a2a.own", R_own_ * H_);
  src_to_expert_order(recv, own);
  etp_->all_gather(own_counts_.data(), etp_counts_.data(), El_, DType::I64);
  R_ = 0;
  etp_block_ = 0;
  for (int64_t e = 0; e < El_; ++e) local_counts_[e] = 0;
  for (int r = 0; r < etp_size_; ++r) {
    int64_t rows = 0;
    for (int64_t e = 0; e < El_; ++e) {
      rows += etp_counts_[r * El_ + e];
      local_counts_[e] += etp_counts_[r * El_ + e];
    }
    R_ += rows;
    etp_block_ = std::max(etp_block_, rows);
  }
  expert_in_ = saved_rows("expert_in", R_ * H_);
  etp_gather(own, expert_in_, scratch_of(scratch));
}

void AlltoAllDispatcher::etp_gather(const float* own, float* all, Workspace& ws) {
  const int64_t block = etp_block_ * H_;
  float* buf = scratch_rows(&ws, "moe.a2a.etp", etp_size_ * block);
  float* mine = buf + etp_rank_ * block;
  copy_rows(mine, own, R_own_);
  etp_->all_gather(mine, buf, block, DType::F32);  // in place
  // [etp rank][local expert] -> [local expert][etp rank]
  int64_t o = 0;
  for (int64_t e = 0; e < El_; ++e)
    for (int r = 0; r < etp_size_; ++r) {
      int64_t i = r * etp_block_;
      for (int64_t e2 = 0; e2 < e; ++e2) i += etp_counts_[r * El_ + e2];
      const int64_t n = etp_counts_[r * El_ + e];
      copy_rows(all + o * H_, buf + i * H_, n);
      o += n;
    }
}

void AlltoAllDispatcher::etp_reduce_scatter(const float* all, float* own, Workspace& ws) {
  const int64_t block = etp_block_ * H_;
  float* buf = scratch_rows(&ws, "moe.a2a.etp", etp_size_ * block);
  // [local expert][etp rank] -> [etp rank][local expert] (padding rows keep stale values: never read)
  int64_t o = 0;
  for (int64_t e = 0; e < El_; ++e)
    for (int r = 0; r < etp_size_; ++r) {
      int64_t i = r * etp_block_;
      for (int64_t e2 = 0; e2 < e; ++e2) i += etp_counts_[r * El_ + e2];
      const int64_t n = etp_counts_[r * El_ + e];
      copy_rows(buf + i * H_, all + o * H_, n);
      o += n;
    }
  etp_->reduce_scatter(buf, buf, block);  // in place: the sum of my block first
  copy_rows(own, buf, R_own_);
}

void AlltoAllDispatcher::combine(const float* y, const float* topk_w, float* out, Workspace* scratch) {
  if (etp_size_ > 1) {  // sum the etp-partial outputs; keep this rank's own rows
    float* own = scratch_rows(scratch, "moe.a2a.own", R_own_ * H_);
    etp_reduce_scatter(y, own, scratch_of(scratch));
    y = own;
  }
  float* tmp = scratch_rows(scratch, "moe.a2a.recv", R_own_ * H_);
  y_perm_ = saved_rows("y_perm", T_ * k_ * H_);
  expert_to_src_order(y, tmp);
  exchange(tmp, y_perm_, false);
  kt_->moe_permute.unpermute_forward(y_perm_, row_of_slot_, topk_w, out, T_, k_, H_);
}

void AlltoAllDispatcher::combine_backward(const float* dout, const float* topk_w, float* dy, float* dtopk_w,
                                          Workspace* scratch) {
  float* back = scratch_rows(scratch, "moe.a2a.send", T_ * k_ * H_);
  float* tmp = scratch_rows(scratch, "moe.a2a.recv", R_own_ * H_);
  kt_->moe_permute.unpermute_backward(y_perm_, row_of_slot_, topk_w, dout, back, dtopk_w, T_, k_, H_);
  exchange(back, tmp, true);
  if (etp_size_ == 1) {
    src_to_expert_order(tmp, dy);
    return;
  }
  float* own = scratch_rows(scratch, "moe.a2a.own", R_own_ * H_);
  src_to_expert_order(tmp, own);
  etp_gather(own, dy, scratch_of(scratch));  // every etp rank's slice of the experts needs all the group's rows
}

void AlltoAllDispatcher::dispatch_backward(const float* d_expert_input, float* dx, bool accumulate, Workspace* scratch) {
  if (etp_size_ > 1) {  // d(input) of a column-parallel slice is etp-partial: sum, keep my rows
    float* own = scratch_rows(scratch, "moe.a2a.own", R_own_ * H_);
    etp_reduce_scatter(d_expert_input, own, scratch_of(scratch));
    d_expert_input = own;
  }
  float* back = scratch_rows(scratch, "moe.a2a.send", T_ * k_ * H_);
  float* tmp = scratch_rows(scratch, "moe.a2a.recv", R_own_ * H_);
  expert_to_src_order(d_expert_input, tmp);
  exchange(tmp, back, false);
  kt_->moe_permute.permute_backward(back, row_of_slot_, dx, T_, k_, H_, accumulate);
}

void AlltoAllDispatcher::dispatch_tags(const uint64_t* tag, uint64_t* out, Workspace* scratch) {
  if (etp_size_ > 1) throw Error("AlltoAllDispatcher::dispatch_tags: etp = " + std::to_string(etp_size_) + " > 1");
  if (k_ < 1) throw Error("AlltoAllDispatcher::dispatch_tags: no dispatch() before");
  const int64_t S = T_ * k_;
  // The 8-byte tags travel through the transient row buffers (two floats per tag): dispatch() is
  // done with them, and the experts' rows it keeps are in expert_in_. The host tags reach the device
  // through "moe.a2a.own" (unused outside etp > 1).
  const uint64_t* tags = tag;
  if (dev_ != Device::CPU) {
    auto* t = reinterpret_cast<uint64_t*>(scratch_rows(scratch, "moe.a2a.own", 2 * T_));
    upload_bytes(dev_, t, tag, static_cast<size_t>(T_) * sizeof(uint64_t));
    tags = t;
  }
  auto* send = reinterpret_cast<uint64_t*>(scratch_rows(scratch, "moe.a2a.send", 2 * S));
  auto* recv = reinterpret_cast<uint64_t*>(scratch_rows(scratch, "moe.a2a.recv", 2 * R_own_));
  kt_->moe_permute.permute_keys(tags, slot_of_row_, send, S, k_);  // the rows in the permuted send order
  int64_t so = 0, ro = 0;
  for (int r = 0; r < ep_size_; ++r) {
    sc_[r] = send_rows_[r];
    sd_[r] = so;
    so += sc_[r];
    rc_[r] = recv_rows_[r];
    rd_[r] = ro;
    ro += rc_[r];
  }
  ep_->all_to_all_v(send, sc_, sd_, recv, rc_, rd_, DType::I64);
  // [src][local expert] -> [local expert][src], as src_to_expert_order does for the rows
  int64_t o = 0;
  for (int64_t e = 0; e < El_; ++e)
    for (int s = 0; s < ep_size_; ++s) {
      const int64_t i = src_block_row(s, e);
      const int64_t n = recv_counts_[s * El_ + e];
      copy_bytes(dev_, out + o, recv + i, static_cast<size_t>(n) * sizeof(uint64_t));
      o += n;
    }
}

void AlltoAllDispatcher::exchange(const float* send, float* recv, bool to_experts) {
  const std::vector<int64_t>& out_rows = to_experts ? send_rows_ : recv_rows_;
  const std::vector<int64_t>& in_rows = to_experts ? recv_rows_ : send_rows_;
  int64_t so = 0, ro = 0;
  for (int r = 0; r < ep_size_; ++r) {
    sc_[r] = out_rows[r] * H_;
    sd_[r] = so;
    so += sc_[r];
    rc_[r] = in_rows[r] * H_;
    rd_[r] = ro;
    ro += rc_[r];
  }
  ep_->all_to_all_v(send, sc_, sd_, recv, rc_, rd_, DType::F32);
}

int64_t AlltoAllDispatcher::src_block_row(int s, int64_t e) const {
  int64_t i = 0;
  for (int s2 = 0; s2 < s; ++s2) i += recv_rows_[s2];
  for (int64_t e2 = 0; e2 < e; ++e2) i += recv_counts_[s * El_ + e2];
  return i;
}

void AlltoAllDispatcher::src_to_expert_order(const float* in, float* out) const {
  // in: for s, for e: recv_counts_[s][e] rows;  out: for e, for s: the same blocks
  int64_t o = 0;
  for (int64_t e = 0; e < El_; ++e)
    for (int s = 0; s < ep_size_; ++s) {
      const int64_t i = src_block_row(s, e);
      const int64_t n = recv_counts_[s * El_ + e];
      copy_rows(out + o * H_, in + i * H_, n);
      o += n;
    }
}

void AlltoAllDispatcher::expert_to_src_order(const float* in, float* out) const {
  int64_t o = 0;
  for (int64_t e = 0; e < El_; ++e)
    for (int s = 0; s < ep_size_; ++s) {
      const int64_t i = src_block_row(s, e);
      const int64_t n = recv_counts_[s * El_ + e];
      copy_rows(out + i * H_, in + o * H_, n);
      o += n;
    }
}

}  // namespace twinkle::parallel
