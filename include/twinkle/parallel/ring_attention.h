// twinkle/parallel/ring_attention.h — context-parallel attention, ring algorithm
// (`cp_comm_type = "p2p"`), on load-balanced shards (parallel/cp_split.h); also the CP layout both
// algorithms use (Ulysses, `cp_comm_type = "a2a"`: parallel/ulysses_attention.h).
//
// Every rank holds T local tokens of the micro-batch in the cp_split order (first half: chunk r of
// every split unit, second half: chunk 2cp-1-r), q [T, Hq, D], k and v [T, Hkv, D] (token-major,
// this rank's tensor-parallel heads), and computes the attention of its queries against ALL keys of
// their segment that are not in the future — exactly flash_attention_forward on the padded global
// axis (kernels/cpu/attention.h) restricted to this rank's rows.
//
// Ring (Megatron-core / TransformerEngine context_parallel.py AttnFuncWithCPAndKVP2P; MindSpeed
// megatron_cp_algo; Liu et al. 2023 "Ring Attention"): K/V blocks travel around the cp ring
// (send to rank r+1, receive from r-1; cp-1 steps); at step i this rank holds the K/V of rank
// j = r-i mod cp and computes (the kernel table's attention_block op, kernels/ops.h):
//   j == r : all local q vs all local k, causal by global index (the diagonal),
//   j <  r : all local q vs the first half of j's K/V (chunk j: entirely in the past, no mask),
//   j >  r : the second half of the local q (chunk 2cp-1-r) vs all of j's K/V (entirely past),
// and skips the rest (entirely in the future) — every rank does the same work (the kernel table's
// attention_block op, on the model's device; the K/V blocks travel through the cp group, which moves
// device buffers on device cuda). Partial results are
// merged with the log-sum-exp rule. Backward: K/V travel again together with the dK/dV accumulated
// for them; after cp steps a last hop returns each block's dK/dV to its owner.
// Overlap (TransformerEngine's: the next K/V block is in flight while the current one is computed): each
// step's K/V hop is started before the step's block attention (ProcessGroup::ibatch_send_recv: MPI
// Isend / Irecv; on cuda with NCCL the group's own stream, ordered by events, while the block kernels run
// on the compute stream) and waited for after it; in the backward only the K/V half overlaps, the dK/dV
// half is sent once the block's gradients are in. The results are those of the unoverlapped order.
// Bytes sent per rank (f32, Bkv = T*Hkv*D*4): forward (cp-1)*2*Bkv; backward (cp-1)*4*Bkv + 2*Bkv
// (none when cp = 1). The backward's 2*Bkv above TransformerEngine's (cp-1)*4*Bkv: TE's backward runs the
// ring reversed from the block its forward ended with (saved in place of the local K/V), so each block's
// dK/dV lands on its owner after cp-1 hops; this one starts from the rank's own K/V and needs a last hop
// home (tests/reference/check_comm_volume.py names the term, bench/README.md "Communication volume").
//
// Segments (packed sequences, cu_seqlens) never attend to each other. GQA: query head h uses kv
// head h / (Hq/Hkv). Sliding window (window > 0, a Qwen3 layer with use_sliding_window): a query
// sees only the `window` keys of its segment up to itself (flash_attention_forward's rule), applied
// by the block kernel on the global indices; the ring schedule is unchanged (blocks that fall out
// of every window cost a skipped tile scan, not a kernel call's worth of work).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "twinkle/core/tensor.h"
#include "twinkle/core/workspace.h"
#include "twinkle/dist/process_group.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/parallel/cp_split.h"

namespace twinkle::parallel {

/// Which context-parallel attention algorithm (Megatron's cp_comm_type spelling).
enum class CpCommType { P2P, A2A };
/// "p2p" -> P2P, "a2a" -> A2A; anything else: twinkle::Error naming the value and the choices.
CpCommType parse_cp_comm_type(const std::string& s);

/// The global layout both algorithms need: for every cp rank, the global index and segment of each
/// of its local tokens (computed from CpShard::global_unit_cu / global_cu_seqlens, no communication).
struct CpLayout {
  int cp = 1;
  int rank = 0;
  int64_t T = 0;                              ///< local tokens (same on every rank)
  std::vector<int32_t> global_cu_seqlens;     ///< padded segments on the global axis
  std::vector<std::vector<int32_t>> gidx;     ///< [cp][T] global index of rank j's local tokens
  std::vector<std::vector<int32_t>> seg;      ///< [cp][T] segment of rank j's local tokens
  /// Builds the layout of `sh` (the shard of this rank). Throws twinkle::Error if T is odd.
  static CpLayout from_shard(const CpShard& sh);

  /// Copies of gidx, seg and global_cu_seqlens on device `d` (nothing for the host), which the
  /// pointers below then return: the kernels read them there (Qwen3Model::prepare, device cuda).
  void upload(Device d);
  const int32_t* gidx_ptr(int j) const {
    return dev_gidx.empty() ? gidx[static_cast<size_t>(j)].data() : dev_gidx[static_cast<size_t>(j)];
  }
  const int32_t* seg_ptr(int j) const {
    return dev_seg.empty() ? seg[static_cast<size_t>(j)].data() : dev_seg[static_cast<size_t>(j)];
  }
  const int32_t* cu_seqlens_ptr() const { return dev_cu_seqlens ? dev_cu_seqlens : global_cu_seqlens.data(); }

 private:
  Tensor device_ints_;
  std::vector<const int32_t*> dev_gidx, dev_seg;
  const int32_t* dev_cu_seqlens = nullptr;
};

/// Ring attention (p2p). One object per attention call site; buffers are reused across calls.
class RingAttention {
 public:
  /// `cp` is the context-parallel group (size 1: a single diagonal block, no communication);
  /// `kernels` the table whose attention_block op computes the blocks (nullptr: the CPU "fused"
  /// table), `device` where its buffers live (the model's; the layout must be uploaded there).
  explicit RingAttention(std::shared_ptr<dist::ProcessGroup> cp, const kernels::KernelTable* kernels = nullptr,
                         Device device = Device::CPU);
  /// out [T, Hq, D] and lse [T, Hq] (natural log) of this rank's queries; window 0 = causal, > 0 =
  /// sliding window. Throws twinkle::Error when the layout's cp/rank differ from the group's,
  /// Hq % Hkv != 0 or window < 0.
  void forward(const CpLayout& lay, const float* q, const float* k, const float* v, float* out, float* lse,
               int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window = 0);
  /// Given the forward's inputs, out, lse and dout [T, Hq, D]: writes dq [T, Hq, D], dk and dv
  /// [T, Hkv, D] (overwritten) of this rank's tokens.
  void backward(const CpLayout& lay, const float* q, const float* k, const float* v, const float* out,
                const float* lse, const float* dout, float* dq, float* dk, float* dv, int64_t Hq, int64_t Hkv,
                int64_t D, float scale, int64_t window = 0);
  /// Analytic bytes one rank sends in forward / backward (see the file comment).
  static int64_t forward_bytes(int cp, int64_t T, int64_t Hkv, int64_t D);
  static int64_t backward_bytes(int cp, int64_t T, int64_t Hkv, int64_t D);

 private:
  float* buf(const char* key, int64_t n) { return ws_.get(key, {n > 0 ? n : 1}).f32(); }
  std::shared_ptr<dist::ProcessGroup> cp_;
  const kernels::KernelTable* kt_;
  Device dev_;
  Workspace ws_;  // "cur", "next" (the travelling K/V blocks), "part_out", "part_lse", "delta"
};

}  // namespace twinkle::parallel
