// Hugging Face checkpoint directories: model.safetensors or shards + index.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "io_util.h"
#include "twinkle/io/safetensors.h"

namespace twinkle {

using io_detail::quote;
using json = nlohmann::json;

namespace {
const char* kSingle = "model.safetensors";
const char* kIndex = "model.safetensors.index.json";

bool is_regular(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
std::string join(const std::string& dir, const std::string& f) {
  if (dir.empty()) return f;
  return dir.back() == '/' ? dir + f : dir + "/" + f;
}
}  // namespace

struct CheckpointReader::Impl {
  std::string dir;
  bool has_weights = false;
  std::vector<SafetensorsFile> files;
  struct Entry {
    size_t file;
    const TensorInfo* info;
  };
  std::unordered_map<std::string, Entry> map;
  std::vector<std::string> names;  // sorted

  const Entry& get(const std::string& name) const {
    auto it = map.find(name);
    if (it == map.end()) {
      if (!has_weights)
        throw Error(dir + ": no tensor " + quote(name) + ": the directory has no safetensors weights (" + kSingle +
                    " or " + kIndex + ")");
      throw Error(dir + ": no tensor " + quote(name) + " in the checkpoint");
    }
    return it->second;
  }
};

CheckpointReader CheckpointReader::open_dir(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) throw Error(dir + ": checkpoint directory not found: " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) throw Error(dir + ": not a directory");
  auto impl = std::make_shared<Impl>();
  impl->dir = dir;
  const std::string single = join(dir, kSingle), index = join(dir, kIndex);
  if (is_regular(single)) {
    impl->files.push_back(SafetensorsFile::open(single));
    const auto& f = impl->files.back();
    for (const auto& n : f.names()) impl->map.emplace(n, Impl::Entry{0, &f.info(n)});
    impl->has_weights = true;
  } else if (is_regular(index)) {
    std::ifstream in(index, std::ios::binary);
    if (!in) throw Error(index + ": cannot open: " + std::strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    json j;
    try {
      j = json::parse(ss.str());
    } catch (const json::exception& e) {
      throw Error(index + ": not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw Error(index + ": must be a JSON object, got " + std::string(j.type_name()));
    auto wm = j.find("weight_map");
    if (wm == j.end()) throw Error(index + ": field 'weight_map' is missing");
    if (!wm->is_object()) throw Error(index + ": field 'weight_map' must be an object, got " + std::string(wm->type_name()));
    std::map<std::string, size_t> file_idx;  // shard file name -> index in files
    std::unordered_map<std::string, std::string> wanted;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      const std::string& name = it.key();
      if (!it.value().is_string())
        throw Error(index + ": weight_map entry for tensor " + quote(name) + " must be a file name string, got " +
                    it.value().type_name());
      std::string file = it.value().get<std::string>();
      if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
          file.find('\\') != std::string::npos || file.find('\0') != std::string::npos)
        throw Error(index + ": weight_map entry for tensor " + quote(name) + " names file " + quote(file) +
                    ", which is not a plain file name inside the checkpoint directory");
      if (!file_idx.count(file)) {
        std::string p = join(dir, file);
        if (!is_regular(p))
          throw Error(index + ": shard " + quote(file) + " (listed for tensor " + quote(name) + ") not found in " + dir);
        file_idx.emplace(file, impl->files.size());
        impl->files.push_back(SafetensorsFile::open(p));
      }
      wanted.emplace(name, file);
    }
    for (const auto& [name, file] : wanted) {
      size_t fi = file_idx.at(file);
      const auto& f = impl->files[fi];
      if (!f.contains(name))
        throw Error(index + ": tensor " + quote(name) + " is mapped to " + quote(file) + ", which does not contain it");
      impl->map.emplace(name, Impl::Entry{fi, &f.info(name)});
    }
    // Tensors present in a shard but not listed: transformers loads every key of each shard,
    // so accept them unless the same name also lives in another file.
    for (const auto& [file, fi] : file_idx) {
      const auto& f = impl->files[fi];
      for (const auto& n : f.names()) {
        auto w = wanted.find(n);
        if (w != wanted.end()) {
          if (w->second != file)
            throw Error(index + ": tensor " + quote(n) + " is stored in " + quote(file) + " but the index maps it to " +
                        quote(w->second) + " (duplicate tensor)");
          continue;
        }
        auto [it, fresh] = impl->map.emplace(n, Impl::Entry{fi, &f.info(n)});
        if (!fresh)
          throw Error(index + ": tensor " + quote(n) + " is stored in both " +
                      quote(impl->files[it->second.file].path()) + " and " + quote(f.path()));
      }
    }
    impl->has_weights = true;
  }
  impl->names.reserve(impl->map.size());
  for (const auto& kv : impl->map) impl->names.push_back(kv.first);
  std::sort(impl->names.begin(), impl->names.end());
  CheckpointReader r;
  r.impl_ = std::move(impl);
  return r;
}

namespace {
const CheckpointReader::Impl& need(const std::shared_ptr<const CheckpointReader::Impl>& p) {
  if (!p) throw Error("CheckpointReader: used before open_dir()");
  return *p;
}
}  // namespace

bool CheckpointReader::has_weights() const { return need(impl_).has_weights; }
const std::string& CheckpointReader::dir() const { return need(impl_).dir; }
std::vector<std::string> CheckpointReader::names() const { return need(impl_).names; }
bool CheckpointReader::contains(const std::string& name) const { return need(impl_).map.count(name) != 0; }
const TensorInfo& CheckpointReader::info(const std::string& name) const { return *need(impl_).get(name).info; }
const std::string& CheckpointReader::file_of(const std::string& name) const {
  const auto& im = need(impl_);
  return im.files[im.get(name).file].path();
}
Tensor CheckpointReader::load(const std::string& name) const {
  const auto& im = need(impl_);
  return im.files[im.get(name).file].load(name);
}
Tensor CheckpointReader::load_f32(const std::string& name) const {
  const auto& im = need(impl_);
  return im.files[im.get(name).file].load_f32(name);
}
Tensor CheckpointReader::load_f32_narrow(const std::string& name, int64_t dim, int64_t start, int64_t len) const {
  const auto& im = need(impl_);
  return im.files[im.get(name).file].load_f32_narrow(name, dim, start, len);
}
void CheckpointReader::load_into(const std::string& name, Tensor& dst) const {
  const auto& im = need(impl_);
  im.files[im.get(name).file].load_into(name, dst);
}

// ---- writer --------------------------------------------------------------------------------

namespace {

void mkdirs(const std::string& dir) {
  if (dir.empty()) return;
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty() || cur == "/") continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error(dir + ": cannot create directory " + cur + ": " + std::strerror(errno));
  }
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw Error(dir + ": exists and is not a directory");
}

void remove_if_exists(const std::string& p) {
  if (::unlink(p.c_str()) != 0 && errno != ENOENT)
    throw Error(p + ": cannot remove stale checkpoint file: " + std::strerror(errno));
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i, n);
  return buf;
}

