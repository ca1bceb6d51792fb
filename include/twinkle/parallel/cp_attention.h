// twinkle/parallel/cp_attention.h — the one context-parallel attention entry a model layer calls:
// `cp_comm_type` p2p (ring, parallel/ring_attention.h) or a2a (Ulysses,
// parallel/ulysses_attention.h) behind the signature of the cp = 1 flash kernel, with the per
// micro-batch state the pipeline schedule needs (1F1B keeps several micro-batches in flight): the
// Ulysses state is kept per `key`, an address naming the call site and the micro-batch (the model
// passes its layer's activation record of the slot).
//
// Usage in a layer (q/k/v after q_norm/k_norm and RoPE at CpShard::positions, the global ones):
//   forward(key, lay, q, k, v, out, lse, ...)   instead of flash_attention_forward
//   backward(key, lay, q, k, v, out, lse, dout, dq, dk, dv, ...)   instead of flash_attention_backward
// Everything else of the layer runs unchanged on the local tokens.
#pragma once
#include <cstdint>
#include <map>
#include <memory>

#include "twinkle/dist/process_group.h"
#include "twinkle/parallel/ring_attention.h"
#include "twinkle/parallel/ulysses_attention.h"

namespace twinkle::parallel {

class ContextParallelAttention {
 public:
  /// `cp`: the cp group; heads are the model's global counts (num_attention_heads,
  /// num_key_value_heads), `tp` the tensor-parallel size. Throws twinkle::Error (before any
  /// communication) for a2a when the heads do not divide by cp*tp, naming the numbers.
  /// `kernels` / `device`: the model's table (its attention_block op runs the ring's blocks; nullptr:
  /// the CPU "fused" table) and device (where the algorithms' buffers live).
  ContextParallelAttention(std::shared_ptr<dist::ProcessGroup> cp, CpCommType type, int64_t num_heads,
                           int64_t num_kv_heads, int tp = 1, const kernels::KernelTable* kernels = nullptr,
                           Device device = Device::CPU);
  CpCommType type() const { return type_; }
  /// out [T, Hq, D] of this rank's tokens (Hq, Hkv: heads of this tp rank). lse [T, Hq] is written
  /// for p2p (the ring's merged log-sum-exp) and ignored for a2a (may be nullptr there; Ulysses keeps
  /// the head-sharded lse of `key` itself). window: the layer's sliding window (0 = none), both
  /// algorithms. attn: the layer's registry `attention` op, which a2a runs on the head-sharded
  /// global sequence (nullptr = the CPU flash kernel); p2p runs the table's attention_block op.
  void forward(const void* key, const CpLayout& lay, const float* q, const float* k, const float* v, float* out,
               float* lse, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window = 0,
               const kernels::AttentionOp* attn = nullptr);
  /// dq [T, Hq, D], dk and dv [T, Hkv, D] (overwritten) for the forward of `key`. p2p reads q, k,
  /// v, out, lse; a2a only dout (its saved head-sharded tensors of `key`).
  void backward(const void* key, const CpLayout& lay, const float* q, const float* k, const float* v, const float* out,
                const float* lse, const float* dout, float* dq, float* dk, float* dv, int64_t Hq, int64_t Hkv,
                int64_t D, float scale, int64_t window = 0, const kernels::AttentionOp* attn = nullptr);

 private:
  UlyssesAttention& ulysses(const void* key);
  std::shared_ptr<dist::ProcessGroup> cp_;
  CpCommType type_;
  int tp_;
  Device dev_;
  RingAttention ring_;
  std::map<const void*, std::unique_ptr<UlyssesAttention>> ulysses_;  // per key
};

}  // namespace twinkle::parallel
