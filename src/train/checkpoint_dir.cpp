// Crash-safe checkpoint directories: staging, fsync, rename, `latest`, pruning.
#include "twinkle/train/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "twinkle/core/error.h"
#include "twinkle/io/safetensors.h"

namespace twinkle {

namespace fs = std::filesystem;

namespace {

void fsync_path(const fs::path& p, bool dir) {
  int fd = ::open(p.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw Error(p.string() + ": cannot open for fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on a directory (EINVAL); a file's fsync must succeed.
  if (rc != 0 && !(dir && (err == EINVAL || err == EBADF)))
    throw Error(p.string() + ": fsync failed: " + std::strerror(err));
}

}  // namespace

std::string checkpoint_step_name(int64_t step) { return "checkpoint-step-" + std::to_string(step); }

std::string iter_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(step));
  return buf;
}

std::string staging_dir_for(const std::string& final_dir) { return staging_dir_for(final_dir, ::getpid()); }

std::string staging_dir_for(const std::string& final_dir, int64_t pid) {
  const fs::path f = fs::path(final_dir).lexically_normal();
  const fs::path name = f.filename().empty() ? f.parent_path().filename() : f.filename();
  const fs::path parent = f.filename().empty() ? f.parent_path().parent_path() : f.parent_path();
  return (parent / ("." + name.string() + ".tmp." + std::to_string(pid))).string();
}

void run_on_rank0_agreed(dist::ProcessGroup& world, const std::function<void()>& write,
                         const std::function<std::string(const std::string&)>& on_failure,
                         const std::string& elsewhere) {
  std::string failure;
  if (world.rank() == 0) try {
      write();
    } catch (const std::exception& e) {
      failure = on_failure(e.what());
      if (failure.empty()) failure = "unknown error";
    }
  int64_t failed = failure.empty() ? 0 : 1;
  if (world.size() > 1) world.all_reduce(&failed, 1, DType::I64, dist::ReduceOp::Max);
  if (failed) throw Error(world.rank() == 0 ? failure : elsewhere);
}

void remove_stale_staging(const std::string& final_dir) {
  const fs::path f = fs::path(final_dir).lexically_normal();
  const fs::path parent = f.parent_path().empty() ? fs::path(".") : f.parent_path();
  if (!fs::is_directory(parent)) return;
  const std::string tmp = "." + f.filename().string() + ".tmp.", old = "." + f.filename().string() + ".old.";
  for (const auto& e : fs::directory_iterator(parent)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(tmp, 0) == 0 || n.rfind(old, 0) == 0) {
      std::error_code ec;
      fs::remove_all(e.path(), ec);
    }
  }
}

void fsync_tree(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) fsync_path(e.path(), e.is_directory());
  fsync_path(dir, true);
}

void commit_dir(const std::string& staging, const std::string& final_dir) {
  const fs::path f(final_dir);
  const fs::path parent = f.parent_path().empty() ? fs::path(".") : f.parent_path();
  std::error_code ec;
  fs::path aside;
  if (fs::exists(f)) {
    aside = parent / ("." + f.filename().string() + ".old." + std::to_string(::getpid()));
    fs::remove_all(aside, ec);
    if (::rename(f.c_str(), aside.c_str()) != 0)
      throw Error("checkpoint: cannot move the previous " + final_dir + " aside to " + aside.string() + ": " +
                  std::strerror(errno));
  }
  if (::rename(staging.c_str(), f.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    if (!aside.empty()) (void)::rename(aside.c_str(), f.c_str());  // put the previous one back
    throw Error("checkpoint: cannot rename " + staging + " to " + final_dir + ": " + why);
  }
  fsync_path(parent, true);
  if (!aside.empty()) fs::remove_all(aside, ec);
}

void write_latest(const std::string& output_dir, const std::string& name) {
  io_detail::write_file_atomic((fs::path(output_dir) / "latest").string(), name + "\n");
}

std::vector<std::string> prune_checkpoints(const std::string& output_dir, int64_t keep_last, const std::string& keep) {
  std::vector<std::string> removed;
  if (keep_last <= 0 || !fs::is_directory(output_dir)) return removed;
  static const std::regex re("checkpoint-step-([0-9]+)");
  std::vector<std::pair<long long, fs::path>> found;
  for (const auto& e : fs::directory_iterator(output_dir)) {
    std::smatch m;
    const std::string n = e.path().filename().string();
    if (e.is_directory() && std::regex_match(n, m, re) && fs::exists(e.path() / "trainer_state.json"))
      found.emplace_back(std::stoll(m[1].str()), e.path());
  }
  std::sort(found.begin(), found.end());
  const fs::path keep_p = fs::path(keep).lexically_normal();
  int64_t excess = static_cast<int64_t>(found.size()) - keep_last;
  for (const auto& [step, p] : found) {
    if (excess <= 0) break;
    std::error_code ec;
    if (p.lexically_normal() == keep_p || fs::equivalent(p, keep_p, ec)) continue;
    fs::remove_all(p, ec);
    if (ec) throw Error("checkpoint: cannot remove old checkpoint " + p.string() + " (--keep-last): " + ec.message());
    removed.push_back(p.string());
    --excess;
  }
  return removed;
}

std::string resolve_resume_dir(const std::string& dir) {
  const fs::path d(dir);
  if (fs::exists(d / "trainer_state.json")) return d.string();
  const fs::path latest = d / "latest";
  if (fs::exists(latest)) {
    std::ifstream in(latest);
    std::string name;
    std::getline(in, name);
    check(!name.empty(), "resume: " + latest.string() + " is empty");
    const fs::path c = d / name;
    check(fs::exists(c / "trainer_state.json"),
          "resume: " + latest.string() + " names " + name + ", but " + (c / "trainer_state.json").string() + " does not exist");
    return c.string();
  }
  throw Error("resume: " + dir + " is not a checkpoint (no trainer_state.json) and holds no 'latest' file naming one" +
              (fs::exists(d) ? "" : " (the directory does not exist)"));
}

std::string find_resume_checkpoint(const std::string& output_dir) {
  std::error_code ec;
  const fs::path d(output_dir);
  if (output_dir.empty() || !fs::is_directory(d, ec)) return "";
  {
    std::ifstream in(d / "latest");
    std::string name;
    if (in && std::getline(in, name) && !name.empty() && name.find('/') == std::string::npos &&
        fs::exists(d / name / "trainer_state.json", ec))
      return (d / name).string();
  }
  const std::string prefix = "checkpoint-step-";
  int64_t best = -1;
  fs::path best_dir;
  for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(prefix, 0) != 0 || n.size() == prefix.size()) continue;
    const std::string digits = n.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) continue;
    const int64_t step = std::stoll(digits);
    std::error_code e2;
    if (step > best && fs::exists(it->path() / "trainer_state.json", e2)) {
      best = step;
      best_dir = it->path();
    }
  }
  return best < 0 ? "" : best_dir.string();
}

std::string resolve_resume_option(const std::string& resume, const std::string& output_dir) {
  return resume == "auto" ? find_resume_checkpoint(output_dir) : resume;
}

}  // namespace twinkle
