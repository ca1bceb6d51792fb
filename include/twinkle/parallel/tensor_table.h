// twinkle/parallel/tensor_table.h — the one table from Hugging Face tensor names to parameters.
//
// Every tensor of a model (all pipeline stages) is one TensorEntry: its HF name and full
// shape, this rank's shard of it (ShardSpec), how it is initialised, the optimizer's flags,
// the pipeline stage that holds it, and the checkpoint names it may be loaded from.
// The layer types (column_parallel_linear.h, row_parallel_linear.h, vocab_parallel_*.h and
// the model's norms) add their own entries, so a layer owns its name mapping; load, save,
// init and the optimizer all read this table and never parse names.
// (torchtitan models/*/state_dict_adapter.py: one explicit map between HF names and the
// framework's parameters; Megatron-core's sharded_state_dict of each layer.)
//
// An MoE layer adds `mlp.gate.weight` (replicated, Normal) and one entry per expert and
// projection `mlp.experts.{e}.{gate,up,down}_proj.weight` with expert = true; under expert
// parallelism `ep_owner` (the ep rank holding the expert) joins `stage` in deciding which entries
// materialize() declares and which rank gather sends from — entries of other ep ranks are
// listed with param = kNoParam, as entries of other pipeline stages are. A LoRA adapter adds
// `<base>.lora_A.weight` / `<base>.lora_B.weight` entries next to its base entry with their
// own shard specs (lora_A of a row-parallel base split along dim 1, lora_B of a
// column-parallel base along dim 0).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/kernels/registry.h"
#include "twinkle/parallel/param_store.h"

namespace twinkle::parallel {

/// How init_random fills a tensor (transformers Qwen3PreTrainedModel._init_weights).
enum class ParamInit {
  Normal,  ///< N(0, initializer_range), drawn for the full HF tensor, then sliced
  Ones,    ///< RMSNorm weights
  Zeros,   ///< biases
};

inline constexpr size_t kNoParam = static_cast<size_t>(-1);

struct TensorEntry {
  std::string name;               ///< Hugging Face tensor name
  Shape full;                     ///< HF shape ([rows] or [rows, cols])
  Shape local;                    ///< this rank's shard shape (vocab padding included)
  ShardSpec shard;                ///< this rank's slice of the HF tensor
  ParamInit init = ParamInit::Normal;
  bool weight_decay = true;       ///< false for norms and biases (Megatron's no-wd group)
  bool tp_duplicate = false;      ///< replicated over tp: counted once in the grad norm
  bool tp_grad_allreduce = false; ///< gradient is a tp-partial sum (finalize_grads sums it)
  bool tied_copy = false;         ///< the last stage's copy of a tied embedding
  bool expert = false;            ///< an MoE expert tensor (reduced over expert-dp)
  int ep_owner = -1;              ///< expert parallelism: the ep rank holding it (-1: every ep rank)
  int stage = 0;                  ///< pipeline stage holding it
  bool saved = true;              ///< written by save (false for a tied copy: HF lists one tensor)
  bool adapter = false;           ///< a LoRA tensor (parallel/lora.h): lives in the adapter ParamStore
  /// Checkpoint names tried in order when loading (empty: {name}).
  std::vector<std::string> load_names;
  size_t param = kNoParam;        ///< index in this rank's ParamStore (kNoParam: held elsewhere)
};

/// An entry replicated over tp (norm weights, row-parallel biases): local == full.
TensorEntry replicated_entry(const std::string& name, const Shape& full, ParamInit init);
/// An entry split evenly along `dim` (0: output rows, column-parallel; 1: input columns,
/// row-parallel) over `tp` ranks; rank `tp_rank` holds the `tp_rank`-th block. Throws
/// twinkle::Error when the dimension does not divide by tp.
TensorEntry split_entry(const std::string& name, const Shape& full, int dim, int tp_rank, int tp, ParamInit init);

class TensorTable {
 public:
  /// Pipeline stage of the entries added from now on.
  void set_stage(int stage) { stage_ = stage; }
  int stage() const { return stage_; }
  /// Adds `e` on the current stage; returns its id. Throws twinkle::Error when an entry of
  /// the same name is already on this stage, or when a base (non-adapter) entry is added
  /// after materialize().
  size_t add(TensorEntry e);
  const std::vector<TensorEntry>& entries() const { return entries_; }
  const TensorEntry& operator[](size_t id) const { return entries_.at(id); }
  size_t size() const { return entries_.size(); }

  /// Declares every entry of `stage` (table order) held by ep rank `ep_rank` (ep_owner -1 or
  /// ep_rank) as a parameter of `store` and records its index; binds the table to `store`
  /// (which must outlive it). Call once, before store.finalize().
  void materialize(int stage, ParamStore& store, int ep_rank = 0);
  /// Declares the adapter entries of `stage` (added after materialize()) held by ep rank
  /// `ep_rank` (ep_owner -1 or ep_rank: a LoRA pair of an expert lives with its expert) as
  /// parameters of `store` (the adapter store; must outlive the table); expert adapter entries
  /// go to the store's expert region. Call once, before store.finalize().
  void materialize_adapters(int stage, ParamStore& store, int ep_rank = 0);
  bool has_adapters() const { return adapter_store_ != nullptr; }
  /// This rank's parameter of entry `id` (throws twinkle::Error when another rank holds it).
  Param& param(size_t id) const;
  float* data(size_t id) const { return param(id).data.f32(); }
  /// The gradient of entry `id`, or nullptr when it is frozen (its store dropped its gradients).
  float* grad(size_t id) const {
    Param& p = param(id);
    return p.grad.defined() ? p.grad.f32() : nullptr;
  }

  /// The kernels the layers holding this table compute with (twinkle/kernels/registry.h): the
  /// model's table, which kernelize_model swaps; the CPU fused set until set_kernels is called.
  /// `kt` must outlive the table.
  void set_kernels(const kernels::KernelTable* kt) { kernels_ = kt; }
  /// Where this rank's parameters live (the materialized store's device; cpu before materialize).
  Device device() const { return store_ ? store_->device() : Device::CPU; }
  const kernels::KernelTable& kernels() const { return kernels_ ? *kernels_ : kernels::default_cpu_kernels(); }

 private:
  const kernels::KernelTable* kernels_ = nullptr;
  std::vector<TensorEntry> entries_;
  int stage_ = 0;
  ParamStore* store_ = nullptr;
  ParamStore* adapter_store_ = nullptr;
};

}  // namespace twinkle::parallel
