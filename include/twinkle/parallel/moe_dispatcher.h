// twinkle/parallel/moe_dispatcher.h — expert parallelism: Megatron-core's alltoall token
// dispatcher (megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher)
// in explicit forward / backward form, with expert tensor parallelism (etp >= 1).
//
// The E experts of a MoE layer are split over the ep ranks of the EP group: rank r owns the
// contiguous block [r*El, (r+1)*El), El = E / ep (Megatron's local_expert_indices). Every rank
// routes its own tokens (the router runs before dispatch); then
//   dispatch:  count slots per expert -> exchange the per-expert counts over EP (all-to-all)
//              -> permute the local tokens' k copies by global expert (= by destination rank,
//              then local expert; the kernel table's moe_permute op, kernels/ops.h) -> all-to-all-v of the rows
//              -> regroup the received chunks [src][local expert] into [local expert][src]
//              (Megatron's sort_chunks_by_idxs), so each local expert's rows are contiguous
//              for the grouped GEMM;
//   combine:   the reverse: regroup [local expert][src] -> [src][local expert], all-to-all-v
//              back, then un-permute with the probability-weighted sum (transformers'
//              combine: out[t] = sum_j w[t, j] * y[slot t*k+j]).
// Expert tensor parallelism (etp > 1; Megatron's dispatcher with the expert tp group "tp_group"
// = this etp group): each etp rank holds a column slice of every local expert's gate/up and a
// row slice of its down projection, and every etp rank of the group dispatches its OWN tokens
// over its ep group as above. Then
//   dispatch:  all-gather the per-local-expert counts and the received rows over etp
//              (gather_from_sequence_parallel_region with output_split_sizes) and regroup
//              [etp rank][local expert] -> [local expert][etp rank] (sort_chunks_by_idxs), so
//              expert_input() holds the whole etp group's rows of each local expert;
//   combine:   the experts' outputs are etp-partial sums (row-parallel down projection):
//              regroup back, reduce-scatter over etp (reduce_scatter_to_sequence_parallel_region)
//              so each etp rank gets the complete outputs of its own rows, then the ep path.
// Their backwards swap the two collectives (reduce-scatter of d(expert input), all-gather of
// d(expert output)). The variable row counts travel as equal blocks padded to the largest
// etp rank's rows (MPI_Allgather / MPI_Reduce_scatter_block); padding rows are never read.
// Row order inside a local expert: etp rank, then ep source, then token, as in Megatron.
//
// The backward of an all-to-all is the all-to-all in the other direction (a permutation of
// rows across ranks): no reduction and no scaling (expert gradients must
// not double). With ep = 1 (a size-1 group) the same code runs without communication and
// equals the single-process expert block.
//
// Row order inside a local expert: source ranks ascending, and each source's tokens
// ascending, i.e. the token order of the concatenated EP group's tokens — the same rows, in
// the same order, as one process running the whole group's tokens, so expert GEMMs and
// their weight gradients are equal to the single-process ones.
//
// Saved and transient buffers. A dispatcher keeps, from dispatch() until its backward, only
// what the backward reads: the routing plan (counts, row_of_slot), expert_input() (the
// experts' weight gradients need their input rows; Megatron keeps the permuted tokens and the
// routing map / probabilities per layer the same way) and the experts' outputs back in slot
// order (y_perm, [T*k, hidden]: the combine weights' gradient dot(dout[t], y[slot])). Every
// other row buffer — the permuted send rows, the all-to-all receive rows, the reordering and
// un-permute scratch, the etp all-gather / reduce-scatter block and dispatch_tags' 8-byte tags —
// is needed only inside one call, so it lives in a caller's Workspace (keys "moe.a2a.send", "moe.a2a.recv",
// "moe.a2a.own", "moe.a2a.etp", grow-only) that every dispatcher of a stage shares: one set
// of them per rank instead of one per (layer, micro-batch slot). Without a workspace the
// dispatcher uses a private one. Results do not depend on which workspace is used (no stale
// row is read). Call dispatch / combine / combine_backward / dispatch_backward in that order
// for each micro-batch and layer. The plan belongs to one micro-batch: under 1F1B (stage 0 of
// p = 2 runs F0 F1 B0) use one dispatcher per (MoE layer, pipeline slot), never one per
// layer, or B0 would run with micro-batch 1's routing.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "twinkle/core/workspace.h"
#include "twinkle/dist/process_group.h"
#include "twinkle/kernels/registry.h"

