// Reads the PyTorch float64 reference cases written by tests/reference/kernels_ref.py (shared by
// torch_ref_kernels.cpp and kernel_conformance.cpp). Header-only, test code.
//
// RefEnv: with KERNELS_REF_DIR set (the CTest fixture kernels_ref_data wrote it) the cases are read from
// there; run standalone, the binary runs /usr/bin/python3 tests/reference/kernels_ref.py once into a
// temporary directory and removes it at exit.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace kernels_ref {

namespace fs = std::filesystem;

inline std::string g_dir;

class RefEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    if (const char* d = std::getenv("KERNELS_REF_DIR"); d && *d) {
      g_dir = d;
    } else {
      g_dir = (fs::temp_directory_path() / ("twinkle_kernels_ref_" + std::to_string(::getpid()))).string();
      const char* src = std::getenv("TWINKLE_SOURCE_DIR");
      const std::string root = src && *src ? src : TWINKLE_SOURCE_DIR;
      const std::string cmd =
          "/usr/bin/python3 " + root + "/tests/reference/kernels_ref.py --out " + g_dir;
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      owned_ = true;
    }
    ASSERT_TRUE(fs::exists(fs::path(g_dir) / "DONE")) << "reference data missing in " << g_dir;
  }
  void TearDown() override {
    if (owned_) fs::remove_all(g_dir);
  }

 private:
  bool owned_ = false;
};

struct Case {
  nlohmann::json meta;
  fs::path dir;
  explicit Case(const std::string& name) : dir(fs::path(g_dir) / name) {
    std::ifstream f(dir / "meta.json");
    if (!f) throw std::runtime_error("cannot open " + (dir / "meta.json").string());
    meta = nlohmann::json::parse(f);
  }
  template <typename T>
  std::vector<T> get(const std::string& name) const {
    const auto& t = meta.at("tensors").at(name);
    const std::string dt = t.at("dtype");
    const size_t want = dt == "f64" ? 8 : 4;
    if (want != sizeof(T)) throw std::runtime_error(name + ": dtype " + dt + " does not match the requested type");
    size_t n = 1;
    for (auto d : t.at("shape")) n *= d.get<size_t>();
    std::vector<T> v(n);
    std::ifstream f(dir / (name + ".bin"), std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
    if (static_cast<size_t>(f.gcount()) != n * sizeof(T)) throw std::runtime_error(name + ".bin: short read");
    return v;
  }
  std::vector<float> f(const std::string& n) const { return get<float>(n); }
  std::vector<double> d(const std::string& n) const { return get<double>(n); }
  std::vector<int32_t> i(const std::string& n) const { return get<int32_t>(n); }
  double p(const std::string& n) const { return meta.at("params").at(n).get<double>(); }
  int64_t pi(const std::string& n) const { return meta.at("params").at(n).get<int64_t>(); }
};

}  // namespace kernels_ref
