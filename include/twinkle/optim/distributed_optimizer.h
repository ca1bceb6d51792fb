// twinkle/optim/distributed_optimizer.h — gradient reduction, grad norm, clipping and AdamW
// over a flat ParamStore, optionally sharded across data-parallel ranks (ZeRO-1).
//
// Semantics:
//  * Gradients are SUMMED over the dp-cp group (Megatron DDP with calculate_per_token_loss:
//    the loss gradient already carries 1/global_token_count), in buckets of the flat buffer;
//    the expert region of the buffer (ParamStore::expert_offset(), MoE expert parameters) over
//    the expert-data-parallel group instead (Megatron's expert-parallel buffers reduced over
//    expert_data_parallel_group; MoE parallel folding, megatron/core/parallel_state.py).
//  * use_distributed_optimizer (megatron/core/optimizer/distrib_optimizer.py): each bucket is
//    reduce-scattered so rank r of its group (dp-cp, or expert-dp for the expert region) owns
//    a contiguous 1/n of it; AdamW state exists only for owned elements; updated parameters
//    are all-gathered over the same group.
//  * Grad norm (megatron/core/optimizer/clip_grads.py get_grad_norm_fp32): the L2 norm of
//    every unique gradient element: a tp-duplicated dense parameter counts on tp rank 0 only, a
//    tied-embedding copy does not count, each element counted once over its group's shards
//    (dense: dp-cp; expert: expert-dp, the ranks holding the same expert slice, world /
//    (etp*ep*pp); etp slices are distinct elements, each counted on its own rank); the dense and
//    expert sums of squares are all-reduced over the world and the norm is
//    sqrt(dense^2 + expert^2) (Megatron's ChainedOptimizer over the dense and expert
//    optimizers), never an average of per-rank norms.
//  * Clipping (torch.nn.utils.clip_grad_norm_): coefficient max_norm / (norm + 1e-6),
//    applied only when below 1.
//  * AdamW: torch.optim.AdamW; biases and 1-D parameters are not decayed (Megatron).
//  * Buckets and overlap (megatron/core/distributed/param_and_grad_buffer.py, _ParamAndGradBucket /
//    _ParamAndGradBucketGroup; distributed_data_parallel.py; distrib_optimizer.py): each region is
//    cut into buckets of ~bucket_bytes (Megatron's bucket_size x 4 bytes), kept in the reverse
//    order of use (the backward makes the last ones final first). Every bucket is reduced by one
//    non-blocking in-place collective of its group (ProcessGroup::ireduce_scatter with the
//    distributed optimizer, else iall_reduce), and its parameters all-gathered by one
//    iall_gather after AdamW. With overlap_grad_reduce a bucket's collective starts as soon as
//    every parameter in it was reported final (grad_ready, from the last micro-batch's backward)
//    and is waited for in finish_grad_sync before the grad norm; without it every bucket starts
//    in finish_grad_sync and is waited for at once (Megatron's synchronous path). With
//    overlap_param_gather step() only starts the all-gathers, in order of first use in the
//    forward, and each is waited for in param_use just before a forward reads the bucket (the
//    forward pre-hooks). Both switches change when the same collectives run, never what they
//    compute: results are bit-identical (tests/dist/overlap_check.cpp). On a device store the
//    same non-blocking collectives order themselves on the backend's stream (the CUDA groups,
//    src/dist/cuda: NCCL through events, host-staged through the MPI request and a copy queued
//    back), so with NCCL a bucket's reduction itself never makes the host wait for the device (the
//    blocking tp / pp collectives of the CUDA groups still synchronize the device before they run).
//    Megatron's and Twinkle's default is off for both (Twinkle's DDP config, strategy/megatron.py).
//  * Gradients are zeroed after every step (unlike upstream Twinkle, whose DDP buffers leak).
//  * A non-finite global grad norm (NaN / inf on any rank: the norm is reduced over the
//    world, so every rank sees the same value) never reaches the weights: step() then
//    discards the gradients, leaves parameters and AdamW state untouched and reports
//    skipped (Megatron's check_for_nan_in_loss_and_grad / the fp16 grad scaler's
//    found_inf skip, megatron/core/optimizer/optimizer.py). The caller decides whether
//    that is an error (MegatronModel: on_nonfinite).
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "twinkle/dist/parallel_state.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/parallel/param_store.h"

