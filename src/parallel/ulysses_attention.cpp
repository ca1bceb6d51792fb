// Ulysses attention over the cp group (see ulysses_attention.h).
#include "twinkle/parallel/ulysses_attention.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/attention.h"

namespace twinkle::parallel {

namespace kc = twinkle::kernels::cpu;

UlyssesAttention::UlyssesAttention(std::shared_ptr<dist::ProcessGroup> cp, int tp, Device device)
    : cp_(std::move(cp)), tp_(tp), dev_(device), ws_(device) {
  check(cp_ != nullptr, "UlyssesAttention: null cp group");
  check(tp >= 1, "UlyssesAttention: tp size must be >= 1, got " + std::to_string(tp));
}

void UlyssesAttention::scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t T, int64_t w) const {
  for (int64_t t = 0; t < T;) {
    int64_t n = 1;
    while (t + n < T && idx[t + n] == idx[t] + n) ++n;
    copy_bytes(dev_, dst + static_cast<int64_t>(idx[t]) * w, src + t * w, static_cast<size_t>(n * w) * sizeof(float));
    t += n;
  }
}

void UlyssesAttention::gather_rows(float* dst, const float* src, const int32_t* idx, int64_t T, int64_t w) const {
  for (int64_t t = 0; t < T;) {
    int64_t n = 1;
    while (t + n < T && idx[t + n] == idx[t] + n) ++n;
    copy_bytes(dev_, dst + t * w, src + static_cast<int64_t>(idx[t]) * w, static_cast<size_t>(n * w) * sizeof(float));
    t += n;
  }
}

void UlyssesAttention::check_heads(int64_t Hq, int64_t Hkv, int cp, int tp) {
  const int64_t n = static_cast<int64_t>(cp) * tp;
  check(Hq % n == 0 && Hkv % n == 0,
        "cp_comm_type a2a (Ulysses) needs num_attention_heads (" + std::to_string(Hq) + ") and num_key_value_heads (" +
            std::to_string(Hkv) + ") divisible by cp*tp = " + std::to_string(cp) + "*" + std::to_string(tp) + " = " +
            std::to_string(n) + "; use cp_comm_type p2p or another cp/tp");
}

int64_t UlyssesAttention::forward_bytes(int cp, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
  // q, k, v out and the output back: each all-to-all keeps 1/cp of its data
  return (cp - 1) * T * (2 * Hq + 2 * Hkv) / cp * D * 4;
}
int64_t UlyssesAttention::backward_bytes(int cp, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
  return forward_bytes(cp, T, Hq, Hkv, D);  // dout out; dq, dk, dv back
}

void UlyssesAttention::to_heads(const CpLayout& lay, const float* x, float* g, int64_t H, int64_t D) {
  const int cp = lay.cp;
  const int64_t T = lay.T, Hl = H / cp, blk = T * Hl * D;
  float* send = buf("send", cp * blk);
  float* recv = buf("recv", cp * blk);
  // send block c = heads [c*Hl, (c+1)*Hl) of every local token
  for (int c = 0; c < cp; ++c)
    copy_rows_2d(dev_, send + c * blk, Hl * D, x + c * Hl * D, H * D, Hl * D, T);
  const std::vector<int64_t> counts(static_cast<size_t>(cp), blk);
  std::vector<int64_t> displs(static_cast<size_t>(cp));
  for (int c = 0; c < cp; ++c) displs[static_cast<size_t>(c)] = c * blk;
  cp_->all_to_all_v(send, counts, displs, recv, counts, displs, DType::F32);
  // block j = rank j's tokens (its local order) for my heads -> global order (host indices)
  for (int j = 0; j < cp; ++j) scatter_rows(g, recv + j * blk, lay.gidx[static_cast<size_t>(j)].data(), T, Hl * D);
}

void UlyssesAttention::to_seq(const CpLayout& lay, const float* g, float* x, int64_t H, int64_t D) {
  const int cp = lay.cp;
  const int64_t T = lay.T, Hl = H / cp, blk = T * Hl * D;
  float* send = buf("send", cp * blk);
  float* recv = buf("recv", cp * blk);
  for (int j = 0; j < cp; ++j) gather_rows(send + j * blk, g, lay.gidx[static_cast<size_t>(j)].data(), T, Hl * D);
  const std::vector<int64_t> counts(static_cast<size_t>(cp), blk);
  std::vector<int64_t> displs(static_cast<size_t>(cp));
  for (int c = 0; c < cp; ++c) displs[static_cast<size_t>(c)] = c * blk;
  cp_->all_to_all_v(send, counts, displs, recv, counts, displs, DType::F32);
  for (int c = 0; c < cp; ++c)
    copy_rows_2d(dev_, x + c * Hl * D, H * D, recv + c * blk, Hl * D, Hl * D, T);
}

