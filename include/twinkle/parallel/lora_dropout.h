// twinkle/parallel/lora_dropout.h — PEFT's lora_dropout with layout-independent masks.
//
// PEFT (peft/tuners/lora/layer.py Linear.forward): result += lora_B(lora_A(dropout(x))) *
// scaling, dropout = nn.Dropout(p) on the LoRA input x only (the base layer sees x
// unchanged), active only in training: kept elements are scaled by 1 / (1 - p)
// (torch.nn.functional.dropout), one independent mask per LoRA module.
//
// The mask must not depend on the layout (tp / sp / pp / dp, micro-batch size, padding), so it
// is not drawn from a stream: element (token, feature) of module m in step s is kept iff
//   u = splitmix64(h(seed, s, m, token_key) + feature * golden) >> 40   (24 bits)
//   u >= round(p * 2^24)
// where token_key = (global row of the step's batch) << 32 | (position in the row) — the
// token's identity in the global batch, the same on every rank that holds it — and feature is
// the GLOBAL input-feature index (a row-parallel rank's shard starts at feature0). Keep
// probability 1 - round(p 2^24) / 2^24 (|error| <= 2^-25); the scale is exactly 1 / (1 - p).
// The kernels draw it (LoraOp::dropout_mask in twinkle/kernels/ops.h); the CPU and CUDA ones share
// the rule's code, src/kernels/lora_mask_row.h.
#pragma once
#include <cstdint>
#include <string>

namespace twinkle::parallel {

/// The dropout of one forward / backward call of a stage (all its LoRA layers).
struct LoraDropout {
  float p = 0;                          ///< lora_dropout in (0, 1)
  uint64_t seed = 0;                    ///< the model's seed mixed with the step (lora_dropout_seed)
  const uint64_t* token_key = nullptr;  ///< [T] global token identities (see above)
  int64_t T = 0;                        ///< tokens of the call (rows of x)
  /// Where token_key lives: host memory (the micro-batch's keys), or the model's device memory
  /// (the MoE expert rows' keys, permuted there: model/qwen3_moe_block.cpp).
  bool token_key_on_device = false;
  /// Test hook: when non-empty, every LoRA forward writes its mask (uint8 [T, in_local], 1 =
  /// kept) to dump_dir/<dump_tag>.<module>.mask (tests/reference/check_train.py --lora-dropout
  /// feeds these to the PyTorch reference). Single process (tp = 1) only.
  std::string dump_dir, dump_tag;
};

/// The per-step seed: splitmix64 of (seed, step).
uint64_t lora_dropout_seed(uint64_t seed, int64_t step);
/// The token identity above: (row << 32) | position (row, position >= 0).
uint64_t lora_token_key(int64_t global_row, int64_t position);
/// A LoRA module's key: FNV-1a of its HF module name ("model.layers.0.self_attn.q_proj").
uint64_t lora_module_key(const std::string& module);
/// The mask's threshold for dropout probability p: round(p * 2^24) (kernels' LoraOp::dropout_mask).
uint64_t lora_dropout_threshold(float p);

/// Writes m[t * in_l + i] = 1 (kept) or 0 for tokens t < d.T and local features i < in_l
/// (global feature feature0 + i) of module `module_key`, on the host: the CPU kernel of
/// LoraOp::dropout_mask (twinkle/kernels/cpu/lora.h) with d's seed, keys and threshold.
void lora_dropout_mask(const LoraDropout& d, uint64_t module_key, int64_t feature0, int64_t in_l, uint8_t* m);

/// The dropout of the call in progress on this thread (nullptr: none — evaluation, generation,
/// p = 0). The LoRA layers (parallel/lora.h) read it.
const LoraDropout* current_lora_dropout();

/// Installs `d` (may be nullptr) as the current dropout for its lifetime (restores the previous).
class LoraDropoutScope {
 public:
  explicit LoraDropoutScope(const LoraDropout* d);
  ~LoraDropoutScope();
  LoraDropoutScope(const LoraDropoutScope&) = delete;
  LoraDropoutScope& operator=(const LoraDropoutScope&) = delete;

 private:
  const LoraDropout* prev_;
};

}  // namespace twinkle::parallel
