// twinkle/io/sharded_checkpoint.h — a distributed checkpoint: every rank's own slices of the
// global tensors in safetensors files, and one index naming where each slice lives.
//
// The model of PyTorch's distributed checkpoint (torch/distributed/checkpoint/metadata.py:
// Metadata.state_dict_metadata, TensorStorageMetadata with one ChunkStorageMetadata
// {offsets, sizes} per saved chunk, and `.metadata` written last by the coordinator), with
// safetensors as the storage (format: twinkle/io/safetensors.h):
//
//   <dir>/shard-RRRRR-of-WWWWW.safetensors   rank R's chunks, one safetensors tensor each, named
//                                            by the index's "key"; C-contiguous, shape = lengths
//   <dir>/sharded_index.json                 written last, atomically (tmp + fsync + rename):
//   {"format": "twinkle-sharded-checkpoint", "version": 1, "world_size": W,
//    "files": ["shard-00000-of-00004.safetensors", ...],
//    "tensors": [{"name": "master/model.norm.weight", "dtype": "F32", "shape": [64],
//                 "chunks": [{"file": "shard-00000-of-00004.safetensors",
//                             "key": "master/model.norm.weight#0",
//                             "offsets": [0], "lengths": [64]}]}, ...]}
//
// A tensor's chunks are boxes (offsets and lengths per dimension) of its global shape that
// cover every element exactly once (checked when the index is read). Tensors are listed in
// the order their writer gave (twinkle: the model's table order, i.e. Hugging Face's).
// A directory without the index is an incomplete save and is refused by name.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "twinkle/io/safetensors.h"

namespace twinkle {

/// The index file's name inside a sharded checkpoint directory.
inline constexpr const char* kShardedIndexName = "sharded_index.json";

/// "shard-<rank:05d>-of-<world:05d>.safetensors": the file rank `rank` of `world` writes.
std::string sharded_file_name(int rank, int world);

/// One stored slice of a global tensor (DCP's ChunkStorageMetadata).
struct ShardedChunk {
  std::string file;              ///< file name inside the checkpoint directory
  std::string key;               ///< the safetensors tensor in `file` holding the slice
  std::vector<int64_t> offsets;  ///< first index along each dimension of the global tensor
  std::vector<int64_t> lengths;  ///< extent along each dimension (the stored tensor's shape)
  int64_t numel() const;         ///< prod(lengths)
};

/// One global tensor of the index: its name, dtype, global shape and chunks.
struct ShardedTensorMeta {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<ShardedChunk> chunks;
};

/// The parsed index of a sharded checkpoint.
struct ShardedIndex {
  int world_size = 0;
  std::vector<ShardedTensorMeta> tensors;  ///< in the writer's order

  /// Reads and validates `path` (a sharded_index.json). Throws twinkle::Error naming the file
  /// and, where it applies, the tensor and chunk, when the file is missing ("... is missing: the
  /// save did not complete" — the index is written last), not JSON, of another format or version,
  /// a field is missing or of the wrong type, a dtype is unknown, a chunk's rank differs from its
  /// tensor's, a chunk lies outside the global shape, two chunks overlap, or the chunks do not
  /// cover every element of the tensor (the summed chunk sizes differ from the tensor's).
  static ShardedIndex read(const std::string& path);
  /// The JSON text of the index (the format above), ending in a newline.
  std::string to_json() const;
  /// The checks of read() on an index built in memory; `what` names it in messages.
  void validate(const std::string& what) const;
};

/// Reads slices of the global tensors of a sharded checkpoint straight from the files:
/// each call copies only the bytes of the chunks that intersect the requested box (the files
/// are memory-mapped and opened on first use, so a rank touches only the pages of the slices it
/// asks for; no global tensor is assembled unless asked for in full).
/// Only tensors whose name starts with `prefix` are visible, under the name without it (e.g.
/// prefix "exp_avg/" serves "model.norm.weight"), so the reader has the interface
/// Qwen3Model's loader reads Hugging Face checkpoints through (contains / info / load_f32 /
/// load_f32_narrow). Cheap to copy (the opened files are shared). Not thread-safe.
class ShardedCheckpointReader {
 public:
  ShardedCheckpointReader() = default;
  /// Opens `dir`'s index (ShardedIndex::read) and serves the tensors named `prefix` + name.
  static ShardedCheckpointReader open(const std::string& dir, const std::string& prefix = "");

  /// The directory (used in error messages).
  const std::string& dir() const;
  /// Visible tensor names (prefix removed), in the index's order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// The global dtype and shape (offset / nbytes describe no single file: 0 / the total).
  /// Throws twinkle::Error "<dir>/sharded_index.json has no tensor '<prefix><name>'".
  const TensorInfo& info(const std::string& name) const;
  /// The index entry of `name`.
  const ShardedTensorMeta& meta(const std::string& name) const;
  /// Copies the box [offsets, offsets + lengths) of global tensor `name` (any rank: one entry
  /// per dimension; a 0-D tensor takes empty vectors) into `dst` as f32, C-contiguous with shape
  /// `lengths`; F32 / BF16 / F16 chunks are converted exactly. Throws twinkle::Error naming the
  /// file and key when a chunk's file is missing or invalid, or holds no such key, or the key's
  /// shape / dtype is not the index's, and naming the tensor when the box is outside its shape.
  void read_f32(const std::string& name, const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths,
                float* dst) const;
  /// The whole tensor as f32 (CheckpointReader::load_f32's meaning).
  Tensor load_f32(const std::string& name) const;
  /// Indices [start, start + len) along `dim` (negative counts from the end), the other
  /// dimensions whole, as f32 (CheckpointReader::load_f32_narrow's meaning).
  Tensor load_f32_narrow(const std::string& name, int64_t dim, int64_t start, int64_t len) const;
  /// Bytes copied out of the chunk files so far by this reader and its copies (for tests and
  /// benchmarks: how much of the checkpoint a rank touched).
  int64_t bytes_read() const;

 public:
  struct Impl;  ///< opaque implementation

 private:
  std::shared_ptr<Impl> impl_;
  std::string prefix_;
};

}  // namespace twinkle
