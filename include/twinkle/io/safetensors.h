// twinkle/io/safetensors.h — reading and writing Hugging Face safetensors files and
// (sharded) checkpoint directories.
//
// Format (https://github.com/huggingface/safetensors, README "Format"):
//   bytes [0, 8)      N, unsigned 64-bit little-endian: length of the JSON header
//   bytes [8, 8+N)    UTF-8 JSON object {name: {"dtype": "F32", "shape": [..],
//                     "data_offsets": [begin, end]}, optional "__metadata__": {str: str}}
//   bytes [8+N, EOF)  the data buffer; offsets are relative to its start, tensors are
//                     stored C-contiguous, little-endian.
// The reader validates every field before touching the data (the file is untrusted) and
// throws twinkle::Error naming the file and the tensor / field at fault. The rules are
// those of the reference Rust implementation (safetensors/src/tensor.rs, `validate`):
// known dtype, shape without negative entries and without overflow, data_offsets two
// non-negative ints with begin <= end, end - begin == prod(shape) * dtype size, tensors
// not overlapping and together covering the data buffer with no hole and no trailing
// bytes, header at most 100 MB, no duplicate names.
//
// Checkpoint directories follow transformers' `save_pretrained` layout
// (transformers/modeling_utils.py, SAFE_WEIGHTS_NAME / SAFE_WEIGHTS_INDEX_NAME):
//   model.safetensors                                 (one file), or
//   model-00001-of-00003.safetensors ... + model.safetensors.index.json
//       {"metadata": {"total_size": <sum of tensor bytes>}, "weight_map": {name: file}}
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "twinkle/core/tensor.h"

namespace twinkle {

/// Description of one tensor stored in a safetensors file.
struct TensorInfo {
  DType dtype = DType::F32;  ///< dtype as stored on disk
  Shape shape;               ///< dims, each >= 0; empty for a scalar
  size_t nbytes = 0;         ///< prod(shape) * dtype_size(dtype)
  size_t offset = 0;         ///< byte offset of the first element inside the data buffer
  int64_t numel() const;     ///< prod(shape) (1 for a scalar)
};

/// A validated, read-only safetensors file (memory-mapped when opened from a path).
/// Cheap to copy: copies share the mapping. Thread-safe for concurrent loads. Like any mmap
/// reader, truncating the file on disk while it is open makes later loads fault (SIGBUS);
/// twinkle's writers never do that (they replace files by rename).
class SafetensorsFile {
 public:
  SafetensorsFile() = default;

  /// Maps and validates `path`. Throws twinkle::Error naming `path` when the file cannot be
  /// opened, is shorter than 8 bytes, its header length exceeds the file or 100 MB, the
  /// header is not a JSON object, an entry is malformed (the message names the tensor and
  /// the field: dtype / shape / data_offsets), an unknown dtype, a negative or overflowing
  /// shape, a byte size that does not match prod(shape) * dtype size, overlapping tensors,
  /// a hole or trailing bytes in the data buffer, a duplicate name, or a non-string
  /// "__metadata__" value.
  static SafetensorsFile open(const std::string& path);

  /// Same validation over bytes already in memory (copied; the caller's buffer may be freed
  /// afterwards). `name` stands for the file name in error messages. Used by the fuzzer.
  static SafetensorsFile open_from_memory(const void* data, size_t size, const std::string& name);

  /// The name given to open / open_from_memory (used in every error message).
  const std::string& path() const;
  /// Tensor names in file order (sorted by data offset, as laid out on disk).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// Throws twinkle::Error "<file>: no tensor '<name>'" when absent.
  const TensorInfo& info(const std::string& name) const;
  /// The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const;

  /// Contiguous CPU tensor with the on-disk dtype and shape (bytes copied verbatim).
  Tensor load(const std::string& name) const;
  /// Contiguous CPU F32 tensor; F32/BF16/F16 on disk are converted exactly (bf16 and f16
  /// widen losslessly), F64 rounded to nearest even (PyTorch's Tensor.float()). Throws
  /// twinkle::Error for an integer tensor.
  Tensor load_f32(const std::string& name) const;
  /// F32 copy of indices [start, start+len) along dimension `dim` (negative counts from the
  /// end) — what one tensor-parallel rank needs of a column- or row-parallel weight
  /// (Megatron's split along output / input dim), without converting the rest.
  /// Throws twinkle::Error when the range is outside the shape or the tensor is integer.
  Tensor load_f32_narrow(const std::string& name, int64_t dim, int64_t start, int64_t len) const;
  /// Converts (F32/BF16/F16/F64 -> F32, or same-dtype copy) into an existing contiguous CPU tensor
  /// `dst` whose shape must equal the stored shape; dst.dtype() must be F32 or the stored dtype.
  void load_into(const std::string& name, Tensor& dst) const;
  /// Pointer to the raw little-endian bytes of tensor `name` inside the mapping (valid while
  /// any copy of this object lives). Length = info(name).nbytes.
  const void* raw_data(const std::string& name) const;

 public:
  struct Impl;  ///< opaque implementation

