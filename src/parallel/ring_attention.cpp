// Ring attention over the cp group (see ring_attention.h).
#include "twinkle/parallel/ring_attention.h"

#include <algorithm>
#include <cstring>

#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/attention_block.h"

namespace twinkle::parallel {

namespace kc = twinkle::kernels::cpu;

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

RingAttention::RingAttention(std::shared_ptr<dist::ProcessGroup> cp) : cp_(std::move(cp)) {
  check(cp_ != nullptr, "RingAttention: null cp group");
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
  const int cp = lay.cp, r = lay.rank;
  const int64_t T = lay.T, half = T / 2, nkv = T * Hkv * D;
  const int32_t* qs = lay.seg[static_cast<size_t>(r)].data();
  const int32_t* qp = lay.gidx[static_cast<size_t>(r)].data();
  // step 0: the diagonal block, straight into out / lse
  kc::attention_block_forward(q, qs, qp, T, k, v, qs, qp, T, out, lse, Hq, Hkv, D, scale, window);
  if (cp == 1) return;
  cur_.resize(static_cast<size_t>(2 * nkv));
  next_.resize(static_cast<size_t>(2 * nkv));
  part_out_.resize(static_cast<size_t>(T * Hq * D));
  part_lse_.resize(static_cast<size_t>(T * Hq));
  std::memcpy(cur_.data(), k, static_cast<size_t>(nkv) * sizeof(float));
  std::memcpy(cur_.data() + nkv, v, static_cast<size_t>(nkv) * sizeof(float));
  const int nxt = (r + 1) % cp, prv = (r + cp - 1) % cp;
  for (int i = 1; i < cp; ++i) {
    cp_->send_recv(cur_.data(), 2 * nkv, nxt, next_.data(), 2 * nkv, prv, DType::F32, kTagKv);
    std::swap(cur_, next_);
    const int j = (r - i + cp) % cp;  // owner of the K/V now held
    const float* kj = cur_.data();
    const float* vj = cur_.data() + nkv;
    const int32_t* ks = lay.seg[static_cast<size_t>(j)].data();
    const int32_t* kp = lay.gidx[static_cast<size_t>(j)].data();
    if (j < r) {  // all q vs the first half of j's K/V
      kc::attention_block_forward(q, qs, qp, T, kj, vj, ks, kp, half, part_out_.data(), part_lse_.data(), Hq, Hkv,
                                  D, scale, window);
      kc::attention_lse_merge(out, lse, part_out_.data(), part_lse_.data(), T, Hq, D);
    } else {  // the second half of q vs all of j's K/V
      kc::attention_block_forward(q + half * Hq * D, qs + half, qp + half, T - half, kj, vj, ks, kp, T,
                                  part_out_.data(), part_lse_.data(), Hq, Hkv, D, scale, window);
      kc::attention_lse_merge(out + half * Hq * D, lse + half * Hq, part_out_.data(), part_lse_.data(), T - half, Hq,
                              D);
    }
  }
}

void RingAttention::backward(const CpLayout& lay, const float* q, const float* k, const float* v, const float* out,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv, int64_t Hq,
                             int64_t Hkv, int64_t D, float scale, int64_t window) {
  check_layout(lay, *cp_, "RingAttention::backward");
  const int cp = lay.cp, r = lay.rank;
  const int64_t T = lay.T, half = T / 2, nkv = T * Hkv * D;
  const int32_t* qs = lay.seg[static_cast<size_t>(r)].data();
  const int32_t* qp = lay.gidx[static_cast<size_t>(r)].data();
  delta_.resize(static_cast<size_t>(T * Hq));
  kc::attention_softmax_delta(out, dout, delta_.data(), T, Hq, D);
  std::fill(dq, dq + T * Hq * D, 0.0f);
  if (cp == 1) {
    std::fill(dk, dk + nkv, 0.0f);
    std::fill(dv, dv + nkv, 0.0f);
    kc::attention_block_backward(q, qs, qp, T, k, v, qs, qp, T, lse, delta_.data(), dout, dq, dk, dv, Hq, Hkv, D,
                                 scale, window);
    return;
  }
  // travelling buffer: [k | v | dk | dv] of the block's owner
  cur_.assign(static_cast<size_t>(4 * nkv), 0.0f);
  next_.resize(static_cast<size_t>(4 * nkv));
  std::memcpy(cur_.data(), k, static_cast<size_t>(nkv) * sizeof(float));
  std::memcpy(cur_.data() + nkv, v, static_cast<size_t>(nkv) * sizeof(float));
  const int nxt = (r + 1) % cp, prv = (r + cp - 1) % cp;
  for (int i = 0; i < cp; ++i) {
    if (i > 0) {
      cp_->send_recv(cur_.data(), 4 * nkv, nxt, next_.data(), 4 * nkv, prv, DType::F32, kTagKv);
      std::swap(cur_, next_);
    }
    const int j = (r - i + cp) % cp;
    float* kj = cur_.data();
    float* vj = kj + nkv;
    float* dkj = vj + nkv;
    float* dvj = dkj + nkv;
    const int32_t* ks = lay.seg[static_cast<size_t>(j)].data();
    const int32_t* kp = lay.gidx[static_cast<size_t>(j)].data();
    if (j == r)
      kc::attention_block_backward(q, qs, qp, T, kj, vj, ks, kp, T, lse, delta_.data(), dout, dq, dkj, dvj, Hq, Hkv,
                                   D, scale, window);
    else if (j < r)
      kc::attention_block_backward(q, qs, qp, T, kj, vj, ks, kp, half, lse, delta_.data(), dout, dq, dkj, dvj, Hq,
                                   Hkv, D, scale, window);
    else
      kc::attention_block_backward(q + half * Hq * D, qs + half, qp + half, T - half, kj, vj, ks, kp, T,
                                   lse + half * Hq, delta_.data() + half * Hq, dout + half * Hq * D,
                                   dq + half * Hq * D, dkj, dvj, Hq, Hkv, D, scale, window);
  }
  // the block held now belongs to rank r+1: one last hop of its dK/dV brings every block home
  next_.resize(static_cast<size_t>(2 * nkv));
  cp_->send_recv(cur_.data() + 2 * nkv, 2 * nkv, nxt, next_.data(), 2 * nkv, prv, DType::F32, kTagDkv);
  std::memcpy(dk, next_.data(), static_cast<size_t>(nkv) * sizeof(float));
  std::memcpy(dv, next_.data() + nkv, static_cast<size_t>(nkv) * sizeof(float));
}

}  // namespace twinkle::parallel
