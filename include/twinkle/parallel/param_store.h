// twinkle/parallel/param_store.h — trainable parameters (this rank's shards) in one flat buffer.
//
// Every parameter of a model stage (this rank's shard of it) is a view into one
// contiguous f32 buffer, and its gradient a view into a second one of the same
// layout. Flat buffers let data parallelism reduce gradients in a few large
// buckets and let the distributed optimizer (ZeRO-1) own a contiguous shard
// (Megatron-core's ParamAndGradBuffer / DistributedOptimizer).
//
// Parameters are declared from the model's TensorTable (tensor_table.h) in table order,
// so tensors a fused kernel reads as one block (gate_proj then up_proj) are adjacent.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/core/tensor.h"

namespace twinkle {

/// How this rank's tensor relates to the full Hugging Face tensor.
struct ShardSpec {
  int split_dim = -1;       ///< -1: replicated; 0/1: split along that dim across tp
  int64_t full_rows = 0;    ///< HF tensor shape (2-D: rows x cols; 1-D: cols = 1)
  int64_t full_cols = 0;
  int64_t offset = 0;       ///< first row/col (along split_dim) held by this rank
  int64_t valid = 0;        ///< rows/cols along split_dim that exist in the HF tensor (vocab padding excluded)
};

/// Copies this rank's slice of the full HF tensor `full` (row-major, shard.full_rows x
/// shard.full_cols) into dst (local shape `local`, zeroing vocab padding rows).
void shard_from_full(const ShardSpec& shard, const Shape& local, const float* full, float* dst);
/// Writes a rank's local slice `src` (local shape `local`) into its place in `full`
/// (the inverse of shard_from_full; padding rows are dropped).
void shard_into_full(const ShardSpec& shard, const Shape& local, const float* src, float* full);

struct Param {
  std::string name;          ///< Hugging Face parameter name
  Shape shape;               ///< local shape
  Tensor data;               ///< view into ParamStore::params()
  Tensor grad;               ///< view into ParamStore::grads()
  int64_t flat_offset = 0;   ///< element offset in the flat buffers
  bool weight_decay = true;  ///< false for biases and 1-D params (Megatron's no-wd group)
  /// Replicated across tp (norm weights): counts in the grad norm on tp rank 0 only.
  bool tp_duplicate = false;
  /// Gradient is a partial sum over tp ranks and must be all-reduced (SUM) across tp
  /// (q_norm/k_norm under tp > 1; every norm weight under sequence parallelism).
  bool tp_grad_allreduce = false;
  /// A tied-embedding copy on the last pipeline stage: its gradient is summed with the
  /// first stage's over the embedding group, and it does not count in the grad norm.
  bool tied_copy = false;
  /// An MoE expert parameter (reduced over the expert-data-parallel group).
  bool expert = false;
  ShardSpec shard;
};

class ParamStore {
 public:
  /// Declares a parameter (before finalize()). Returns its index.
  size_t add(Param p);
  /// Allocates the flat buffers on `dev` (device memory through twinkle/core/device_allocator.h)
  /// and binds every Param's data/grad views. Must be called once before use. Two regions, as
  /// Megatron-core keeps dense and expert-parallel parameters in separate ParamAndGradBuffers
  /// (megatron/core/distributed/distributed_data_parallel.py): the dense parameters first, in
  /// declaration order, padded to a multiple of `align` elements and at least `align` long (an
  /// empty dense region is one block of zeros, so its length depends on the dense parameters
  /// alone, never on which experts this rank holds); then the expert parameters
  /// (Param::expert), in declaration order, padded to a multiple of `expert_align` (0: `align`).
  /// Without expert parameters the expert region is empty (expert_offset() == numel()).
  void finalize(int64_t align = 64, int64_t expert_align = 0, Device dev = Device::CPU);
  Device device() const { return dev_; }

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  Param& operator[](size_t i) { return params_[i]; }
  /// The first parameter named `name` (exact HF name), or nullptr.
  const Param* find(const std::string& name) const;
  Param* find(const std::string& name);
  size_t size() const { return params_.size(); }
  bool finalized() const { return finalized_; }
  Tensor& flat_params() { return flat_params_; }
  Tensor& flat_grads() { return flat_grads_; }
  int64_t numel() const { return numel_; }  ///< padded flat size
  /// First element of the expert region (= the padded size of the dense region).
  int64_t expert_offset() const { return expert_offset_; }
  void zero_grad();
  /// Frees the gradient buffer and unbinds every Param's grad (frozen parameters: LoRA
  /// training keeps no gradient, hence no optimizer state, for the base weights).
  /// Layers skip the weight-gradient GEMMs of a parameter without a gradient.
  void drop_grads();
  bool has_grads() const { return flat_grads_.defined(); }

 private:
  std::vector<Param> params_;
  Tensor flat_params_, flat_grads_;
  int64_t numel_ = 0;
  int64_t expert_offset_ = 0;
  bool finalized_ = false;
  Device dev_ = Device::CPU;
};

}  // namespace twinkle
