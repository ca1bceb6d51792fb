// TensorBoard event files: TFRecord framing with masked CRC32C around hand-encoded Event protos
// (the format: twinkle/io/tensorboard.h).
#include "twinkle/io/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "twinkle/core/error.h"

namespace twinkle {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> a{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      a[i] = c;
    }
    return a;
  }();
  return t;
}

// protobuf wire format (https://protobuf.dev/programming-guides/encoding/)
void varint(std::string& s, uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}
void key(std::string& s, int field, int wire) { varint(s, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
void bytes_field(std::string& s, int field, const std::string& b) {
  key(s, field, 2);
  varint(s, b.size());
  s += b;
}
template <class T> void fixed(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little endian (x86-64, aarch64)
  s.append(b, sizeof(T));
}

// Event header: wall_time (1, double) and step (2, int64).
std::string event_head(int64_t step) {
  std::string e;
  const double wall =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  key(e, 1, 1);
  fixed(e, wall);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto& t = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t start_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "tensorboard: cannot create the directory " + dir + ": " + ec.message());
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch()).count();
  // TensorBoard reads a directory's event files in name order: this file must sort after every earlier
  // one (a resumed run's START must come after the steps it supersedes), also within the same second
  const std::string prefix = "events.out.tfevents.";
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = f.path().filename().string();
    if (n.rfind(prefix, 0) != 0) continue;
    const long long t = std::atoll(n.c_str() + prefix.size());
    if (t >= secs) secs = t + 1;
  }
  // a new file per writer: the seconds, host and pid, plus a counter should one process open two
  for (int k = 0;; ++k) {
    path_ = (std::filesystem::path(dir) / (prefix + std::to_string(secs) + "." + host + "." +
                                           std::to_string(getpid()) + (k ? "." + std::to_string(k) : "") +
                                           ".twinkle")).string();
    if (!std::filesystem::exists(path_)) break;
  }
  out_.open(path_, std::ios::binary);
  check(out_.is_open(), "tensorboard: cannot create the event file " + path_);
  std::string e = event_head(0);
  bytes_field(e, 3, "brain.Event:2");
  write_record(e);
  if (start_step >= 0) {
    std::string s = event_head(start_step), log;
    key(log, 1, 0);
    varint(log, 1);  // SessionLog.START
    bytes_field(s, 7, log);
    write_record(s);
  }
  flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  std::string v, summary, e = event_head(step);
  bytes_field(v, 1, tag);
  key(v, 2, 5);
  fixed(v, static_cast<float>(value));
  bytes_field(summary, 1, v);
  bytes_field(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::flush() {
  out_.flush();
  check(out_.good(), "tensorboard: writing " + path_ + " failed");
}

void TensorBoardWriter::write_record(const std::string& payload) {
  std::string r;
  const uint64_t len = payload.size();
  fixed(r, len);
  const uint32_t len_crc = masked_crc32c(r.data(), 8);
  fixed(r, len_crc);
  r += payload;
  fixed(r, masked_crc32c(payload.data(), payload.size()));
  out_.write(r.data(), static_cast<std::streamsize>(r.size()));
  check(out_.good(), "tensorboard: writing " + path_ + " failed");
}

}  // namespace twinkle
