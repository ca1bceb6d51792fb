// twinkle/io/tensorboard.h — TensorBoard event files (Megatron's --tensorboard-dir).
//
// Format (TensorFlow's, what tensorboard.backend.event_processing reads): a file
// DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.twinkle of TFRecords — uint64 length (little
// endian), uint32 masked CRC32C of those 8 bytes, the payload, uint32 masked CRC32C of the payload
// (tensorflow/core/lib/io/record_writer.cc; mask = rotate right 15 + 0xa282ead8) — each payload a
// tensorflow.Event proto (event.proto: wall_time = 1 double, step = 2 int64, file_version = 3,
// summary = 5 {repeated Value value = 1 {tag = 1, simple_value = 2 float}}, session_log = 7
// {status = 1: START = 1}). The first record is file_version "brain.Event:2".
//
// Restarts: a writer opened with start_step >= 0 (a run resumed from a checkpoint at that step)
// writes SessionLog START at start_step first; TensorBoard then drops the earlier files' events at
// steps >= start_step (EventAccumulator's purge of orphaned data), so a restart shows one curve, not
// the abandoned steps and the redone ones side by side.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace twinkle {

/// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes; crc: a running value (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
/// TFRecord's masked CRC: ((c >> 15) | (c << 17)) + 0xa282ead8 of crc32c(data, n).
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  /// Creates `dir` if needed and a new event file in it (never appends to an old one), writes the
  /// file_version event and, with start_step >= 0, SessionLog START at start_step. Throws
  /// twinkle::Error naming the path when the directory or file cannot be created.
  explicit TensorBoardWriter(const std::string& dir, int64_t start_step = -1);
  /// One scalar (stored as float32, TensorBoard's simple_value) at `step`, wall time now. Non-finite
  /// values are written as they are (TensorBoard shows NaN / inf). Throws twinkle::Error on a write error.
  void add_scalar(const std::string& tag, double value, int64_t step);
  /// Flushes the file to the OS (TensorBoard sees every step as it ends).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  std::ofstream out_;
};

}  // namespace twinkle