void UlyssesAttention::forward(const CpLayout& lay, const float* q, const float* k, const float* v, float* out,
                               int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window,
                               const kernels::AttentionOp* attn) {
  check(lay.cp == cp_->size() && lay.rank == cp_->rank(),
        "UlyssesAttention::forward: layout of cp rank " + std::to_string(lay.rank) + " of " + std::to_string(lay.cp) +
            " used on rank " + std::to_string(cp_->rank()) + " of the " + std::to_string(cp_->size()) +
            "-rank cp group '" + cp_->name() + "'");
  check_heads(Hq * tp_, Hkv * tp_, lay.cp, tp_);
  saved_.valid = false;  // until this forward completes
  const int cp = lay.cp;
  const int64_t Tg = lay.T * cp, Hql = Hq / cp, Hkl = Hkv / cp;
  check(attn != nullptr || dev_ == Device::CPU, "UlyssesAttention::forward: no attention op for the device");
  gq_ = buf("gq", Tg * Hql * D);
  gk_ = buf("gk", Tg * Hkl * D);
  gv_ = buf("gv", Tg * Hkl * D);
  gout_ = buf("gout", Tg * Hql * D);
  glse_ = buf("glse", Tg * Hql);
  to_heads(lay, q, gq_, Hq, D);
  to_heads(lay, k, gk_, Hkv, D);
  to_heads(lay, v, gv_, Hkv, D);
  const int64_t nseg = static_cast<int64_t>(lay.global_cu_seqlens.size()) - 1;
  if (attn)
    attn->forward(gq_, gk_, gv_, gout_, glse_, lay.cu_seqlens_ptr(), nseg, Hql, Hkl, D, scale, window);
  else
    kc::flash_attention_forward(gq_, gk_, gv_, gout_, glse_, lay.global_cu_seqlens.data(), nseg, Hql, Hkl, D, scale,
                                window);
  to_seq(lay, gout_, out, Hq, D);
  // what the backward must match (assign reuses the capacity of the last micro-batch)
  saved_.valid = true;
  saved_.T = lay.T;
  saved_.Hq = Hq;
  saved_.Hkv = Hkv;
  saved_.D = D;
  saved_.scale = scale;
  saved_.window = window;
  saved_.attn = attn;
  saved_.cu_seqlens.assign(lay.global_cu_seqlens.begin(), lay.global_cu_seqlens.end());
  saved_.gidx.resize(lay.gidx.size());
  for (size_t j = 0; j < lay.gidx.size(); ++j) saved_.gidx[j].assign(lay.gidx[j].begin(), lay.gidx[j].end());
}

void UlyssesAttention::backward(const CpLayout& lay, const float* dout, float* dq, float* dk, float* dv, int64_t Hq,
                                int64_t Hkv, int64_t D, float scale, int64_t window,
                                const kernels::AttentionOp* attn) {
  // The saved head-sharded q/k/v/out/lse must be those of this micro-batch: same layout (segments
  // and token order, not only the sizes), heads, head_dim and scale, and not consumed by a backward
  // already. Every rank of the cp group holds the same state, so all of them throw together.
  std::string why;
  if (!saved_.valid) why = "no forward since the last backward";
  else if (saved_.T != lay.T || saved_.Hq != Hq || saved_.Hkv != Hkv || saved_.D != D)
    why = "the forward had T " + std::to_string(saved_.T) + ", heads " + std::to_string(saved_.Hq) + "/" +
          std::to_string(saved_.Hkv) + ", head_dim " + std::to_string(saved_.D) + "; the backward T " +
          std::to_string(lay.T) + ", heads " + std::to_string(Hq) + "/" + std::to_string(Hkv) + ", head_dim " +
          std::to_string(D);
  else if (saved_.cu_seqlens != lay.global_cu_seqlens || saved_.gidx != lay.gidx)
    why = "the forward's micro-batch had other segments or another token order (same sizes)";
  else if (saved_.scale != scale)
    why = "the forward's softmax scale differs";
  else if (saved_.window != window || saved_.attn != attn)
    why = "the forward's sliding window or attention op differs";
  check(why.empty(), "UlyssesAttention::backward: no matching forward on cp rank " + std::to_string(cp_->rank()) +
                         " (" + why + ")");
  saved_.valid = false;
  const int cp = lay.cp;
  const int64_t Hql = Hq / cp, Hkl = Hkv / cp;
  const int64_t Tg = lay.T * cp;
  float* gdo = buf("gdo", Tg * Hql * D);
  float* gdq = buf("gdq", Tg * Hql * D);
  float* gdk = buf("gdk", Tg * Hkl * D);
  float* gdv = buf("gdv", Tg * Hkl * D);
  to_heads(lay, dout, gdo, Hq, D);
  const int64_t nseg = static_cast<int64_t>(lay.global_cu_seqlens.size()) - 1;
  if (attn)
    attn->backward(gq_, gk_, gv_, gout_, glse_, gdo, gdq, gdk, gdv, lay.cu_seqlens_ptr(), nseg, Hql, Hkl, D, scale,
                   window);
  else
    kc::flash_attention_backward(gq_, gk_, gv_, gout_, glse_, gdo, gdq, gdk, gdv, lay.global_cu_seqlens.data(), nseg,
                                 Hql, Hkl, D, scale, window);
  to_seq(lay, gdq, dq, Hq, D);
  to_seq(lay, gdk, dk, Hkv, D);
  to_seq(lay, gdv, dv, Hkv, D);
}

}  // namespace twinkle::parallel