namespace twinkle {

struct OptimizerConfig {
  double lr = 1e-4;
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double clip_grad = 1.0;  ///< max grad norm; <= 0 disables clipping
  bool use_distributed_optimizer = true;
  /// Gradient bucket size for the dp reduction in bytes (Megatron's bucket_size is in elements:
  /// bucket_bytes = 4 x bucket_size). Twinkle keeps 4 MiB, the best collective size measured on the
  /// development machine (bench/README.md comm_bench), where Megatron's default
  /// max(40M, 1M x dp) elements would make one bucket of every buffer here.
  int64_t bucket_bytes = 4 << 20;
  /// Start a bucket's gradient reduce-scatter / all-reduce during the backward, as soon as its
  /// gradients are final (Megatron DDP overlap_grad_reduce; default false as in Megatron and
  /// Twinkle). Needs one forward_backward per optimizer step.
  bool overlap_grad_reduce = false;
  /// Leave step()'s parameter all-gathers in flight until the next forward reads each bucket
  /// (Megatron overlap_param_gather; default false). Distributed optimizer only.
  bool overlap_param_gather = false;
};

/// Where the dp communication of the steps since reset_comm_stats() spent its time (seconds of
/// this rank's wall clock): the figure the overlap switches change (bench/layout_bench).
struct CommOverlapStats {
  int64_t grad_buckets = 0;         ///< gradient bucket collectives started
  int64_t grad_buckets_early = 0;   ///< of them, started before finish_grad_sync (during the backward)
  double grad_wait_s = 0;           ///< blocked in finish_grad_sync (starting the rest, waiting for all)
  int64_t param_buckets = 0;        ///< parameter all-gathers started
  int64_t param_buckets_forward = 0;///< of them, first waited for by a forward (param_use)
  double param_wait_s = 0;          ///< blocked on parameter all-gathers (step, param_use, finish_param_sync)
  double progress_s = 0;            ///< in progress() (MPI_Test of the collectives in flight)
  double total_s() const { return grad_wait_s + param_wait_s + progress_s; }
};

/// The one place the optimizer options are checked (MegatronModel::set_optimizer, the
/// DistributedOptimizer constructor, `twinkle train` and the recipes all call it). Throws
/// twinkle::Error naming the field (and its command-line flag) and the allowed range, with
/// PyTorch's torch.optim.AdamW rules: lr finite and >= 0; adam_beta1 / adam_beta2 in [0, 1);
/// adam_eps finite and > 0; weight_decay finite and >= 0; clip_grad finite (<= 0 disables
/// clipping); bucket_bytes >= 1.
void validate(const OptimizerConfig& cfg);

struct StepStats {
  double grad_norm = 0;  ///< pre-clip global norm
  double expert_grad_norm = 0;  ///< its expert part: sqrt(expert^2) over every expert element once
  double clip_coef = 1;  ///< applied coefficient (1 = no clipping)
  double lr = 0;
  int64_t step = 0;      ///< optimizer steps taken (after this one)
  bool skipped = false;  ///< the grad norm was non-finite: nothing was applied
};

class DistributedOptimizer {
 public:
  /// Throws twinkle::Error if the store's dense region is not divisible by the dp-cp size or its
  /// expert region by the expert-dp size, or what validate(cfg) throws.
  DistributedOptimizer(ParamStore& store, std::shared_ptr<dist::ParallelState> ps, const OptimizerConfig& cfg);

  /// Sums gradients over dp-cp, the expert region over expert-dp (reduce-scatter with the
  /// distributed optimizer, else all-reduce): finish_grad_sync(). Afterwards, with the
  /// distributed optimizer, only this rank's shard of each bucket holds the reduced gradient
  /// (the rest of the bucket is undefined).
  void reduce_gradients() { finish_grad_sync(); }

