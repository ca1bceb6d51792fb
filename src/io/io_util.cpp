// io layer helpers: message quoting, atomic file writes.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "io_util.h"
#include "twinkle/core/error.h"
#include "twinkle/io/safetensors.h"

namespace twinkle {

namespace io_detail {

std::string quote(const std::string& name) {
  std::string out = "'";
  size_t n = std::min<size_t>(name.size(), 200);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > n) out += "...";
  out += "'";
  return out;
}

std::string parent_dir(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

namespace {

// Fault injection for the crash-safety tests (TWINKLE_FAULT_WRITE, read once):
//   "enospc:N"  every write past N bytes written by this process fails with ENOSPC (a full,
//               size-limited filesystem, through the real error path);
//   "kill:N"    the process SIGKILLs itself once N bytes have been written (a rank dying in
//               the middle of a checkpoint write);
//   "delay:N"   every write call sleeps N milliseconds first (a slow filesystem: an asynchronous
//               save's writer thread is then still writing while the next steps change the weights).
struct WriteFault {
  enum Kind { None, Enospc, Kill, Delay } kind = None;
  uint64_t limit = 0;
  WriteFault() {
    const char* e = std::getenv("TWINKLE_FAULT_WRITE");
    if (!e) return;
    const std::string s(e);
    const auto colon = s.find(':');
    if (colon == std::string::npos) return;
    const std::string k = s.substr(0, colon);
    kind = k == "enospc" ? Enospc : k == "kill" ? Kill : k == "delay" ? Delay : None;
    limit = std::strtoull(s.c_str() + colon + 1, nullptr, 10);
  }
};
std::atomic<uint64_t> g_written{0};

// The bytes this write may pass on (all of n unless a fault fires; may not return).
size_t fault_check(size_t n) {
  static const WriteFault f;
  if (f.kind == WriteFault::None) return n;
  if (f.kind == WriteFault::Delay) {
    std::this_thread::sleep_for(std::chrono::milliseconds(f.limit));
    return n;
  }
  const uint64_t before = g_written.load();
  if (before + n <= f.limit) return n;
  if (f.kind == WriteFault::Kill) ::raise(SIGKILL);
  if (before >= f.limit) {
    errno = ENOSPC;
    return 0;
  }
  return static_cast<size_t>(f.limit - before);  // a short write up to the limit, then ENOSPC
}

}  // namespace

void FileSink::write(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const size_t allowed = fault_check(chunk);
    if (allowed == 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
    chunk = allowed;
    ssize_t w = ::write(fd_, c, chunk);
    if (w > 0) g_written += static_cast<uint64_t>(w);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": write failed: " + std::strerror(errno));
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void write_atomic(const std::string& path, const std::function<void(FileSink&)>& fill) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot create temporary file " + tmp + ": " + std::strerror(errno));
  try {
    FileSink sink(fd, tmp);
    fill(sink);
    if (::fsync(fd) != 0) throw Error(path + ": fsync of " + tmp + " failed: " + std::strerror(errno));
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Error(path + ": close of " + tmp + " failed: " + std::strerror(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(path + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(parent_dir(path));
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_atomic(path, [&](FileSink& s) { s.write(bytes.data(), bytes.size()); });
}

}  // namespace io_detail

}  // namespace twinkle