namespace twinkle::parallel {

class AlltoAllDispatcher {
 public:
  /// ep: the expert-parallel group (size ep). num_experts % ep must be 0 and hidden >= 1,
  /// else twinkle::Error naming the numbers. etp: the expert-tensor-parallel group (nullptr or
  /// size 1: none); with etp > 1 expert_input() / local_counts() / expert_rows() cover the
  /// whole etp group's rows and combine expects etp-partial outputs (see above).
  /// kernels: the table whose moe_permute op sorts, permutes and combines the rows, read at each call
  /// (nullptr: the CPU "fused" table; required for a device other than the CPU); device: where every row buffer lives (the model's device; with "cuda" the
  /// groups are the CUDA wrappers of twinkle/dist/nccl_process_group.h, which move device buffers).
  AlltoAllDispatcher(std::shared_ptr<dist::ProcessGroup> ep, int64_t num_experts, int64_t hidden,
                     std::shared_ptr<dist::ProcessGroup> etp = nullptr, const kernels::KernelTable* kernels = nullptr,
                     Device device = Device::CPU);

  int64_t num_experts() const { return E_; }
  int64_t num_local_experts() const { return El_; }
  /// First global expert index owned by this rank (ep_rank * num_local_experts).
  int64_t first_local_expert() const { return first_; }

  /// Forward dispatch of this rank's T tokens x [T, hidden] f32 with their routing
  /// topk_idx [T, k] i32 (global expert ids in [0, E), distinct per token; else
  /// twinkle::Error). Collective over the EP group (and the etp group). Afterwards
  /// expert_input() holds expert_rows() rows [R, hidden] grouped by local expert,
  /// local_counts() [El] rows each. scratch: the shared workspace of the transient buffers
  /// (see above; nullptr: the dispatcher's own), here and in the three calls below.
  void dispatch(const float* x, const int32_t* topk_idx, int64_t T, int64_t k, Workspace* scratch = nullptr);
  const float* expert_input() const { return expert_in_; }
  int64_t expert_rows() const { return R_; }
  const int64_t* local_counts() const { return local_counts_.data(); }
  /// Sends a per-token tag along the last dispatch()'s routing plan: out [expert_rows()] (the caller's) gets
  /// tag[t] of the token behind each expert_input() row, in that row order (the LoRA dropout
  /// keys of the expert rows: the token identities of parallel/lora_dropout.h, model/qwen3_moe_block.h).
  /// tag [T] of this rank's tokens, host memory; out on the dispatcher's device. Collective over the EP group (one all-to-all-v of 8-byte
  /// tags). scratch: the workspace of dispatch(); the tags pass through its "moe.a2a.send" and
  /// "moe.a2a.recv" buffers (no allocation per call). Throws twinkle::Error with
  /// etp > 1 (not needed: LoRA refuses etp > 1) or before any dispatch().
  void dispatch_tags(const uint64_t* tag, uint64_t* out, Workspace* scratch = nullptr);
  /// Slots routed by THIS rank's tokens to each global expert [E] (the load statistics and the
  /// aux loss counts of the local tokens).
  const int64_t* global_counts() const { return counts_.data(); }

  /// Forward combine: y [R, hidden] the experts' outputs in expert_input()'s row order,
  /// topk_w [T, k] the combine weights -> out [T, hidden] (OVERWRITTEN). With etp > 1, y holds
  /// this etp rank's partial sums (summed over etp here). Collective. Keeps the returned
  /// expert outputs for combine_backward.
  void combine(const float* y, const float* topk_w, float* out, Workspace* scratch = nullptr);

