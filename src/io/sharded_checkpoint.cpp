// Sharded (distributed) checkpoints: the index and the slice reader (twinkle/io/sharded_checkpoint.h).
#include "twinkle/io/sharded_checkpoint.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "io_util.h"

namespace twinkle {

using io_detail::quote;
using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "twinkle-sharded-checkpoint";
constexpr int kVersion = 1;

std::string join(const std::string& dir, const std::string& f) {
  if (dir.empty()) return f;
  return dir.back() == '/' ? dir + f : dir + "/" + f;
}

std::string box_str(const std::vector<int64_t>& off, const std::vector<int64_t>& len) {
  std::string s = "[";
  for (size_t i = 0; i < off.size(); ++i)
    s += (i ? ", " : "") + std::to_string(off[i]) + ":" + std::to_string(off[i] + len[i]);
  return s + "]";
}

// madvise(MADV_DONTNEED) of the whole pages inside [p, p + n) of a read-only file mapping: later
// reads fault them in again from the file (madvise(2)).
void release_pages(const void* p, size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (b > a) (void)::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

bool overlap(const ShardedChunk& a, const ShardedChunk& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (a.offsets[d] + a.lengths[d] <= b.offsets[d] || b.offsets[d] + b.lengths[d] <= a.offsets[d]) return false;
  return true;
}

}  // namespace

std::string sharded_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

int64_t ShardedChunk::numel() const {
  int64_t n = 1;
  for (auto l : lengths) n *= l;
  return n;
}

void ShardedIndex::validate(const std::string& what) const {
  std::unordered_map<std::string, int> seen;
  for (const auto& t : tensors) {
    const std::string who = what + ": tensor " + quote(t.name);
    if (!seen.emplace(t.name, 1).second) throw Error(who + " is listed twice");
    int64_t numel = 1;
    for (auto d : t.shape) {
      if (d < 0) throw Error(who + " has a negative dimension in shape " + shape_str(t.shape));
      numel *= d;
    }
    int64_t covered = 0;
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const ShardedChunk& c = t.chunks[i];
      const std::string cw = who + ": chunk " + std::to_string(i) + " (" + c.file + " " + quote(c.key) + ")";
      if (c.offsets.size() != t.shape.size() || c.lengths.size() != t.shape.size())
        throw Error(cw + " has " + std::to_string(c.offsets.size()) + " offsets and " + std::to_string(c.lengths.size()) +
                    " lengths for a tensor of rank " + std::to_string(t.shape.size()));
      if (c.file.empty() || c.file.find('/') != std::string::npos || c.file.find("..") != std::string::npos)
        throw Error(cw + ": file name must be a plain name inside the checkpoint directory");
      for (size_t d = 0; d < t.shape.size(); ++d)
        if (c.offsets[d] < 0 || c.lengths[d] < 0 || c.offsets[d] > t.shape[d] - c.lengths[d])
          throw Error(cw + " box " + box_str(c.offsets, c.lengths) + " lies outside the shape " + shape_str(t.shape));
      covered += c.numel();
      for (size_t j = 0; j < i; ++j)
        if (c.numel() > 0 && t.chunks[j].numel() > 0 && overlap(c, t.chunks[j]))
          throw Error(cw + " box " + box_str(c.offsets, c.lengths) + " overlaps chunk " + std::to_string(j) + " box " +
                      box_str(t.chunks[j].offsets, t.chunks[j].lengths));
    }
    // Boxes inside the shape and pairwise disjoint: they cover every element iff their sizes add up.
    if (covered != numel)
      throw Error(who + ": the chunks cover " + std::to_string(covered) + " of its " + std::to_string(numel) +
                  " elements (shape " + shape_str(t.shape) + "): a slice was not saved");
  }
}