  // --- bucketed, overlappable communication (Megatron DDP's hooks). Every rank of a group must
  // report the same parameters in the same order, so the collectives start in the same order.
  /// Reports that `p`'s gradient is final for this step (all micro-batches, tp and tied sums
  /// applied). With overlap_grad_reduce, a bucket whose parameters are all reported starts its
  /// collective now; without it this does nothing. Parameters of another store are ignored.
  /// Throws twinkle::Error when a bucket already started this step is reported again (a second
  /// forward_backward before step() with overlap_grad_reduce).
  void grad_ready(const Param& p);
  /// Refuses a new backward pass (Engine::forward_backward calls it first, on every rank, before
  /// any communication): throws twinkle::Error when the gradients were already reduced
  /// (reduce_gradients() / finish_grad_sync() ran and step() or discard_gradients() did not), or
  /// when overlap_grad_reduce is on and a backward pass already ran since the last step() /
  /// discard_gradients() (its buckets' collectives started in that pass; a second pass would add
  /// gradients they miss). Both states are the same on every rank (the config is shared, the
  /// reductions are collective), so every rank refuses together: no peer is left waiting in a
  /// pipeline send or a bucket collective. No communication.
  void check_backward_allowed() const;
  /// Records that a backward pass over this store's gradients runs now (after
  /// check_backward_allowed and the Engine's agreed input checks); cleared by step(),
  /// discard_gradients() and load_state().
  void backward_started() { backward_ran_ = true; }
  /// Lets the collectives in flight progress (MPI_Test; the model calls it between layers).
  void progress();
  /// Starts every bucket not started yet (in bucket order) and waits for all of them; puts each
  /// reduced shard in place. Collective over dp-cp and expert-dp. Idempotent until the next step.
  void finish_grad_sync();
  /// Waits for the parameter all-gathers of the buckets holding `p` (a forward is about to read
  /// it; a no-op when none is in flight or `p` is not in this store).
  void param_use(const Param& p);
  /// Waits for every parameter all-gather still in flight (before anything else reads or writes
  /// the parameters: save, load, evaluation without hooks).
  void finish_param_sync();
  /// The store this optimizer updates.
  ParamStore& store() { return store_; }
  const CommOverlapStats& comm_stats() const { return stats_; }
  void reset_comm_stats() { stats_ = CommOverlapStats{}; }
  /// Global pre-clip gradient L2 norm sqrt(dense^2 + expert^2) (call after reduce_gradients;
  /// collective over the world: one all-reduce of 2 fp64 on every rank, the expert sum 0 where
  /// the stage holds no experts).
  double grad_norm();
  /// The dense and the expert parts of the last grad_norm() (global sums of squares).
  double last_dense_norm() const { return std::sqrt(last_dense_sq_); }
  double last_expert_norm() const { return std::sqrt(last_expert_sq_); }
  /// reduce_gradients + grad norm + clip (max_norm < 0: use cfg.clip_grad) + AdamW at `lr`
  /// + parameter all-gather + zero gradients. When the global grad norm is NaN or inf the
  /// update is not applied: gradients are zeroed, parameters, AdamW moments and the step
  /// count stay as they were, and the result has skipped = true (collective; every rank
  /// agrees because the norm is reduced over the world).
  StepStats step(double lr, double max_norm = -1.0);
  /// Throws the gradients of this step away without an update: used when the loss itself is
  /// non-finite (every rank agrees). Starts no collective; waits for the bucket collectives
  /// overlap_grad_reduce already started (every rank of their group started them too).
  void discard_gradients();
  void zero_grad() { store_.zero_grad(); }
  /// Kernels of the grad norm, clipping and AdamW (norms, adamw ops); the table must outlive the
  /// optimizer (MegatronModel passes its model's). Default: the CPU fused set.
  void set_kernels(const kernels::KernelTable& kt) { kt_ = &kt; }
  const OptimizerConfig& config() const { return cfg_; }
  OptimizerConfig& mutable_config() { return cfg_; }
  int64_t steps() const { return step_; }
  /// Elements of AdamW state (m and v each) this rank holds.
  int64_t state_elements() const { return state_n_; }
  /// The AdamW state of the whole store in its flat layout (exp_avg into `m`, exp_avg_sq into
  /// `v`, each resized to store.numel() f32 elements; element i belongs to flat parameter element
  /// i), for a layout-independent checkpoint. With ZeRO-1 sharding the dp-cp shards are
  /// all-gathered (bucket by bucket, as the parameters are in step()), so every dp-cp rank gets
  /// the full state (the expert region likewise over expert-dp): collective over dp-cp and
  /// expert-dp. (Megatron's DistributedOptimizer get_parameter_state_dp_zero gathers the same
  /// shards.)
  /// A device store's state is downloaded first (the gathers then run on host buffers).
  void gather_state(std::vector<float>& m, std::vector<float>& v);
  /// Restores the AdamW state from full flat-layout buffers (store.numel() elements each, as
  /// gather_state returns them for the same store layout): this rank keeps the elements it owns.
  /// `steps` is the AdamW step count (bias correction); a device store's share is uploaded. No
  /// communication. Throws twinkle::Error when steps < 0.
  void load_state(const float* m, const float* v, int64_t steps);
  /// A flat range of the store whose AdamW state this rank holds (ZeRO-1: its shard of each
  /// bucket; without the distributed optimizer, or in a group of one, the whole region), cut at
  /// parameter boundaries (a range inside no parameter is padding). For a sharded checkpoint
  /// (train/megatron_resume.cpp), which writes each element's master weight and moments once.
  struct OwnedRange {
    int64_t start = 0, len = 0;  ///< flat element range [start, start + len) of the store
    int64_t state_off = 0;       ///< where its state starts in this rank's state (read_state)
    bool expert = false;         ///< in the expert region (group: expert-dp), else dense (dp-cp)
    /// This rank is the range's one writer: it holds the only copy of the state over its group
    /// (ZeRO-1 sharded), or is rank 0 of a group whose ranks all hold the same copy.
    bool unique_owner = true;
  };
  /// This rank's owned ranges in flat order (the constructor's segments).
  std::vector<OwnedRange> owned_ranges() const;
  /// Copies `n` elements of this rank's exp_avg (`second_moment` false) or exp_avg_sq (true)
  /// from state offset `state_off` (OwnedRange::state_off + the element's offset in its range)
  /// into host memory `dst` (downloaded from a device store). Throws twinkle::Error when the
  /// range is outside the state.
  void read_state(bool second_moment, int64_t state_off, int64_t n, float* dst) const;
  /// Bytes sent by this rank in the last step's dp collectives (for the volume check).
  int64_t last_step_bytes() const { return last_bytes_; }

