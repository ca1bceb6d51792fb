// Private helpers of the io layer (not installed): message quoting, dtype conversion,
// and an atomic file writer.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "twinkle/core/dtype.h"

namespace twinkle::io_detail {

/// 'name' in single quotes for error messages; control / non-printable bytes are written as
/// \xNN and names longer than 200 bytes are cut (hostile files can hold any name).
std::string quote(const std::string& name);

/// Converts n elements of float dtype `dt` (F32/BF16/F16, little-endian, any alignment)
/// at `src` to f32 at `dst`. Throws twinkle::Error for integer dtypes.
void convert_to_f32(const void* src, DType dt, float* dst, size_t n);

/// Sequential writer handed to write_atomic's callback.
class FileSink {
 public:
  FileSink(int fd, const std::string& path) : fd_(fd), path_(path) {}
  /// Writes all `n` bytes (retrying short writes / EINTR); throws twinkle::Error on failure.
  void write(const void* p, size_t n);

 private:
  int fd_;
  const std::string& path_;
};

/// Creates `path + ".tmp.<pid>"`, lets `fill` write it, fsyncs, renames over `path`, fsyncs
/// the parent directory. On any exception the temporary file is removed and the exception
/// (a twinkle::Error naming `path` for I/O failures) propagates; `path` is left untouched.
void write_atomic(const std::string& path, const std::function<void(FileSink&)>& fill);

/// fsyncs directory `dir` (best effort for filesystems that refuse it).
void fsync_dir(const std::string& dir);
/// Directory part of `path` ("." when it has none).
std::string parent_dir(const std::string& path);

}  // namespace twinkle::io_detail