ShardedIndex ShardedIndex::read(const std::string& path) {
  std::ifstream in(path);
  if (!in.good())
    throw Error(path + " is missing: the save did not complete (the index of a sharded checkpoint is written last)");
  ojson j;
  try {
    j = ojson::parse(in);
  } catch (const std::exception& e) {
    throw Error(path + " is not valid JSON: " + e.what());
  }
  auto need = [&](const ojson& o, const char* key, const std::string& where) -> const ojson& {
    if (!o.is_object() || !o.contains(key)) throw Error(path + ": " + where + "has no field '" + key + "'");
    return o[key];
  };
  ShardedIndex ix;
  try {
    if (need(j, "format", "") != kFormat)
      throw Error(path + " is not a twinkle sharded checkpoint index (field 'format' is " + j["format"].dump() + ")");
    const int v = need(j, "version", "").get<int>();
    if (v != kVersion)
      throw Error(path + " has version " + std::to_string(v) + "; this build reads version " + std::to_string(kVersion));
    ix.world_size = need(j, "world_size", "").get<int>();
    const ojson& ts = need(j, "tensors", "");
    if (!ts.is_array()) throw Error(path + ": field 'tensors' is not an array");
    for (const auto& t : ts) {
      ShardedTensorMeta m;
      m.name = need(t, "name", "a tensor ").get<std::string>();
      const std::string where = "tensor " + quote(m.name) + " ";
      try {
        m.dtype = dtype_from_name(need(t, "dtype", where).get<std::string>());
      } catch (const Error& e) {
        throw Error(path + ": " + where + "has an unknown dtype " + t["dtype"].dump());
      }
      m.shape = need(t, "shape", where).get<std::vector<int64_t>>();
      for (const auto& c : need(t, "chunks", where)) {
        ShardedChunk ch;
        ch.file = need(c, "file", where + "chunk ").get<std::string>();
        ch.key = need(c, "key", where + "chunk ").get<std::string>();
        ch.offsets = need(c, "offsets", where + "chunk ").get<std::vector<int64_t>>();
        ch.lengths = need(c, "lengths", where + "chunk ").get<std::vector<int64_t>>();
        m.chunks.push_back(std::move(ch));
      }
      ix.tensors.push_back(std::move(m));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": a field has the wrong type: " + e.what());
  }
  ix.validate(path);
  return ix;
}

std::string ShardedIndex::to_json() const {
  ojson j = ojson::object();
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["world_size"] = world_size;
  ojson files = ojson::array();
  for (int r = 0; r < world_size; ++r) files.push_back(sharded_file_name(r, world_size));
  j["files"] = files;
  ojson ts = ojson::array();
  for (const auto& t : tensors) {
    ojson chunks = ojson::array();
    for (const auto& c : t.chunks)
      chunks.push_back({{"file", c.file}, {"key", c.key}, {"offsets", c.offsets}, {"lengths", c.lengths}});
    ts.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"chunks", std::move(chunks)}});
  }
  j["tensors"] = std::move(ts);
  return j.dump(1) + "\n";
}

struct ShardedCheckpointReader::Impl {
  std::string dir, index_path;
  ShardedIndex index;
  std::unordered_map<std::string, size_t> by_name;
  std::vector<TensorInfo> infos;
  std::unordered_map<std::string, SafetensorsFile> files;  // opened on first use
  int64_t bytes_read = 0;

  const SafetensorsFile& file(const std::string& name) {
    auto it = files.find(name);
    if (it != files.end()) return it->second;
    const std::string p = join(dir, name);
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0)
      throw Error(p + " is missing (named by " + index_path + "): the sharded checkpoint is incomplete");
    return files.emplace(name, SafetensorsFile::open(p)).first->second;
  }
};

ShardedCheckpointReader ShardedCheckpointReader::open(const std::string& dir, const std::string& prefix) {
  ShardedCheckpointReader r;
  auto im = std::make_shared<Impl>();
  im->dir = dir;
  im->index_path = join(dir, kShardedIndexName);
  im->index = ShardedIndex::read(im->index_path);
  for (size_t i = 0; i < im->index.tensors.size(); ++i) {
    const auto& t = im->index.tensors[i];
    TensorInfo info;
    info.dtype = t.dtype;
    info.shape = t.shape;
    info.nbytes = static_cast<size_t>(info.numel()) * dtype_size(t.dtype);
    im->infos.push_back(info);
    if (t.name.rfind(prefix, 0) == 0) im->by_name.emplace(t.name.substr(prefix.size()), i);
  }
  r.impl_ = std::move(im);
  r.prefix_ = prefix;
  return r;
}

const std::string& ShardedCheckpointReader::dir() const { return impl_->dir; }

std::vector<std::string> ShardedCheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& t : impl_->index.tensors)
    if (t.name.rfind(prefix_, 0) == 0) out.push_back(t.name.substr(prefix_.size()));
  return out;
}

bool ShardedCheckpointReader::contains(const std::string& name) const { return impl_->by_name.count(name) > 0; }

const ShardedTensorMeta& ShardedCheckpointReader::meta(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) throw Error(impl_->index_path + " has no tensor " + quote(prefix_ + name));
  return impl_->index.tensors[it->second];
}

const TensorInfo& ShardedCheckpointReader::info(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) throw Error(impl_->index_path + " has no tensor " + quote(prefix_ + name));
  return impl_->infos[it->second];
}

int64_t ShardedCheckpointReader::bytes_read() const { return impl_ ? impl_->bytes_read : 0; }

