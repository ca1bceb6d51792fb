// Safetensors writer.
#include <algorithm>
#include <bit>
#include <set>

#include <nlohmann/json.hpp>

#include "io_util.h"
#include "twinkle/io/safetensors.h"

namespace twinkle {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

size_t TensorSource::nbytes() const {
  size_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

void save_safetensors_streamed(const std::string& path, const std::vector<TensorSource>& tensors,
                               const std::map<std::string, std::string>& metadata, size_t buffer_bytes) {
  using io_detail::quote;
  using ojson = nlohmann::ordered_json;
  if (buffer_bytes == 0) throw Error(path + ": save_safetensors_streamed: buffer_bytes must be >= 1");
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  uint64_t at = 0;
  size_t largest_fill = 0;
  for (const auto& t : tensors) {
    if (t.name.empty()) throw Error(path + ": cannot save a tensor with an empty name");
    if (t.name == "__metadata__") throw Error(path + ": '__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(t.name).second) throw Error(path + ": duplicate tensor name " + quote(t.name));
    for (auto d : t.shape)
      if (d < 0) throw Error(path + ": tensor " + quote(t.name) + " has a negative dimension " + shape_str(t.shape));
    if (!t.data && !t.fill && t.nbytes() > 0) throw Error(path + ": tensor " + quote(t.name) + " has no data source");
    const uint64_t nb = t.nbytes();
    if (!t.data) largest_fill = std::max<size_t>(largest_fill, static_cast<size_t>(nb));
    ojson shape = ojson::array();
    for (auto d : t.shape) shape.push_back(d);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", std::move(shape)}, {"data_offsets", {at, at + nb}}};
    at += nb;
  }
  std::string hs;
  try {
    hs = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": a tensor name or metadata string is not valid UTF-8: " + e.what());
  }
  hs.append((8 - hs.size() % 8) % 8, ' ');
  unsigned char len[8];
  uint64_t n = hs.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  std::vector<unsigned char> buf(std::min(buffer_bytes, largest_fill));
  io_detail::write_atomic(path, [&](io_detail::FileSink& s) {
    s.write(len, 8);
    s.write(hs.data(), hs.size());
    for (const auto& t : tensors) {
      const size_t nb = t.nbytes();
      if (nb == 0) continue;
      if (t.data) {
        s.write(t.data, nb);
        continue;
      }
      for (size_t off = 0; off < nb; off += buf.size()) {
        const size_t k = std::min(buf.size(), nb - off);
        t.fill(buf.data(), off, k);
        s.write(buf.data(), k);
      }
    }
  });
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  using io_detail::quote;
  std::vector<Tensor> contiguous;
  contiguous.reserve(tensors.size());
  std::vector<TensorSource> src;
  src.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error(path + ": tensor " + quote(name) + " is undefined");
    if (t.device() != Device::CPU)
      throw Error(path + ": tensor " + quote(name) + " is on " + device_name(t.device()) + "; copy it to cpu first");
    contiguous.push_back(t.is_contiguous() ? t : t.clone());
    src.push_back({name, t.dtype(), t.shape(), contiguous.back().raw(), {}});
  }
  save_safetensors_streamed(path, src, metadata);
}

}  // namespace twinkle
