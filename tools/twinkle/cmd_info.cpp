// `twinkle info`: what this build and machine are, the ISA oneDNN runs on (and whether it has bf16
// instructions), and the measured fp32 and bf16 GEMM peaks that MFU is computed against (saved to $TWINKLE_HOME/peak.json, default ~/.cache/twinkle/peak.json).
#include <CLI/CLI.hpp>
#include <dnnl.h>
#include <mpi.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/gemm_bf16.h"
#ifdef TWINKLE_CUDA_BUILT
#include "twinkle/kernels/cuda/runtime.h"
#endif

namespace {

double sgemm_gflops(int threads, double seconds) {
  const int64_t n = 1024;
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(static_cast<size_t>(n * n), 0.25f),
      c(static_cast<size_t>(n * n));
  omp_set_num_threads(threads);
  twinkle::kernels::cpu::sgemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  double best = 0;
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    auto t0 = std::chrono::steady_clock::now();
    twinkle::kernels::cpu::sgemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / el / 1e9);
  }
  return best;
}

// bf16 x bf16 -> fp32 GEMM (the --bf16 path's kernel, twinkle/kernels/cpu/gemm_bf16.h), same shape.
double bf16_gflops(int threads, double seconds) {
  const int64_t n = 1024;
  std::vector<uint16_t> a(static_cast<size_t>(n * n), 0x3f00), b(static_cast<size_t>(n * n), 0x3e80);
  std::vector<float> c(static_cast<size_t>(n * n));
  omp_set_num_threads(threads);
  twinkle::kernels::cpu::bgemm(false, true, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  double best = 0;
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    auto t0 = std::chrono::steady_clock::now();
    twinkle::kernels::cpu::bgemm(false, true, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / el / 1e9);
  }
  return best;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

int info_main(int argc, char** argv) {
  // No options; parsing them anyway makes --help print this instead of measuring (and
  // rewriting peak.json), and refuses a stray argument by name.
  CLI::App app{"Build and machine facts; measures the fp32 and bf16 GEMM peaks that MFU is computed against and "
               "saves them to $TWINKLE_HOME/peak.json (default ~/.cache/twinkle/peak.json)",
               "twinkle info"};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const dnnl_version_t* v = dnnl_version();
  char mpi_ver[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi_ver, &len);
  std::string mpi(mpi_ver, static_cast<size_t>(len));
  mpi = mpi.substr(0, mpi.find('\n'));
#ifdef TWINKLE_CUDA_BUILT
  std::printf("twinkle build\n  backends      cpu, cuda (sm_%s; cuBLAS loaded at first use) (npu: needs Ascend CANN, not "
              "available)\n",
              TWINKLE_CUDA_ARCHS);
#else
  std::printf("twinkle build\n  backends      cpu (cuda: not built; npu: needs Ascend CANN, not available)\n");
#endif
  std::printf("  GEMM          oneDNN %d.%d.%d (%s)\n", v->major, v->minor, v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
  std::printf("  MPI           %s\n", mpi.c_str());
  const bool native_bf16 = twinkle::kernels::cpu::bf16_gemm_native();
  std::printf("  oneDNN ISA    %s (bf16 GEMMs: %s)\n", twinkle::kernels::cpu::dnnl_isa_name().c_str(),
              native_bf16 ? "native bf16 instructions"
                          : "this CPU has no bf16 instructions: --bf16 runs fp32 GEMMs on bf16-rounded inputs");
  std::printf("machine\n  CPU           %s\n  cores         %u\n  OMP threads   %d (OMP_NUM_THREADS)\n", cpu_model().c_str(),
              cores, omp_get_max_threads());
  nlohmann::json gpus = nlohmann::json::array();
#ifdef TWINKLE_CUDA_BUILT
  {
    std::string why;
    if (twinkle::cuda::visible_device_count(&why) == 0) {
      const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
      std::printf("  CUDA          built, no GPU visible (CUDA_VISIBLE_DEVICES=%s): %s\n", cvd ? cvd : "<unset>",
                  why.c_str());
    }
    for (const auto& d : twinkle::cuda::device_info()) {
      std::printf("  GPU %d         %s, %d SMs, %.1f GiB, sm_%d%d, peak bf16 %s / fp32 %s TFLOP/s (datasheet)\n",
                  d.ordinal, d.name.c_str(), d.sms, d.total_memory / 1073741824.0, d.cc_major, d.cc_minor,
                  d.peak_bf16_tflops > 0 ? std::to_string(static_cast<int>(d.peak_bf16_tflops)).c_str() : "unknown",
                  d.peak_fp32_tflops > 0 ? std::to_string(d.peak_fp32_tflops).substr(0, 4).c_str() : "unknown");
      gpus.push_back({{"name", d.name},
                      {"sms", d.sms},
                      {"memory_bytes", d.total_memory},
                      {"peak_bf16_tflops", d.peak_bf16_tflops},
                      {"peak_fp32_tflops", d.peak_fp32_tflops}});
    }
  }
#else
  std::printf("  CUDA          not built (configure with -DTWINKLE_CUDA=ON where nvcc exists)\n");
#endif
  const double one = sgemm_gflops(1, 0.5);
  const double all = sgemm_gflops(static_cast<int>(cores), 0.5);
  std::printf("measured fp32 sgemm peak (1024^3, best of 0.5 s)\n  1 thread      %.1f GFLOP/s\n  %u threads     %.1f GFLOP/s\n",
              one, cores, all);
  const double bone = bf16_gflops(1, 0.5);
  const double ball = bf16_gflops(static_cast<int>(cores), 0.5);
  std::printf("measured bf16 GEMM peak (bf16 x bf16 -> fp32 oneDNN matmul, 1024^3, best of 0.5 s)%s\n  1 thread      %.1f "
              "GFLOP/s (%.2fx fp32)\n  %u threads     %.1f GFLOP/s (%.2fx fp32)\n",
              native_bf16 ? "" : " [no bf16 instructions: emulated]", bone, bone / one, cores, ball, ball / all);
  const char* home = std::getenv("TWINKLE_HOME");
  std::filesystem::path dir = home ? std::filesystem::path(home)
                                   : std::filesystem::path(std::getenv("HOME") ? std::getenv("HOME") : "/tmp") / ".cache/twinkle";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(dir / "peak.json");
  if (out) {
    out << nlohmann::json{{"core_gflops", one},        {"machine_gflops", all},
                          {"core_bf16_gflops", bone},  {"machine_bf16_gflops", ball},
                          {"dnnl_isa", twinkle::kernels::cpu::dnnl_isa_name()},
                          {"cores", cores},            {"cpu", cpu_model()},
                          {"gpus", gpus}}.dump(2)
        << "\n";
    std::printf("saved to %s (MegatronModel uses it for MFU; TWINKLE_PEAK_GFLOPS overrides)\n",
                (dir / "peak.json").string().c_str());
  }
  return 0;
}

}  // namespace

TWINKLE_REGISTER_COMMAND("info", "build and machine facts; measures the GEMM peak used for MFU", info_main);