void ShardedCheckpointReader::read_f32(const std::string& name, const std::vector<int64_t>& offsets,
                                       const std::vector<int64_t>& lengths, float* dst) const {
  const ShardedTensorMeta& t = meta(name);
  const size_t nd = t.shape.size();
  const std::string who = impl_->index_path + ": tensor " + quote(t.name);
  if (offsets.size() != nd || lengths.size() != nd)
    throw Error(who + ": read_f32 with " + std::to_string(offsets.size()) + " offsets for a tensor of rank " +
                std::to_string(nd));
  int64_t want = 1;
  for (size_t d = 0; d < nd; ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] > t.shape[d] - lengths[d])
      throw Error(who + ": box " + box_str(offsets, lengths) + " lies outside the shape " + shape_str(t.shape));
    want *= lengths[d];
  }
  if (want == 0) return;
  int64_t got = 0;
  for (const ShardedChunk& c : t.chunks) {
    // the intersection of the chunk's box with the requested one
    std::vector<int64_t> lo(nd), hi(nd);
    bool empty = false;
    for (size_t d = 0; d < nd; ++d) {
      lo[d] = std::max(offsets[d], c.offsets[d]);
      hi[d] = std::min(offsets[d] + lengths[d], c.offsets[d] + c.lengths[d]);
      if (hi[d] <= lo[d]) empty = true;
    }
    if (empty) continue;
    const SafetensorsFile& f = impl_->file(c.file);
    const std::string cw = f.path() + ": tensor " + quote(c.key);
    if (!f.contains(c.key)) throw Error(f.path() + " has no tensor " + quote(c.key) + " (named by " + impl_->index_path + ")");
    const TensorInfo& ci = f.info(c.key);
    if (ci.shape != Shape(c.lengths.begin(), c.lengths.end()) || ci.dtype != t.dtype)
      throw Error(cw + " is " + dtype_name(ci.dtype) + " " + shape_str(ci.shape) + ", the index says " +
                  dtype_name(t.dtype) + " " + shape_str(Shape(c.lengths.begin(), c.lengths.end())));
    const auto* src = static_cast<const unsigned char*>(f.raw_data(c.key));
    const size_t es = dtype_size(t.dtype);
    // Rows of the innermost dimension: iterate over the outer indices of the intersection.
    const int64_t run = nd ? hi[nd - 1] - lo[nd - 1] : 1;
    std::vector<int64_t> idx(lo);
    while (true) {
      int64_t so = 0, dof = 0;  // element offsets in the chunk and in dst
      for (size_t d = 0; d < nd; ++d) {
        so = so * c.lengths[d] + (idx[d] - c.offsets[d]);
        dof = dof * lengths[d] + (idx[d] - offsets[d]);
      }
      io_detail::convert_to_f32(src + static_cast<size_t>(so) * es, t.dtype, dst + dof, static_cast<size_t>(run));
      impl_->bytes_read += run * static_cast<int64_t>(es);
      got += run;
      // next outer index (the innermost dimension is the run)
      int64_t d = static_cast<int64_t>(nd) - 2;
      for (; d >= 0; --d) {
        if (++idx[static_cast<size_t>(d)] < hi[static_cast<size_t>(d)]) break;
        idx[static_cast<size_t>(d)] = lo[static_cast<size_t>(d)];
      }
      if (d < 0) break;
    }
    // The chunk's pages were only read once: hand them back (they stay in the page cache), so a
    // reader's resident set stays its own slices and not every mapped byte it touched.
    release_pages(src, static_cast<size_t>(c.numel()) * es);
  }
  // The index was validated (disjoint chunks covering the tensor), so this holds unless a file changed under us.
  if (got != want)
    throw Error(who + ": the chunks hold " + std::to_string(got) + " of the " + std::to_string(want) +
                " elements of box " + box_str(offsets, lengths));
}

Tensor ShardedCheckpointReader::load_f32(const std::string& name) const {
  const TensorInfo& i = info(name);
  Tensor out = Tensor::empty(i.shape, DType::F32);
  read_f32(name, std::vector<int64_t>(i.shape.size(), 0), std::vector<int64_t>(i.shape.begin(), i.shape.end()), out.f32());
  return out;
}

Tensor ShardedCheckpointReader::load_f32_narrow(const std::string& name, int64_t dim, int64_t start, int64_t len) const {
  const TensorInfo& i = info(name);
  const int64_t nd = static_cast<int64_t>(i.shape.size());
  const int64_t d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd)
    throw Error(impl_->index_path + ": tensor " + quote(prefix_ + name) + ": load_f32_narrow dim " + std::to_string(dim) +
                " out of range for shape " + shape_str(i.shape));
  std::vector<int64_t> off(static_cast<size_t>(nd), 0), len_v(i.shape.begin(), i.shape.end());
  off[static_cast<size_t>(d)] = start;
  len_v[static_cast<size_t>(d)] = len;
  Tensor out = Tensor::empty(Shape(len_v.begin(), len_v.end()), DType::F32);
  read_f32(name, off, len_v, out.f32());
  return out;
}

}  // namespace twinkle
