#include "twinkle/train/mfu.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/kernels/registry.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/gemm_bf16.h"

namespace twinkle {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double qwen3_flops_per_token(const ModelConfig& c, int64_t num_parameters, double S) {
  double n = static_cast<double>(num_parameters);
  if (!c.tie_word_embeddings) n -= static_cast<double>(c.vocab_size * c.hidden_size);  // lookup, not a matmul
  const double attn = 6.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim) * S;
  return 6.0 * n + attn;
}

double measure_core_flops(bool bf16) {
  const int64_t n = 384;
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(static_cast<size_t>(n * n), 0.25f),
      c(static_cast<size_t>(n * n));
  std::vector<uint16_t> ab(a.size(), 0x3f00), bb(b.size(), 0x3e80);
  auto gemm = [&] {
    if (bf16)
      kernels::cpu::bgemm(false, false, n, n, n, ab.data(), n, bb.data(), n, 0.0f, c.data(), n);
    else
      kernels::cpu::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  gemm();
  int iters = 0;
  auto t0 = Clock::now();
  double el = 0;
  while (el < 0.15) {
    gemm();
    ++iters;
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  omp_set_num_threads(saved);
  return 2.0 * n * n * n * iters / el;
}

std::string peak_file_path() {
  if (const char* home = std::getenv("TWINKLE_HOME")) return (fs::path(home) / "peak.json").string();
  const char* h = std::getenv("HOME");
  return (fs::path(h ? h : "/tmp") / ".cache/twinkle/peak.json").string();
}

double device_share(int64_t mine, const std::vector<int64_t>& keys, double flops) {
  const auto n = std::count(keys.begin(), keys.end(), mine);
  check(n > 0, "device_share: this rank's device key is not among the job's");
  return flops / static_cast<double>(n);
}

namespace {

// job_peak_flops on an accelerator: each rank's datasheet peak divided among the ranks on the same
// (host, PCI bus id) - the physical device: with a CUDA_VISIBLE_DEVICES of its own every rank is ordinal 0 -,
// summed.
double accelerator_job_peak(dist::ProcessGroup& world, bool bf16, const std::string& device) {
  double env = 0;
  if (world.rank() == 0)
    if (const char* e = std::getenv("TWINKLE_PEAK_GFLOPS")) env = std::max(std::atof(e), 0.0) * 1e9;
  if (world.size() > 1) world.all_reduce_f64(&env, 1, dist::ReduceOp::Sum);
  if (env > 0) return env;
  const kernels::AcceleratorPeak a = kernels::accelerator_peak(device, bf16);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const auto key = static_cast<int64_t>(
      std::hash<std::string>{}(std::string(host) + "|" + device + ":" +
                               (a.pci_bus_id.empty() ? std::to_string(a.ordinal) : a.pci_bus_id)) &
      0x7fffffffffffffffull);
  std::vector<int64_t> keys(static_cast<size_t>(world.size()), key);
  if (world.size() > 1) world.all_gather(&key, keys.data(), 1, DType::I64);
  double sums[2] = {device_share(key, keys, a.flops), a.flops > 0 ? 0.0 : 1.0};  // peak, ranks without one
  if (world.size() > 1) world.all_reduce_f64(sums, 2, dist::ReduceOp::Sum);
  if (sums[1] > 0) {
    if (world.rank() == 0)
      get_logger().warning("MFU: no datasheet peak for device '" + device + "' (" +
                           (a.name.empty() ? std::string("not initialised") : a.name) + " on rank 0; " +
                           std::to_string(static_cast<int64_t>(sums[1])) +
                           " rank(s) without one): MFU is reported as 0; set TWINKLE_PEAK_GFLOPS to the job's peak");
    return 0;
  }
  return sums[0];
}

}  // namespace

double job_peak_flops(dist::ProcessGroup& world, bool bf16, const std::string& device) {
  if (device == "cuda") return accelerator_job_peak(world, bf16, device);
  const int64_t hw = std::max<unsigned>(1u, std::thread::hardware_concurrency());
  const int64_t used = std::min<int64_t>(hw, static_cast<int64_t>(world.size()) * omp_get_max_threads());
  // Rank 0 alone reads TWINKLE_PEAK_GFLOPS and the peak file and every rank follows its answer:
  // an environment or a file present on one node only must not make some ranks measure (a world
  // barrier and all-reduce) while the others go on to their first step. One fp64 all-reduce
  // (only rank 0's values non-zero) stands for the broadcast: [0] the job's peak from the
  // environment, [1] the per-core rate from the peak file.
  double known[2] = {0, 0};
  if (world.rank() == 0) {
    if (const char* e = std::getenv("TWINKLE_PEAK_GFLOPS")) known[0] = std::max(std::atof(e), 0.0) * 1e9;
    const std::string file = peak_file_path();
    if (known[0] == 0 && fs::exists(file)) {
      try {
        std::ifstream in(file);
        auto j = nlohmann::json::parse(in);
        // a peak file written before bf16 existed has no core_bf16_gflops: measure that one
        const char* key = bf16 ? "core_bf16_gflops" : "core_gflops";
        if (j.contains(key)) known[1] = std::max(j.at(key).get<double>(), 0.0) * 1e9;
      } catch (const std::exception& ex) {
        get_logger().warning("MFU peak file " + file + " is unreadable (" + ex.what() +
                             "); measuring the peak instead (rerun `twinkle info` to rewrite it)");
        known[1] = 0;
      }
    }
  }
  if (world.size() > 1) world.all_reduce_f64(known, 2, dist::ReduceOp::Sum);
  if (known[0] > 0) return known[0];
  if (known[1] > 0) return known[1] * static_cast<double>(used);
  double core = 0;
  world.barrier();  // the other ranks idle while rank 0 measures
  if (world.rank() == 0) core = measure_core_flops(bf16);
  if (world.size() > 1) world.all_reduce_f64(&core, 1, dist::ReduceOp::Sum);
  return core * static_cast<double>(used);
}

}  // namespace twinkle