 private:
  std::shared_ptr<const Impl> impl_;
};

/// Writes `tensors` (CPU; any dtype, any strides; stored in their own dtype — convert first
/// if you want BF16 on disk) to `path` in safetensors format, keeping the given order.
/// The header is padded with spaces to a multiple of 8 bytes (as the Python `safetensors`
/// writer does). Atomic: writes `path + ".tmp.<pid>"`, fsyncs, rename(2)s over `path`,
/// fsyncs the directory; on any failure the temporary file is removed and twinkle::Error
/// (naming the path and errno text) is thrown, leaving any previous `path` untouched.
/// Throws twinkle::Error for an empty or duplicate name, the name "__metadata__", or an
/// undefined / non-CPU tensor (naming it).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// One tensor for the streaming writers below: its name, on-disk dtype and shape, and where
/// its bytes come from — `data` (host memory, prod(shape) * dtype_size bytes, written straight
/// from there, no copy) or, when `data` is null, `fill(dst, offset, n)`, called with consecutive
/// byte ranges [offset, offset + n) of the tensor (n at most the writer's buffer size), which
/// must write exactly n bytes to dst (e.g. a download from a device, a read from other files, a
/// dtype conversion). `fill` may throw; the file is then not written.
struct TensorSource {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;
  std::function<void(void* dst, size_t offset, size_t n)> fill;
  size_t nbytes() const;  ///< prod(shape) * dtype_size(dtype)
};

/// save_safetensors for tensors whose bytes are produced while the file is written: the header
/// comes from the names, dtypes and shapes alone, then each tensor's bytes are written from its
/// `data` or through its `fill` with one buffer of at most `buffer_bytes` (>= 1) bytes, so the
/// writer holds no more than that beyond what the caller holds (PyTorch DCP's FileSystemWriter
/// streams each rank's items the same way). Same file bytes, atomicity and errors as
/// save_safetensors, which is this function over tensors in memory.
void save_safetensors_streamed(const std::string& path, const std::vector<TensorSource>& tensors,
                               const std::map<std::string, std::string>& metadata = {},
                               size_t buffer_bytes = size_t{16} << 20);

/// A Hugging Face model directory's weights: `model.safetensors` or a sharded set described
/// by `model.safetensors.index.json`. Like transformers, a single `model.safetensors` wins when
/// both exist. Every shard is opened and validated at open_dir. Cheap to copy.
class CheckpointReader {
 public:
  CheckpointReader() = default;

  /// Opens the weights in `dir`. Throws twinkle::Error when `dir` does not exist, the index is
  /// malformed (not JSON, no "weight_map" object, a non-string file name, a file name with a
  /// '/' or "..", the message naming the index file and the tensor), a shard listed in the
  /// index is missing, a shard is invalid (see SafetensorsFile::open), a name is mapped to a
  /// shard that lacks it, or one name is stored in two shards. Tensors stored in a shard but
  /// absent from weight_map are still served (transformers loads every key of each shard).
  /// "metadata.total_size" is not checked (some published indexes get it wrong).
  /// A directory without any safetensors weights is NOT an error: has_weights() is false.
  static CheckpointReader open_dir(const std::string& dir);

  /// False when the directory holds neither model.safetensors nor the index.
  bool has_weights() const;
  const std::string& dir() const;
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// Throws twinkle::Error "<dir>: no tensor '<name>' in the checkpoint" when absent.
  const TensorInfo& info(const std::string& name) const;
  /// The file (path) that holds `name`.
  const std::string& file_of(const std::string& name) const;
  /// See SafetensorsFile::load / load_f32 / load_f32_narrow / load_into.
  Tensor load(const std::string& name) const;
  Tensor load_f32(const std::string& name) const;
  Tensor load_f32_narrow(const std::string& name, int64_t dim, int64_t start, int64_t len) const;
  void load_into(const std::string& name, Tensor& dst) const;

 public:
  struct Impl;  ///< opaque implementation

 private:
  std::shared_ptr<const Impl> impl_;
};

/// Writes a transformers-style weights directory (creating `dir` if needed): a single
/// `model.safetensors` when the total tensor bytes <= max_shard_bytes, else shards
/// `model-0000i-of-0000N.safetensors` filled greedily in the given order (a tensor larger
/// than max_shard_bytes gets a shard of its own, as transformers' `shard_checkpoint` does)
/// plus `model.safetensors.index.json` {"metadata": {"total_size": bytes}, "weight_map"}.
/// Each file carries metadata {"format": "pt"} and is written atomically. Crash safety:
/// an existing model.safetensors / index is removed BEFORE new shards are written and the
/// index is written LAST, so an interrupted save never looks like a complete checkpoint;
/// stale shards of a previous save are removed afterwards. Throws twinkle::Error (see
/// save_safetensors) and for max_shard_bytes <= 0.
void save_checkpoint_dir(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         int64_t max_shard_bytes = 5'000'000'000);

/// save_checkpoint_dir over streamed tensors (see TensorSource): the same files, shard split,
/// index and crash-safety order, while at most one `buffer_bytes` buffer (plus what each
/// tensor's `fill` holds, e.g. one tensor being converted) is in memory — `twinkle export
/// --from-checkpoint` writes a Hugging Face directory one tensor at a time with it.
/// save_checkpoint_dir is this function over tensors in memory.
void save_checkpoint_dir_streamed(const std::string& dir, const std::vector<TensorSource>& tensors,
                                  int64_t max_shard_bytes = 5'000'000'000, size_t buffer_bytes = size_t{16} << 20);

namespace io_detail {
/// Writes `bytes` to `path` atomically (tmp file + fsync + rename + directory fsync).
/// Throws twinkle::Error naming `path`. Shared by the config and checkpoint writers.
void write_file_atomic(const std::string& path, const std::string& bytes);
}  // namespace io_detail

}  // namespace twinkle
