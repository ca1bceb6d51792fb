// io_xcheck_tool — the C++ side of tests/reference/io_safetensors_ref.py, which checks the
// safetensors reader/writer against an independent Python (struct + json + numpy + torch)
// implementation of the format. Not a unit test by itself (see tests/io.cmake).
//
//   io_xcheck_tool dump <file>              JSON description of every tensor (raw bytes and
//                                           load_f32 bytes as hex) on stdout
//   io_xcheck_tool dump-dir <dir>           same through CheckpointReader
//   io_xcheck_tool narrow <file> <name> <dim> <start> <len>   hex of load_f32_narrow
//   io_xcheck_tool write <file>             the deterministic tensors of gen_tensors()
//   io_xcheck_tool write-dir <dir> <max>    same through save_checkpoint_dir
// Errors: message on stderr, exit 2.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "twinkle/io/safetensors.h"

using namespace twinkle;
using json = nlohmann::json;

namespace {

std::string hex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16 || t == DType::F64; }

template <typename Reader>
json describe(const Reader& r, const std::string& name) {
  const TensorInfo& ti = r.info(name);
  Tensor raw = r.load(name);
  json t = {{"name", name}, {"dtype", dtype_name(ti.dtype)}, {"shape", ti.shape}, {"raw", hex(raw.raw(), raw.nbytes())}};
  if (is_float(ti.dtype)) {
    Tensor f = r.load_f32(name);
    t["f32"] = hex(f.raw(), f.nbytes());
  }
  return t;
}

// Deterministic tensors; the same formulas are evaluated in io_safetensors_ref.py. All values are
// exactly representable in their dtype.
std::vector<std::pair<std::string, Tensor>> gen_tensors() {
  struct Spec {
    const char* name;
    DType dt;
    Shape shape;
  };
  const std::vector<Spec> specs = {
      {"a.f32", DType::F32, {3, 5}}, {"b.bf16", DType::BF16, {4, 7}}, {"c.f16", DType::F16, {11}},
      {"d.i32", DType::I32, {2, 3}}, {"e.i64", DType::I64, {5}},      {"f.scalar", DType::F32, {}},
      {"g.empty", DType::F16, {0, 4}},
  };
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto& s = specs[k];
    Tensor t = Tensor::empty(s.shape, s.dt);
    const int64_t n = t.numel(), K = static_cast<int64_t>(k);
    for (int64_t i = 0; i < n; ++i) {
      switch (s.dt) {
        case DType::F32: t.f32()[i] = static_cast<float>(((i * 7 + K * 13) % 101 - 50) / 8.0); break;
        case DType::BF16:
          t.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(((i * 5 + K) % 61 - 30) / 4.0));
          break;
        case DType::F16:
          t.data<uint16_t>()[i] = f32_to_f16(static_cast<float>(((i * 3 + K) % 201 - 100) / 16.0));
          break;
        case DType::I32: t.data<int32_t>()[i] = static_cast<int32_t>(i * i - 1000 * K); break;
        case DType::I64: t.data<int64_t>()[i] = i * 1'000'000'000'007LL - K; break;
        case DType::F64: static_cast<double*>(t.raw())[i] = static_cast<double>(i) / 3.0 - K; break;
      }
    }
    out.emplace_back(s.name, t);
  }
  return out;
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: io_xcheck_tool dump|dump-dir|narrow|write|write-dir ...\n";
    return 2;
  }
  std::string cmd = argv[1], path = argv[2];
  if (cmd == "dump") {
    auto f = SafetensorsFile::open(path);
    json out = {{"metadata", f.metadata()}, {"order", f.names()}, {"tensors", json::array()}};
    for (const auto& n : f.names()) out["tensors"].push_back(describe(f, n));
    std::cout << out.dump() << "\n";
  } else if (cmd == "dump-dir") {
    auto r = CheckpointReader::open_dir(path);
    json out = {{"has_weights", r.has_weights()}, {"tensors", json::array()}, {"files", json::object()}};
    for (const auto& n : r.names()) {
      out["tensors"].push_back(describe(r, n));
      const std::string& fp = r.file_of(n);
      out["files"][n] = fp.substr(fp.find_last_of('/') + 1);
    }
    std::cout << out.dump() << "\n";
  } else if (cmd == "narrow" && argc == 7) {
    auto f = SafetensorsFile::open(path);
    Tensor t = f.load_f32_narrow(argv[3], std::stoll(argv[4]), std::stoll(argv[5]), std::stoll(argv[6]));
    std::cout << json{{"shape", t.shape()}, {"f32", hex(t.raw(), t.nbytes())}}.dump() << "\n";
  } else if (cmd == "write") {
    save_safetensors(path, gen_tensors(), {{"format", "pt"}, {"writer", "twinkle"}});
  } else if (cmd == "write-dir" && argc == 4) {
    save_checkpoint_dir(path, gen_tensors(), std::stoll(argv[3]));
  } else {
    std::cerr << "io_xcheck_tool: bad command line\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