  /// Backward of combine given dout [T, hidden]: dy [R, hidden] (OVERWRITTEN; the gradient of
  /// the experts' outputs in expert_input()'s order) and dtopk_w [T, k] (OVERWRITTEN). Collective.
  void combine_backward(const float* dout, const float* topk_w, float* dy, float* dtopk_w,
                        Workspace* scratch = nullptr);

  /// Backward of dispatch given d_expert_input [R, hidden] -> dx [T, hidden] (OVERWRITTEN, or
  /// added to when accumulate). Collective.
  void dispatch_backward(const float* d_expert_input, float* dx, bool accumulate = false,
                         Workspace* scratch = nullptr);

  /// Bytes of token rows this rank sent to other ranks in the last dispatch (each direction
  /// of the forward moves the same volume): sum over destinations != self of rows * hidden * 4.
  int64_t last_dispatch_bytes() const { return last_bytes_; }

 private:
  // [src][local expert] <-> [local expert][src] chunk reordering of R rows.
  void src_to_expert_order(const float* in, float* out) const;
  void expert_to_src_order(const float* in, float* out) const;
  // First row of block (source rank s, local expert e) in the [src][local expert] receive order.
  int64_t src_block_row(int s, int64_t e) const;
  // All-to-all of [rows, hidden] rows: forward direction (to expert owners) or back.
  void exchange(const float* send, float* recv, bool to_experts);
  // etp > 1: own rows [R_own, hidden] ([local expert][src] order) -> the group's rows [R, hidden]
  // ([local expert][etp rank][src]) by all-gather, and the reverse by reduce-scatter (sum),
  // through the workspace's "moe.a2a.etp" block.
  void etp_gather(const float* own, float* all, Workspace& ws);
  void etp_reduce_scatter(const float* all, float* own, Workspace& ws);
  // A transient buffer of n floats (at least 1) under `key` of `ws`, or of the private workspace.
  float* scratch_rows(Workspace* ws, const char* key, int64_t n);
  // A buffer kept until the backward (saved_), n floats (at least 1).
  float* saved_rows(const char* key, int64_t n);
  // rows x hidden floats from src to dst on the dispatcher's device (nothing for 0 rows).
  void copy_rows(float* dst, const float* src, int64_t rows) const;
  Workspace& scratch_of(Workspace* ws) { return ws ? *ws : own_scratch_; }

  std::shared_ptr<dist::ProcessGroup> ep_, etp_;
  const kernels::KernelTable* kt_;  // the model's table (its address stays under Qwen3Model::set_kernels)
  Device dev_ = Device::CPU;
  // saved until the backward (grow-only, on dev_): the routing plan's slot maps, the experts' input
  // rows and their outputs in slot order
  Workspace saved_;
  int32_t* row_of_slot_ = nullptr;
  int32_t* slot_of_row_ = nullptr;
  float* expert_in_ = nullptr;
  float* y_perm_ = nullptr;
  int64_t E_ = 0, El_ = 0, H_ = 0, first_ = 0;
  int ep_size_ = 1, ep_rank_ = 0, etp_size_ = 1, etp_rank_ = 0;
  // routing plan of the last dispatch
  int64_t T_ = 0, k_ = 0, R_ = 0;
  std::vector<int64_t> counts_;          // [E] this rank's slots per global expert
  std::vector<int64_t> recv_counts_;     // [ep][El] rows received from each source per local expert
  std::vector<int64_t> local_counts_;    // [El] (the etp group's rows when etp > 1)
  int64_t R_own_ = 0;                    // rows received over ep by this rank (= R_ for etp 1)
  std::vector<int64_t> own_counts_;      // [El] of them per local expert
  std::vector<int64_t> etp_counts_;      // [etp][El] every etp rank's own_counts_
  int64_t etp_block_ = 0;                // padded rows per etp rank in the "moe.a2a.etp" block
  std::vector<int64_t> send_rows_, recv_rows_;  // [ep] rows to / from each peer
  Workspace own_scratch_;  // the transient buffers when the caller passes no workspace
  std::vector<int64_t> sc_, sd_, rc_, rd_;
  int64_t last_bytes_ = 0;
};

}  // namespace twinkle::parallel