 private:
  struct Segment {
    int64_t start, len;  // flat element range this rank owns/updates
    bool decay, counts;  // weight decay; counts toward grad norm
    bool expert;         // in the expert region
    int64_t state_off;   // offset into m_/v_
  };
  struct Region {                // a part of the flat buffer reduced over one group
    dist::ProcessGroup* group;   // dp-cp (dense) or expert-dp
    int64_t start, len;
    bool expert;
    std::vector<std::pair<int64_t, int64_t>> buckets;  // [start, len), flat order (ZeRO ownership)
  };
  struct Bucket {                // one collective: a [start, len) piece of a region
    size_t region;
    int64_t start, len;
    int64_t param_elems = 0;     // parameter elements inside (gaps between parameters excluded)
    int64_t ready_elems = 0;     // reported final this step
    bool launched = false, done = false;
    std::unique_ptr<dist::CommWork> grad_work, param_work;
  };
  bool in_store(const Param& p) const;
  void launch_grad(Bucket& b);
  void complete_grad(Bucket& b);
  void start_param_sync();
  int64_t comm_bytes() const;
  ParamStore& store_;
  const kernels::KernelTable* kt_ = nullptr;
  const kernels::KernelTable& kernels() const;  // *kt_, or the CPU fused set
  std::shared_ptr<dist::ParallelState> ps_;
  OptimizerConfig cfg_;
  std::vector<Region> regions_;
  std::vector<Bucket> buckets_;  // groups of size > 1 only; reverse order of use (highest offsets first)
  bool param_pending_ = false;
  CommOverlapStats stats_;
  std::vector<Segment> segments_;                     // owned elements split at param boundaries
  std::vector<float> m_, v_;  // host store: AdamW state
  // Device store (the model's GPU): the same buffers in device memory; m_/v_ stay empty.
  Tensor dm_, dv_;
  int64_t state_n_ = 0;
  float* m_state() { return dm_.defined() ? dm_.f32() : m_.data(); }
  float* v_state() { return dv_.defined() ? dv_.f32() : v_.data(); }
  int64_t step_ = 0;
  int64_t last_bytes_ = 0;
  double last_dense_sq_ = 0, last_expert_sq_ = 0;
  bool reduced_ = false;
  bool backward_ran_ = false;  // a backward pass reported gradients since the last step / discard
};

}  // namespace twinkle
