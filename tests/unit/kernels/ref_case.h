// Reads PyTorch float64 reference cases written by a tests/reference script (kernels_ref.py for
// torch_ref_kernels.cpp and kernel_conformance.cpp, moe_kernels_ref.py for torch_ref_moe.cpp):
// one folder per case with meta.json (params, tensor dtypes and shapes) and <tensor>.bin, and a
// DONE marker the script writes last. Header-only, test code.
//
// RefEnv(env_var, script): with env_var set (the CTest fixture that ran the script wrote there)
// the cases are read from that folder; run standalone, the binary runs TWINKLE_REF_PYTHON (the project
// environment's python, tests/CMakeLists.txt) tests/reference/<script> --out DIR once into a temporary folder and removes it at exit.
#pragma once
#ifndef TWINKLE_REF_PYTHON
#define TWINKLE_REF_PYTHON "python3"
#endif
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kernels_ref {

namespace fs = std::filesystem;

inline std::string g_dir;  // the folder of the cases (RefEnv::SetUp)

class RefEnv : public ::testing::Environment {
 public:
  /// env_var: the variable naming a folder the script already filled; script: its file name in
  /// tests/reference.
  RefEnv(std::string env_var, std::string script) : env_var_(std::move(env_var)), script_(std::move(script)) {}
  void SetUp() override {
    if (const char* d = std::getenv(env_var_.c_str()); d && *d) {
      g_dir = d;
    } else {
      const std::string stem = fs::path(script_).stem().string();
      g_dir = (fs::temp_directory_path() / ("twinkle_" + stem + "_" + std::to_string(::getpid()))).string();
      const char* src = std::getenv("TWINKLE_SOURCE_DIR");
      const std::string root = src && *src ? src : TWINKLE_SOURCE_DIR;
      const std::string cmd = std::string(TWINKLE_REF_PYTHON) + " " + root + "/tests/reference/" + script_ + " --out " + g_dir;
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      owned_ = true;
    }
    ASSERT_TRUE(fs::exists(fs::path(g_dir) / "DONE")) << "reference data missing in " << g_dir;
  }
  void TearDown() override {
    if (owned_) fs::remove_all(g_dir);
  }

 private:
  std::string env_var_, script_;
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

/// max |got - ref| <= tol * max(max|ref|, floor) over the n = ref.size() elements; prints the
/// relative error achieved (a NaN counts as the worst element).
inline void expect_close(const float* got, const std::vector<double>& ref, double tol, const std::string& what,
                         double floor = 1e-30) {
  double mx = floor, err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    mx = std::max(mx, std::fabs(ref[i]));
    const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(e <= err)) err = e, worst = i;  // also catches NaN
  }
  const double rel = err / mx;
  std::printf("  %-34s max|ref| %.3e  max err %.3e  rel %.2e (tol %.0e)\n", what.c_str(), mx, err, rel, tol);
  EXPECT_LE(rel, tol) << what << ": worst element " << worst << " got " << got[worst] << " ref " << ref[worst];
}
inline void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  expect_close(got.data(), ref, tol, what);
}

}  // namespace kernels_ref