// Stale shards of an earlier save: model-NNNNN-of-NNNNN.safetensors not in `keep`.
bool is_shard_name(const std::string& n) {
  // model-DDDDD-of-DDDDD.safetensors
  static const std::string pre = "model-", mid = "-of-", suf = ".safetensors";
  if (n.size() != pre.size() + 5 + mid.size() + 5 + suf.size()) return false;
  auto digits = [&](size_t at) {
    for (size_t i = at; i < at + 5; ++i)
      if (n[i] < '0' || n[i] > '9') return false;
    return true;
  };
  return n.compare(0, pre.size(), pre) == 0 && digits(6) && n.compare(11, mid.size(), mid) == 0 && digits(15) &&
         n.compare(20, suf.size(), suf) == 0;
}

void remove_stale_shards(const std::string& dir, const std::set<std::string>& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> victims;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (is_shard_name(n) && !keep.count(n)) victims.push_back(n);
  }
  ::closedir(d);
  for (const auto& v : victims) remove_if_exists(join(dir, v));
}

}  // namespace

void save_checkpoint_dir_streamed(const std::string& dir, const std::vector<TensorSource>& tensors,
                                  int64_t max_shard_bytes, size_t buffer_bytes) {
  if (max_shard_bytes <= 0)
    throw Error(dir + ": save_checkpoint_dir: max_shard_bytes must be > 0, got " + std::to_string(max_shard_bytes));
  // Validate everything before touching the directory, so bad input never destroys an old checkpoint.
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name.empty()) throw Error(dir + ": cannot save a tensor with an empty name");
    if (t.name == "__metadata__") throw Error(dir + ": '__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(t.name).second) throw Error(dir + ": duplicate tensor name " + quote(t.name));
    if (!t.data && !t.fill && t.nbytes() > 0) throw Error(dir + ": tensor " + quote(t.name) + " has no data source");
  }
  // Greedy sharding in the given order.
  std::vector<std::vector<size_t>> shards;
  uint64_t total = 0, cur = 0;
  const uint64_t cap = static_cast<uint64_t>(max_shard_bytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t nb = tensors[i].nbytes();
    total += nb;
    if (shards.empty() || (cur > 0 && cur + nb > cap)) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(i);
    cur += nb;
  }
  if (shards.empty()) shards.emplace_back();

  mkdirs(dir);
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  auto subset = [&](const std::vector<size_t>& idx) {
    std::vector<TensorSource> v;
    v.reserve(idx.size());
    for (size_t i : idx) v.push_back(tensors[i]);
    return v;
  };
  if (shards.size() == 1) {
    remove_if_exists(join(dir, kIndex));
    io_detail::fsync_dir(dir);
    save_safetensors_streamed(join(dir, kSingle), subset(shards[0]), meta, buffer_bytes);
    remove_stale_shards(dir, {});
    return;
  }
  // Sharded: nothing may look complete until the index lands.
  remove_if_exists(join(dir, kIndex));
  remove_if_exists(join(dir, kSingle));
  io_detail::fsync_dir(dir);
  json weight_map = json::object();
  std::set<std::string> keep;
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string fname = shard_name(s + 1, shards.size());
    keep.insert(fname);
    save_safetensors_streamed(join(dir, fname), subset(shards[s]), meta, buffer_bytes);
    for (size_t i : shards[s]) weight_map[tensors[i].name] = fname;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(weight_map)}};
  io_detail::write_file_atomic(join(dir, kIndex), index.dump(2) + "\n");
  remove_stale_shards(dir, keep);
}

void save_checkpoint_dir(const std::string& dir, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0)
    throw Error(dir + ": save_checkpoint_dir: max_shard_bytes must be > 0, got " + std::to_string(max_shard_bytes));
  std::vector<Tensor> contiguous;
  contiguous.reserve(tensors.size());
  std::vector<TensorSource> src;
  src.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error(dir + ": tensor " + quote(name) + " is undefined");
    if (t.device() != Device::CPU)
      throw Error(dir + ": tensor " + quote(name) + " is on " + device_name(t.device()) + "; copy it to cpu first");
    contiguous.push_back(t.is_contiguous() ? t : t.clone());
    src.push_back({name, t.dtype(), t.shape(), contiguous.back().raw(), {}});
  }
  save_checkpoint_dir_streamed(dir, src, max_shard_bytes);
}

}  // namespace twinkle
