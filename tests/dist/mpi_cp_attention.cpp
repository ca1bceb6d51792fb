// Context-parallel attention (ring p2p and Ulysses a2a) on cp = world ranks against the cp = 1
// flash-attention kernel (kernels/cpu/attention.h, itself checked against PyTorch SDPA) on the whole
// padded global sequence: outputs, lse and dQ/dK/dV of every rank's load-balanced tokens,
// re-ordered to global positions, must agree within fp32 rounding. Cases: one odd-length row,
// packed segments (per-segment split), packed segments split per row (segment boundaries inside
// CP chunks, so local and global indices disagree across boundaries), GQA groups of 2 and 4, and
// tiles that straddle segment boundaries. Also: bytes sent per rank equal the analytic volumes, and
// Ulysses refuses heads not divisible by cp*tp with a message naming the numbers; the model-facing
// ContextParallelAttention keeps two micro-batches in flight (1F1B slots) for both algorithms.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/attention_block.h"
#include "twinkle/kernels/ops.h"
#include "twinkle/parallel/cp_attention.h"
#include "twinkle/parallel/cp_split.h"
#include "twinkle/parallel/ring_attention.h"
#include "twinkle/parallel/ulysses_attention.h"

using namespace twinkle;
using namespace twinkle::parallel;
namespace kc = twinkle::kernels::cpu;

