// twinkle/parallel/ulysses_attention.h — context-parallel attention, Ulysses algorithm
// (`cp_comm_type = "a2a"`), on load-balanced shards (parallel/cp_split.h, CpLayout in
// parallel/ring_attention.h). Every rank holds q [T, Hq, D], k and v [T, Hkv, D] of its T local
// tokens (this rank's tensor-parallel heads) and gets the attention output of those tokens, equal to
// flash_attention_forward on the padded global axis restricted to its rows.
//
// Ulysses (DeepSpeed-Ulysses, Jacobs et al. 2023; MindSpeed ulysses_cp_algo): an all-to-all turns the
// sequence-sharded q/k/v [T, H, D] into head-sharded [cp*T, H/cp, D] (rank c gets heads
// [c*H/cp, (c+1)*H/cp) of every token, re-ordered to global positions), the cp=1 flash kernel runs on
// the whole padded sequence, and a second all-to-all returns the output; the backward mirrors it.
// Needs the local q heads and kv heads divisible by cp (global heads by cp*tp).
// Bytes sent per rank (Bq = T*Hq*D*4, Bkv = T*Hkv*D*4): forward (cp-1)/cp * (2*Bq + 2*Bkv); backward the same.
//
// Segments never attend to each other (the flash kernel runs on the global cu_seqlens); GQA as
// HF repeat_kv (rank c's q heads [c*Hq/cp, ...) use its kv heads [c*Hkv/cp, ...), the same groups).
// The attention itself is the kernel registry's `attention` op the caller passes (the model's
// KernelTable: the fused or reference CPU flash kernel, or a kernelized one), with its sliding window.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "twinkle/dist/process_group.h"
#include "twinkle/kernels/ops.h"
#include "twinkle/parallel/ring_attention.h"

namespace twinkle::parallel {

/// Ulysses attention (a2a). Keeps the head-sharded q/k/v/out/lse of the last forward for the
/// backward (one micro-batch in flight per object).
class UlyssesAttention {
 public:
  /// `tp` is the tensor-parallel size, used in error messages only (heads here are per tp rank);
  /// `device` where the head-sharded buffers live (the model's: on an accelerator `attn` must be the
  /// device's attention op and the layout uploaded there, CpLayout::upload).
  UlyssesAttention(std::shared_ptr<dist::ProcessGroup> cp, int tp = 1, Device device = Device::CPU);
  /// Throws twinkle::Error when Hq or Hkv (per tp rank) is not divisible by cp, naming the global
  /// head counts, cp and tp. `attn`: the attention op that runs on the head-sharded global sequence
  /// (nullptr = the CPU flash kernel, kernels/cpu/attention.h); window as its window argument.
  void forward(const CpLayout& lay, const float* q, const float* k, const float* v, float* out, int64_t Hq,
               int64_t Hkv, int64_t D, float scale, int64_t window = 0, const kernels::AttentionOp* attn = nullptr);
  /// Backward of the last forward: dq [T, Hq, D], dk and dv [T, Hkv, D] (overwritten). Throws
  /// twinkle::Error (before any communication, on every rank of the group alike) unless the last
  /// forward had the same layout (segments and token order, compared in full, not only the sizes),
  /// heads, head_dim, scale, window and attention op, and no backward consumed it yet: a stale slot (a backward for
  /// another micro-batch of the same size) would otherwise silently use the wrong activations.
  void backward(const CpLayout& lay, const float* dout, float* dq, float* dk, float* dv, int64_t Hq, int64_t Hkv,
                int64_t D, float scale, int64_t window = 0, const kernels::AttentionOp* attn = nullptr);
  static int64_t forward_bytes(int cp, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
  static int64_t backward_bytes(int cp, int64_t T, int64_t Hq, int64_t Hkv, int64_t D);
  /// Throws the divisibility error (also called by forward): for option validation before training.
  static void check_heads(int64_t Hq_global, int64_t Hkv_global, int cp, int tp);

 private:
  // seq-sharded x [T, H, D] -> head-sharded g [cp*T, H/cp, D] in global order
  void to_heads(const CpLayout& lay, const float* x, float* g, int64_t H, int64_t D);
  // inverse
  void to_seq(const CpLayout& lay, const float* g, float* x, int64_t H, int64_t D);
  // rows [t, t + n) of token-major [T, w] `src` to rows of `dst` at the given row indices (dst row idx[t]),
  // runs of consecutive indices as one copy; and the inverse gather.
  void scatter_rows(float* dst, const float* src, const int32_t* idx, int64_t T, int64_t w) const;
  void gather_rows(float* dst, const float* src, const int32_t* idx, int64_t T, int64_t w) const;
  float* buf(const char* key, int64_t n) { return ws_.get(key, {n > 0 ? n : 1}).f32(); }
  std::shared_ptr<dist::ProcessGroup> cp_;
  int tp_;
  Device dev_;
  // "gq", "gk", "gv", "gout", "glse" (kept for the backward), "gdo", "gdq", "gdk", "gdv", "send", "recv"
  Workspace ws_;
  float *gq_ = nullptr, *gk_ = nullptr, *gv_ = nullptr, *gout_ = nullptr, *glse_ = nullptr;
  struct Saved {  // the forward the buffers above hold
    bool valid = false;
    int64_t T = 0, Hq = 0, Hkv = 0, D = 0, window = 0;
    float scale = 0;
    const kernels::AttentionOp* attn = nullptr;
    std::vector<int32_t> cu_seqlens;
    std::vector<std::vector<int32_t>> gidx;
  } saved_;
};

}  // namespace twinkle::parallel
