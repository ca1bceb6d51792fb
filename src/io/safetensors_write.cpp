// Safetensors writer.
#include <bit>
#include <set>

#include <nlohmann/json.hpp>

#include "io_util.h"
#include "twinkle/io/safetensors.h"

namespace twinkle {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  using io_detail::quote;
  using ojson = nlohmann::ordered_json;
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  std::vector<Tensor> contiguous;
  contiguous.reserve(tensors.size());
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw Error(path + ": cannot save a tensor with an empty name");
    if (name == "__metadata__") throw Error(path + ": '__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(name).second) throw Error(path + ": duplicate tensor name " + quote(name));
    if (!t.defined()) throw Error(path + ": tensor " + quote(name) + " is undefined");
    if (t.device() != Device::CPU)
      throw Error(path + ": tensor " + quote(name) + " is on " + device_name(t.device()) + "; copy it to cpu first");
    contiguous.push_back(t.is_contiguous() ? t : t.clone());
    const uint64_t nb = t.nbytes();
    ojson shape = ojson::array();
    for (auto d : t.shape()) shape.push_back(d);
    header[name] = {{"dtype", dtype_name(t.dtype())}, {"shape", std::move(shape)}, {"data_offsets", {at, at + nb}}};
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
  io_detail::write_atomic(path, [&](io_detail::FileSink& s) {
    s.write(len, 8);
    s.write(hs.data(), hs.size());
    for (const auto& t : contiguous)
      if (t.nbytes()) s.write(t.raw(), t.nbytes());
  });
}

}  // namespace twinkle
