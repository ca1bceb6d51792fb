// io layer helpers: message quoting, atomic file writes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

void FileSink::write(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    ssize_t w = ::write(fd_, c, chunk);
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
