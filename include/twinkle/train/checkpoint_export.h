// twinkle/train/checkpoint_export.h — a sharded training checkpoint written out as a Hugging
// Face (or PEFT) directory, one tensor at a time (`twinkle export --from-checkpoint`).
//
// A checkpoint saved with SaveOptions::save_format "sharded" (train/megatron_model.h) holds the
// fp32 master weights only as every rank's slices (io/sharded_checkpoint.h). The export streams
// each global tensor into the safetensors file (io/safetensors.h save_checkpoint_dir_streamed):
// every 16 MiB of output is read from the slices that hold those rows and converted to the output
// dtype, so its memory is one buffer plus a row or two, neither a tensor nor the model (the
// chunk files' pages are released after each read). The files are those MegatronModel::save writes
// for the same weights: full training — config.json (torch_dtype as the checkpoint's, or
// `dtype`), the tokenizer files, model.safetensors (or shards + index); LoRA — PEFT's adapter
// directory (adapter_config.json, adapter_model.safetensors in f32 under PEFT's key names), plus
// config.json and the tokenizer files.
#pragma once
#include <cstdint>
#include <string>

namespace twinkle {

struct ExportOptions {
  /// dtype of the written weights and of config.json's torch_dtype: "" = the checkpoint's
  /// config.json torch_dtype, else "float32", "bfloat16" or "float16" (SaveOptions::dtype's
  /// meaning). Ignored for a PEFT adapter (f32, as save() writes it).
  std::string dtype;
  int64_t max_shard_bytes = 5'000'000'000;  ///< safetensors shard size limit (> 0)
};

/// What export_sharded_checkpoint wrote.
struct ExportResult {
  std::string out_dir;
  bool adapter = false;       ///< a PEFT adapter directory (the checkpoint was of a LoRA run)
  int64_t tensors = 0;        ///< tensors written
  int64_t largest_bytes = 0;  ///< the largest tensor's f32 bytes (what a whole-tensor export would hold)
};

/// Writes the Hugging Face / PEFT directory `out_dir` (created; its weights replaced as
/// save_checkpoint_dir does) from `checkpoint_dir` — a checkpoint directory written with the
/// sharded save format, or an output directory whose `latest` names one. One process; reads
/// only the checkpoint. Throws twinkle::Error naming the file and tensor or field when the
/// checkpoint is not a sharded one (a gathered checkpoint already holds the HF weights), its
/// index is missing (an incomplete save) or invalid, a slice's file or key is missing, or a
/// write fails; `dtype` not one of the allowed values is refused naming the option.
ExportResult export_sharded_checkpoint(const std::string& checkpoint_dir, const std::string& out_dir,
                                       const ExportOptions& opts = {});

}  // namespace twinkle
