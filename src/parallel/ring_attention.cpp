// Ring attention over the cp group (see ring_attention.h).
#include "twinkle/parallel/ring_attention.h"

#include <algorithm>
#include <cstring>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"

namespace twinkle::parallel {

CpCommType parse_cp_comm_type(const std::string& s) {
  if (s == "p2p") return CpCommType::P2P;
  if (s == "a2a") return CpCommType::A2A;
  throw Error("cp_comm_type '" + s + "' is not supported: choose p2p (ring attention) or a2a (Ulysses)");
}

CpLayout CpLayout::from_shard(const CpShard& sh) {
  CpLayout l;
  l.cp = sh.cp;
  l.rank = sh.rank;
  l.T = sh.tokens();
  check(l.T % 2 == 0, "CpLayout: local token count " + std::to_string(l.T) + " is odd (not a cp_split shard)");
  l.global_cu_seqlens = sh.global_cu_seqlens;
  std::vector<int32_t> gseg(static_cast<size_t>(sh.global_tokens));
  for (size_t s = 0; s + 1 < sh.global_cu_seqlens.size(); ++s)
    for (int32_t t = sh.global_cu_seqlens[s]; t < sh.global_cu_seqlens[s + 1]; ++t)
      gseg[static_cast<size_t>(t)] = static_cast<int32_t>(s);
  for (int j = 0; j < sh.cp; ++j) {
    l.gidx.push_back(cp_local_global_index(sh.global_unit_cu, sh.cp, j));
    std::vector<int32_t> s(l.gidx.back().size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = gseg[static_cast<size_t>(l.gidx.back()[i])];
    l.seg.push_back(std::move(s));
  }
  return l;
}

void CpLayout::upload(Device d) {
  device_ints_ = Tensor();
  dev_gidx.clear();
  dev_seg.clear();
  dev_cu_seqlens = nullptr;
  if (d == Device::CPU) return;
  std::vector<int32_t> h;
  for (int j = 0; j < cp; ++j) h.insert(h.end(), gidx[static_cast<size_t>(j)].begin(), gidx[static_cast<size_t>(j)].end());
  for (int j = 0; j < cp; ++j) h.insert(h.end(), seg[static_cast<size_t>(j)].begin(), seg[static_cast<size_t>(j)].end());
  h.insert(h.end(), global_cu_seqlens.begin(), global_cu_seqlens.end());
  device_ints_ = Tensor::zeros({static_cast<int64_t>(h.size())}, DType::I32, d);
  upload_bytes(d, device_ints_.raw(), h.data(), h.size() * sizeof(int32_t));
  const int32_t* p = device_ints_.data<int32_t>();
  dev_gidx.clear();
  dev_seg.clear();
  for (int j = 0; j < cp; ++j) {
    dev_gidx.push_back(p);
    p += gidx[static_cast<size_t>(j)].size();
  }
  for (int j = 0; j < cp; ++j) {
    dev_seg.push_back(p);
    p += seg[static_cast<size_t>(j)].size();
  }
  dev_cu_seqlens = p;
}

namespace {

void check_layout(const CpLayout& lay, const dist::ProcessGroup& g, const char* who) {
  check(lay.cp == g.size() && lay.rank == g.rank(),
        std::string(who) + ": layout of cp rank " + std::to_string(lay.rank) + " of " + std::to_string(lay.cp) +
            " used on rank " + std::to_string(g.rank()) + " of the " + std::to_string(g.size()) + "-rank cp group '" +
            g.name() + "'");
  check(lay.T % 2 == 0, std::string(who) + ": local token count " + std::to_string(lay.T) + " is odd");
}

constexpr int kTagKv = 7101;
constexpr int kTagDkv = 7102;

}  // namespace

RingAttention::RingAttention(std::shared_ptr<dist::ProcessGroup> cp, const kernels::KernelTable* kernels, Device device)
    : cp_(std::move(cp)), kt_(kernels ? kernels : &kernels::default_cpu_kernels()), dev_(device), ws_(device) {
  check(cp_ != nullptr, "RingAttention: null cp group");
  check(kernels != nullptr || device == Device::CPU, "RingAttention: a device ring needs its kernel table");
}

int64_t RingAttention::forward_bytes(int cp, int64_t T, int64_t Hkv, int64_t D) {
  return static_cast<int64_t>(cp - 1) * 2 * T * Hkv * D * 4;
}
int64_t RingAttention::backward_bytes(int cp, int64_t T, int64_t Hkv, int64_t D) {
  return cp == 1 ? 0 : static_cast<int64_t>(cp - 1) * 4 * T * Hkv * D * 4 + 2 * T * Hkv * D * 4;
}

void RingAttention::forward(const CpLayout& lay, const float* q, const float* k, const float* v, float* out,
                            float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_layout(lay, *cp_, "RingAttention::forward");
  const kernels::AttentionBlockOp& op = kt_->attention_block;
  const int cp = lay.cp, r = lay.rank;
  const int64_t T = lay.T, half = T / 2, nkv = T * Hkv * D;
  const int32_t* qs = lay.seg_ptr(r);
  const int32_t* qp = lay.gidx_ptr(r);
  if (cp == 1) {  // the diagonal block alone, straight into out / lse
    op.forward(q, qs, qp, T, k, v, qs, qp, T, out, lse, Hq, Hkv, D, scale, window);
    return;
  }
  float* cur = buf("cur", 2 * nkv);
  float* next = buf("next", 2 * nkv);
  float* part_out = buf("part_out", T * Hq * D);
  float* part_lse = buf("part_lse", T * Hq);
  copy_bytes(dev_, cur, k, static_cast<size_t>(nkv) * sizeof(float));
  copy_bytes(dev_, cur + nkv, v, static_cast<size_t>(nkv) * sizeof(float));
  const int nxt = (r + 1) % cp, prv = (r + cp - 1) % cp;
  // Step i computes with the K/V block of rank (r - i) mod cp while the block it holds travels on to rank
  // r + 1 and the next one arrives from rank r - 1 (ibatch_send_recv: the exchange overlaps the block's
  // attention; `cur` is only read by both, `next` only written by the exchange). Step 0 is the diagonal
  // block, straight into out / lse; the later blocks are merged in step order, as without the overlap.
  for (int i = 0; i < cp; ++i) {
    std::unique_ptr<dist::CommWork> hop;
    if (i + 1 < cp)
      hop = cp_->ibatch_send_recv({{true, cur, 2 * nkv, nxt, kTagKv}, {false, next, 2 * nkv, prv, kTagKv}}, DType::F32);
    const int j = (r - i + cp) % cp;  // owner of the K/V now held
    const float* kj = cur;
    const float* vj = cur + nkv;
    const int32_t* ks = lay.seg_ptr(j);
    const int32_t* kp = lay.gidx_ptr(j);
    if (j == r) {
      op.forward(q, qs, qp, T, kj, vj, ks, kp, T, out, lse, Hq, Hkv, D, scale, window);
    } else if (j < r) {  // all q vs the first half of j's K/V
      op.forward(q, qs, qp, T, kj, vj, ks, kp, half, part_out, part_lse, Hq, Hkv, D, scale, window);
      op.lse_merge(out, lse, part_out, part_lse, T, Hq, D);
    } else {  // the second half of q vs all of j's K/V
      op.forward(q + half * Hq * D, qs + half, qp + half, T - half, kj, vj, ks, kp, T, part_out, part_lse, Hq, Hkv, D,
                 scale, window);
      op.lse_merge(out + half * Hq * D, lse + half * Hq, part_out, part_lse, T - half, Hq, D);
    }
    if (hop) {
      hop->wait();
      std::swap(cur, next);
    }
  }
}

void RingAttention::backward(const CpLayout& lay, const float* q, const float* k, const float* v, const float* out,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv, int64_t Hq,
                             int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_layout(lay, *cp_, "RingAttention::backward");
  const kernels::AttentionBlockOp& op = kt_->attention_block;
  const int cp = lay.cp, r = lay.rank;
  const int64_t T = lay.T, half = T / 2, nkv = T * Hkv * D;
  const int32_t* qs = lay.seg_ptr(r);
  const int32_t* qp = lay.gidx_ptr(r);
  float* delta = buf("delta", T * Hq);
  op.softmax_delta(out, dout, delta, T, Hq, D);
  zero_bytes(dev_, dq, static_cast<size_t>(T * Hq * D) * sizeof(float));
  if (cp == 1) {
    zero_bytes(dev_, dk, static_cast<size_t>(nkv) * sizeof(float));
    zero_bytes(dev_, dv, static_cast<size_t>(nkv) * sizeof(float));
    op.backward(q, qs, qp, T, k, v, qs, qp, T, lse, delta, dout, dq, dk, dv, Hq, Hkv, D, scale, window);
    return;
  }
  // travelling buffer: [k | v | dk | dv] of the block's owner
  float* cur = buf("cur", 4 * nkv);
  float* next = buf("next", 4 * nkv);
  copy_bytes(dev_, cur, k, static_cast<size_t>(nkv) * sizeof(float));
  copy_bytes(dev_, cur + nkv, v, static_cast<size_t>(nkv) * sizeof(float));
  zero_bytes(dev_, cur + 2 * nkv, static_cast<size_t>(2 * nkv) * sizeof(float));
  const int nxt = (r + 1) % cp, prv = (r + cp - 1) % cp;
  // Step i: the K/V half of the block held travels on while its attention backward runs (it only reads K/V);
  // the dK/dV half goes once the block's gradients are in (the next rank adds its own to them).
  for (int i = 0; i < cp; ++i) {
    std::unique_ptr<dist::CommWork> hop;
    if (i + 1 < cp)
      hop = cp_->ibatch_send_recv({{true, cur, 2 * nkv, nxt, kTagKv}, {false, next, 2 * nkv, prv, kTagKv}}, DType::F32);
    const int j = (r - i + cp) % cp;
    float* kj = cur;
    float* vj = kj + nkv;
    float* dkj = vj + nkv;
    float* dvj = dkj + nkv;
    const int32_t* ks = lay.seg_ptr(j);
    const int32_t* kp = lay.gidx_ptr(j);
    if (j == r)
      op.backward(q, qs, qp, T, kj, vj, ks, kp, T, lse, delta, dout, dq, dkj, dvj, Hq, Hkv, D, scale, window);
    else if (j < r)
      op.backward(q, qs, qp, T, kj, vj, ks, kp, half, lse, delta, dout, dq, dkj, dvj, Hq, Hkv, D, scale, window);
    else
      op.backward(q + half * Hq * D, qs + half, qp + half, T - half, kj, vj, ks, kp, T, lse + half * Hq,
                  delta + half * Hq, dout + half * Hq * D, dq + half * Hq * D, dkj, dvj, Hq, Hkv, D, scale, window);
    if (hop) {
      cp_->send_recv(dkj, 2 * nkv, nxt, next + 2 * nkv, 2 * nkv, prv, DType::F32, kTagDkv);
      hop->wait();
      std::swap(cur, next);
    }
  }
  // the block held now belongs to rank r+1: one last hop of its dK/dV brings every block home
  cp_->send_recv(cur + 2 * nkv, 2 * nkv, nxt, next, 2 * nkv, prv, DType::F32, kTagDkv);
  copy_bytes(dev_, dk, next, static_cast<size_t>(nkv) * sizeof(float));
  copy_bytes(dev_, dv, next + nkv, static_cast<size_t>(nkv) * sizeof(float));
}

}  // namespace twinkle::parallel