namespace {

struct Case {
  std::string name;
  std::vector<int32_t> seg_lens;
  bool per_row;
  int64_t Hq, Hkv, D;
  int64_t window = 0;  // sliding window (0 = causal)
};

std::vector<float> randu(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// rows of `global` [Tg, H, D] at gidx -> [T, H, D]
std::vector<float> take(const std::vector<float>& global, const std::vector<int32_t>& gidx, int64_t HD) {
  std::vector<float> out(gidx.size() * static_cast<size_t>(HD));
  for (size_t i = 0; i < gidx.size(); ++i)
    std::copy_n(global.begin() + gidx[i] * HD, HD, out.begin() + static_cast<int64_t>(i) * HD);
  return out;
}

// max |a - ref| / (max |ref| over the compared rows), the compared rows being ref[gidx]
double rel_err(const std::vector<float>& a, const std::vector<float>& ref_global, const std::vector<int32_t>& gidx,
               int64_t HD) {
  double m = 0, s = 1e-30;
  for (size_t i = 0; i < gidx.size(); ++i)
    for (int64_t e = 0; e < HD; ++e) {
      const double r = ref_global[static_cast<size_t>(gidx[i] * HD + e)];
      const double x = a[i * static_cast<size_t>(HD) + static_cast<size_t>(e)];
      if (std::isinf(r) || std::isinf(x)) {
        if (r != x) m = 1e30;
        continue;
      }
      m = std::max(m, std::fabs(x - r));
      s = std::max(s, std::fabs(r));
    }
  return m / s;
}

// One micro-batch of the slot test: its shard, local inputs and the cp = 1 reference.
struct Mb {
  CpShard sh;
  CpLayout lay;
  std::vector<float> q, k, v, dout, ro, rl, rdq, rdk, rdv, lq, lk, lv, ldo;
};

Mb make_mb(const std::vector<int32_t>& lens, int cp, int r, int64_t Hq, int64_t Hkv, int64_t D, float scale,
           uint64_t seed) {
  Mb m;
  MicroBatch mb;
  mb.batch = 1;
  mb.cu_seqlens = {0};
  for (int32_t L : lens) {
    for (int32_t t = 0; t < L; ++t) {
      mb.input_ids.push_back(1);
      mb.labels.push_back(1);
      mb.position_ids.push_back(t);
    }
    mb.cu_seqlens.push_back(static_cast<int32_t>(mb.input_ids.size()));
  }
  mb.seq = static_cast<int64_t>(mb.input_ids.size());
  m.sh = cp_split_micro_batch(mb, cp, r);
  m.lay = CpLayout::from_shard(m.sh);
  const int64_t Tg = m.sh.global_tokens;
  m.q = randu(static_cast<size_t>(Tg * Hq * D), seed);
  m.k = randu(static_cast<size_t>(Tg * Hkv * D), seed + 1);
  m.v = randu(static_cast<size_t>(Tg * Hkv * D), seed + 2);
  m.dout = randu(static_cast<size_t>(Tg * Hq * D), seed + 3);
  m.ro.resize(m.q.size());
  m.rl.resize(static_cast<size_t>(Tg * Hq));
  m.rdq.resize(m.q.size());
  m.rdk.resize(m.k.size());
  m.rdv.resize(m.v.size());
  const int64_t nseg = static_cast<int64_t>(m.sh.global_cu_seqlens.size()) - 1;
  kc::flash_attention_forward(m.q.data(), m.k.data(), m.v.data(), m.ro.data(), m.rl.data(),
                              m.sh.global_cu_seqlens.data(), nseg, Hq, Hkv, D, scale);
  kc::flash_attention_backward(m.q.data(), m.k.data(), m.v.data(), m.ro.data(), m.rl.data(), m.dout.data(),
                               m.rdq.data(), m.rdk.data(), m.rdv.data(), m.sh.global_cu_seqlens.data(), nseg, Hq, Hkv,
                               D, scale);
  const auto& gi = m.sh.global_index;
  m.lq = take(m.q, gi, Hq * D);
  m.lk = take(m.k, gi, Hkv * D);
  m.lv = take(m.v, gi, Hkv * D);
  m.ldo = take(m.dout, gi, Hq * D);
  return m;
}

// A registry `attention` op that counts its calls and runs the CPU flash kernel (kernels/ops.h).
int g_op_fwd = 0, g_op_bwd = 0;
void counting_fwd(const float* q, const float* k, const float* v, float* out, float* lse, const int32_t* cu,
                  int64_t n, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  ++g_op_fwd;
  kc::flash_attention_forward(q, k, v, out, lse, cu, n, Hq, Hkv, D, scale, window);
}
void counting_bwd(const float* q, const float* k, const float* v, const float* out, const float* lse,
                  const float* dout, float* dq, float* dk, float* dv, const int32_t* cu, int64_t n, int64_t Hq,
                  int64_t Hkv, int64_t D, float scale, int64_t window) {
  ++g_op_bwd;
  kc::flash_attention_backward(q, k, v, out, lse, dout, dq, dk, dv, cu, n, Hq, Hkv, D, scale, window);
}

// Ulysses runs the attention op it is given (the model passes its KernelTable's), with the window.
void run_registry_op(std::shared_ptr<dist::ProcessGroup> cpg) {
  const int cp = cpg->size(), r = cpg->rank();
  const int64_t Hq = 8, Hkv = 4, D = 16;
  const float scale = 0.25f;
  if (Hq % cp || Hkv % cp) return;
  Mb m = make_mb({150, 77, 200}, cp, r, Hq, Hkv, D, scale, 51);
  const kernels::AttentionOp op{counting_fwd, counting_bwd};
  ContextParallelAttention att(cpg, CpCommType::A2A, Hq, Hkv, 1);
  std::vector<float> o(m.lq.size()), dq(m.lq.size()), dk(m.lk.size()), dv(m.lv.size());
  att.forward(&m, m.lay, m.lq.data(), m.lk.data(), m.lv.data(), o.data(), nullptr, Hq, Hkv, D, scale, 0, &op);
  att.backward(&m, m.lay, m.lq.data(), m.lk.data(), m.lv.data(), o.data(), nullptr, m.ldo.data(), dq.data(), dk.data(),
               dv.data(), Hq, Hkv, D, scale, 0, &op);
  MPI_CHECK(g_op_fwd == 1 && g_op_bwd == 1, "a2a with a registry op: forward/backward calls " << g_op_fwd << "/" << g_op_bwd);
  const auto& gi = m.sh.global_index;
  const double e = std::max({rel_err(o, m.ro, gi, Hq * D), rel_err(dq, m.rdq, gi, Hq * D),
                             rel_err(dk, m.rdk, gi, Hkv * D), rel_err(dv, m.rdv, gi, Hkv * D)});
  MPI_CHECK(e < 4e-6, "a2a with a registry op vs cp1 kernel: max rel err " << e);
}

// ContextParallelAttention with two micro-batches in flight (1F1B order: F0 F1 B0 B1), both algorithms.
void run_slots(std::shared_ptr<dist::ProcessGroup> cpg) {
  const int cp = cpg->size(), r = cpg->rank();
  const int64_t Hq = 8, Hkv = 4, D = 16;
  const float scale = 0.25f;
  Mb a = make_mb({150, 77, 200}, cp, r, Hq, Hkv, D, scale, 11), b = make_mb({37}, cp, r, Hq, Hkv, D, scale, 21);
  for (CpCommType type : {CpCommType::P2P, CpCommType::A2A}) {
    if (type == CpCommType::A2A && (Hq % cp || Hkv % cp)) continue;
    ContextParallelAttention att(cpg, type, Hq, Hkv, 1);
    Mb* mbs[2] = {&a, &b};
    std::vector<float> o[2], l[2], dq[2], dk[2], dv[2];
    for (int s = 0; s < 2; ++s) {
      Mb& m = *mbs[s];
      o[s].resize(m.lq.size());
      l[s].resize(static_cast<size_t>(m.lay.T * Hq));
      att.forward(mbs[s], m.lay, m.lq.data(), m.lk.data(), m.lv.data(), o[s].data(), l[s].data(), Hq, Hkv, D, scale);
    }
    for (int s = 0; s < 2; ++s) {
      Mb& m = *mbs[s];
      dq[s].resize(m.lq.size());
      dk[s].resize(m.lk.size());
      dv[s].resize(m.lv.size());
      att.backward(mbs[s], m.lay, m.lq.data(), m.lk.data(), m.lv.data(), o[s].data(), l[s].data(), m.ldo.data(),
                   dq[s].data(), dk[s].data(), dv[s].data(), Hq, Hkv, D, scale);
      const auto& gi = m.sh.global_index;
      const double e = std::max({rel_err(o[s], m.ro, gi, Hq * D), rel_err(dq[s], m.rdq, gi, Hq * D),
                                 rel_err(dk[s], m.rdk, gi, Hkv * D), rel_err(dv[s], m.rdv, gi, Hkv * D)});
      MPI_CHECK(e < 4e-6, "[slots cp" << cp << " rank " << r << " " << (type == CpCommType::P2P ? "p2p" : "a2a")
                                      << " slot " << s << "] max rel err " << e);
    }
  }
}

void run_case(const Case& c, dist::ProcessGroup& cpg) {
  const int cp = cpg.size(), r = cpg.rank();
  // micro-batch of packed segments (ids/labels are irrelevant to attention)
  MicroBatch mb;
  mb.batch = 1;
  mb.cu_seqlens = {0};
  for (int32_t L : c.seg_lens) {
    for (int32_t t = 0; t < L; ++t) {
      mb.input_ids.push_back(1);
      mb.labels.push_back(1);
      mb.position_ids.push_back(t);
    }
    mb.cu_seqlens.push_back(static_cast<int32_t>(mb.input_ids.size()));
  }
  mb.seq = static_cast<int64_t>(mb.input_ids.size());
  const CpShard sh = cp_split_micro_batch(mb, cp, r, 1, false, c.per_row);
  const CpLayout lay = CpLayout::from_shard(sh);
  const int64_t Tg = sh.global_tokens, T = sh.tokens(), Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const std::string tag = "[" + c.name + " cp" + std::to_string(cp) + " rank " + std::to_string(r) + "] ";

  // global inputs (same seed on every rank) and the cp = 1 reference
  const auto q = randu(static_cast<size_t>(Tg * Hq * D), 1), k = randu(static_cast<size_t>(Tg * Hkv * D), 2),
             v = randu(static_cast<size_t>(Tg * Hkv * D), 3), dout = randu(static_cast<size_t>(Tg * Hq * D), 4);
  std::vector<float> ro(q.size()), rl(static_cast<size_t>(Tg * Hq)), rdq(q.size()), rdk(k.size()), rdv(v.size());
  const int64_t nseg = static_cast<int64_t>(sh.global_cu_seqlens.size()) - 1;
  const int64_t W = c.window;
  kc::flash_attention_forward(q.data(), k.data(), v.data(), ro.data(), rl.data(), sh.global_cu_seqlens.data(), nseg,
                              Hq, Hkv, D, scale, W);
  kc::flash_attention_backward(q.data(), k.data(), v.data(), ro.data(), rl.data(), dout.data(), rdq.data(),
                               rdk.data(), rdv.data(), sh.global_cu_seqlens.data(), nseg, Hq, Hkv, D, scale, W);

  const auto& gi = sh.global_index;
  const auto lq = take(q, gi, Hq * D), lk = take(k, gi, Hkv * D), lv = take(v, gi, Hkv * D),
             ldo = take(dout, gi, Hq * D);
  constexpr double kTol = 4e-6;  // fp32 rounding of sums over at most a few hundred terms (seen: <= 1e-6)

  // ring
  {
    RingAttention ring(std::shared_ptr<dist::ProcessGroup>(&cpg, [](dist::ProcessGroup*) {}));
    std::vector<float> o(lq.size()), l(static_cast<size_t>(T * Hq)), dq(lq.size()), dk(lk.size()), dv(lv.size());
    cpg.reset_bytes_sent();
    ring.forward(lay, lq.data(), lk.data(), lv.data(), o.data(), l.data(), Hq, Hkv, D, scale, W);
    const int64_t fb = cpg.bytes_sent();
    ring.backward(lay, lq.data(), lk.data(), lv.data(), o.data(), l.data(), ldo.data(), dq.data(), dk.data(),
                  dv.data(), Hq, Hkv, D, scale, W);
    const int64_t bb = cpg.bytes_sent() - fb;
    const double eo = rel_err(o, ro, gi, Hq * D), el = rel_err(l, rl, gi, Hq), edq = rel_err(dq, rdq, gi, Hq * D),
                 edk = rel_err(dk, rdk, gi, Hkv * D), edv = rel_err(dv, rdv, gi, Hkv * D);
    MPI_CHECK(eo < kTol && el < kTol && edq < kTol && edk < kTol && edv < kTol,
              tag << "ring vs cp1 kernel: out " << eo << " lse " << el << " dq " << edq << " dk " << edk << " dv "
                  << edv);
    MPI_CHECK(fb == RingAttention::forward_bytes(cp, T, Hkv, D),
              tag << "ring forward bytes " << fb << " want " << RingAttention::forward_bytes(cp, T, Hkv, D));
    MPI_CHECK(bb == RingAttention::backward_bytes(cp, T, Hkv, D),
              tag << "ring backward bytes " << bb << " want " << RingAttention::backward_bytes(cp, T, Hkv, D));
    // closed form, independent of the class: forward (cp-1) K/V blocks, backward (cp-1) K/V/dK/dV + one dK/dV
    const int64_t kv = 2 * T * Hkv * D * 4;
    MPI_CHECK(fb == (cp - 1) * kv && bb == (cp > 1 ? (cp - 1) * 2 * kv + kv : 0), tag << "ring bytes closed form");
    // negative control: the diagonal block with LOCAL indices as positions (what a CP implementation
    // that forgot the load-balanced order would compute) must differ from the global answer on
    // every rank when cp > 1 — so the equality above really tests the global causal rule.
    if (cp > 1 && W == 0) {
      std::vector<int32_t> local(static_cast<size_t>(T));
      for (int64_t i = 0; i < T; ++i) local[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      std::vector<float> wo(o.size()), wl(l.size());
      kc::attention_block_forward(lq.data(), sh.segment.data(), local.data(), T, lk.data(), lv.data(),
                                  sh.segment.data(), local.data(), T, wo.data(), wl.data(), Hq, Hkv, D, scale);
      MPI_CHECK(rel_err(wo, ro, gi, Hq * D) > 1e-2, tag << "local-index control unexpectedly matches");
    }
    if (W > 0) {  // control: the same ring without the window must differ (so the window is applied)
      std::vector<float> wo(o.size()), wl(l.size());
      ring.forward(lay, lq.data(), lk.data(), lv.data(), wo.data(), wl.data(), Hq, Hkv, D, scale, 0);
      MPI_CHECK(rel_err(wo, ro, gi, Hq * D) > 1e-3, tag << "the ring without the window matches the windowed reference");
    }
    if (r == 0)
      std::cout << tag << "ring max rel err out " << eo << " lse " << el << " dq " << edq << " dk " << edk << " dv "
                << edv << " bytes fwd " << fb << " bwd " << bb << std::endl;
  }
  // Ulysses (when the heads divide)
  if (Hq % cp == 0 && Hkv % cp == 0) {
    UlyssesAttention uly(std::shared_ptr<dist::ProcessGroup>(&cpg, [](dist::ProcessGroup*) {}));
    std::vector<float> o(lq.size()), dq(lq.size()), dk(lk.size()), dv(lv.size());
    cpg.reset_bytes_sent();
    uly.forward(lay, lq.data(), lk.data(), lv.data(), o.data(), Hq, Hkv, D, scale, W);
    const int64_t fb = cpg.bytes_sent();
    uly.backward(lay, ldo.data(), dq.data(), dk.data(), dv.data(), Hq, Hkv, D, scale, W);
    const int64_t bb = cpg.bytes_sent() - fb;
    const double eo = rel_err(o, ro, gi, Hq * D), edq = rel_err(dq, rdq, gi, Hq * D),
                 edk = rel_err(dk, rdk, gi, Hkv * D), edv = rel_err(dv, rdv, gi, Hkv * D);
    MPI_CHECK(eo < kTol && edq < kTol && edk < kTol && edv < kTol,
              tag << "a2a vs cp1 kernel: out " << eo << " dq " << edq << " dk " << edk << " dv " << edv);
    // closed form: each of q, k, v, out (and dout, dq, dk, dv) keeps 1/cp of itself
    const int64_t want = (T * (2 * Hq + 2 * Hkv) * D * 4) / cp * (cp - 1);
    MPI_CHECK(fb == want && bb == want && fb == UlyssesAttention::forward_bytes(cp, T, Hq, Hkv, D),
              tag << "a2a bytes fwd " << fb << " bwd " << bb << " want " << want);
    if (r == 0)
      std::cout << tag << "a2a max rel err out " << eo << " dq " << edq << " dk " << edk << " dv " << edv
                << " bytes fwd " << fb << " bwd " << bb << std::endl;
  }
}

int body(int, char**) {
  const int world = world_size();
  MeshSizes s;
  s.cp = world;
  InitOptions o;
  o.global_device_mesh = DeviceMesh::from_sizes(s);
  initialize(o);
  auto& st = parallel_state();
  dist::ProcessGroup& cpg = *st.cp;
  const std::vector<Case> cases = {
      {"odd row 37", {37}, false, 8, 4, 16},
      {"packed 5,13,1,20", {5, 13, 1, 20}, false, 8, 4, 16},
      {"packed 5,13,1,20 per row", {5, 13, 1, 20}, true, 8, 4, 16},
      {"packed 150,77,200 gqa4", {150, 77, 200}, false, 8, 2, 32},
      {"packed 150,77,200 per row gqa4", {150, 77, 200}, true, 8, 2, 32},
      {"rows 97,64 mha", {97, 64}, false, 4, 4, 8},
      // sliding windows (Qwen3 use_sliding_window): smaller than a chunk, spanning several chunks and
      // ranks, of 2 (the diagonal and one more); the cp = 1 reference is the flash kernel with that window
      {"window 5 packed 150,77,200", {150, 77, 200}, false, 8, 4, 16, 5},
      {"window 40 packed per row 150,77,200 gqa4", {150, 77, 200}, true, 8, 2, 32, 40},
      {"window 70 odd row 137", {137}, false, 8, 4, 16, 70},
      {"window 2 rows 97,64", {97, 64}, false, 4, 4, 8, 2},
  };
  for (const Case& c : cases) run_case(c, cpg);
  run_slots(st.cp);
  run_registry_op(st.cp);

  // Ulysses stale slot: a backward must match its forward's layout in full, not only in size. The
  // packed rows {5,13,1,20} and {20,1,13,5} pad to the same token count (same T on every rank, same
  // buffer sizes) but have other segments; a second backward of one forward has nothing to use.
  {
    const int64_t Hq = 8, Hkv = 4, D = 16;
    const float scale = 0.25f;
    Mb a = make_mb({5, 13, 1, 20}, world, cpg.rank(), Hq, Hkv, D, scale, 31),
       b = make_mb({20, 1, 13, 5}, world, cpg.rank(), Hq, Hkv, D, scale, 41);
    MPI_CHECK(a.lay.T == b.lay.T && a.lay.global_cu_seqlens != b.lay.global_cu_seqlens,
              "stale-slot case: the two micro-batches must have the same size and other segments");
    if (Hq % world == 0 && Hkv % world == 0) {
      UlyssesAttention uly(std::shared_ptr<dist::ProcessGroup>(&cpg, [](dist::ProcessGroup*) {}));
      std::vector<float> o(a.lq.size()), dq(a.lq.size()), dk(a.lk.size()), dv(a.lv.size());
      auto backward_error = [&](const Mb& m, float sc) {
        try {
          uly.backward(m.lay, m.ldo.data(), dq.data(), dk.data(), dv.data(), Hq, Hkv, D, sc);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      };
      uly.forward(a.lay, a.lq.data(), a.lk.data(), a.lv.data(), o.data(), Hq, Hkv, D, scale);
      const std::string other = backward_error(b, scale);
      MPI_CHECK(other.find("no matching forward") != std::string::npos &&
                    other.find("other segments") != std::string::npos,
                "a2a backward of another micro-batch of the same size must throw, got '" << other << "'");
      const std::string sc = backward_error(a, 0.5f);
      MPI_CHECK(sc.find("softmax scale") != std::string::npos, "a2a backward with another scale: '" << sc << "'");
      const std::string ok = backward_error(a, scale);
      MPI_CHECK(ok.empty(), "a2a backward of its own forward threw '" << ok << "'");
      MPI_CHECK(rel_err(dq, a.rdq, a.sh.global_index, Hq * D) < 4e-6, "a2a backward after refused ones: dq differs");
      const std::string twice = backward_error(a, scale);
      MPI_CHECK(twice.find("no forward since the last backward") != std::string::npos,
                "a second a2a backward of one forward must throw, got '" << twice << "'");
    }
  }

  // Ulysses head check: clear error before any communication
  if (world > 1) {
    bool threw = false;
    try {
      UlyssesAttention::check_heads(8, 2, 4, 1);
    } catch (const Error& e) {
      threw = std::string(e.what()) ==
              "cp_comm_type a2a (Ulysses) needs num_attention_heads (8) and num_key_value_heads (2) divisible by "
              "cp*tp = 4*1 = 4; use cp_comm_type p2p or another cp/tp";
      if (!threw) std::cerr << e.what() << "\n";
    }
    MPI_CHECK(threw, "check_heads(8, 2, cp 4, tp 1) must throw the documented message");
    threw = false;
    try {
      UlyssesAttention uly(std::shared_ptr<dist::ProcessGroup>(&cpg, [](dist::ProcessGroup*) {}), 2);
      MicroBatch mb;
      mb.batch = 1;
      mb.seq = 8;
      mb.input_ids.assign(8, 1);
      mb.labels.assign(8, 1);
      for (int t = 0; t < 8; ++t) mb.position_ids.push_back(t);
      mb.cu_seqlens = {0, 8};
      const CpLayout lay = CpLayout::from_shard(cp_split_micro_batch(mb, world, cpg.rank()));
      std::vector<float> x(static_cast<size_t>(lay.T * 3 * 4));
      uly.forward(lay, x.data(), x.data(), x.data(), x.data(), 3, 3, 4, 0.5f);  // 3 heads per tp rank
    } catch (const Error& e) {
      threw = std::string(e.what()).find("num_attention_heads (6) and num_key_value_heads (6) divisible by cp*tp = " +
                                         std::to_string(world) + "*2") != std::string::npos;
      if (!threw) std::cerr << e.what() << "\n";
    }
    MPI_CHECK(threw, "UlyssesAttention::forward with 3 heads per tp rank must throw");
    bool bad_type = false;
    try {
      parse_cp_comm_type("allgather");
    } catch (const Error& e) {
      bad_type = std::string(e.what()).find("cp_comm_type 'allgather' is not supported") != std::string::npos;
    }
    MPI_CHECK(bad_type && parse_cp_comm_type("a2a") == CpCommType::A2A, "parse_cp_comm_type");
    // the model-facing entry refuses a2a heads at construction
    bool ctor_threw = false;
    try {
      ContextParallelAttention att(st.cp, CpCommType::A2A, 12, 2, 2);
    } catch (const Error& e) {
      ctor_threw = std::string(e.what()).find("num_attention_heads (12) and num_key_value_heads (2) divisible by cp*tp") !=
                   std::string::npos;
    }
    MPI_CHECK(ctor_threw, "ContextParallelAttention a2a with 12/2 heads at tp 2 must throw");
  }

  int fails = twinkle_test::failures();
  st.world->all_reduce(&fails, 1, DType::I32);
  if (world_rank() == 0)
    std::cout << (fails == 0 ? "mpi_cp_attention OK" : "mpi_cp_attention FAILED") << " on " << world << " ranks"
              << std::endl;
  return fails == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
