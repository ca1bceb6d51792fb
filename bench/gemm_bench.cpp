// bench/gemm_bench — GFLOP/s of single-precision GEMM from oneDNN (dnnl_sgemm, what twinkle links),
// OpenBLAS and BLIS (both loaded at run time with dlopen, so that nothing else links them) at the
// training shapes of a Qwen3-style model. See bench/README.md, section "GEMM library choice".
//
//   build/bench/gemm_bench [--threads 1,2] [--hidden 256,1024] [--vocab 32000] [--tokens 2048]
//                          [--libs onednn,openblas,blis] [--min-time 0.3] [--cpu-time] [--no-peak]
//
// For every hidden size H and N in {H, 3H, vocab}, with T tokens:
//   fwd  Y[T,N]  = X[T,H] * W[N,H]^T      (linear forward, HF [out,in] weight layout)
//   dX   dX[T,H] = dY[T,N] * W[N,H]
//   dW   dW[N,H] = dY[T,N]^T * X[T,H]
// Each is timed as the best of repeated calls (at least 2, at least --min-time seconds); FLOPs = 2*M*N*K.
// Threads: omp_set_num_threads (oneDNN, BLIS-openmp), openblas_set_num_threads,
// bli_thread_set_num_threads. OpenBLAS reads OPENBLAS_CORETYPE when it is loaded: run the bench
// with and without it in the environment to compare (the value seen is printed).
// --cpu-time uses the process CPU clock (valid with 1 thread on a busy machine).
#include <dlfcn.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace {

// CBLAS constants (cblas.h): row major, no-transpose, transpose.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using cblas_sgemm_t = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                               int);
using set_threads_t = void (*)(int);
using corename_t = char* (*)();
using blis_set_threads_t = void (*)(long);  // dim_t
using blis_arch_id_t = int (*)();
using blis_arch_str_t = const char* (*)(int);

bool g_cpu_time = false;

double now_s() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double best_seconds(const std::function<void()>& fn, double min_time) {
  fn();  // warm-up
  double best = 1e30, total = 0.0;
  int n = 0;
  while (n < 2 || total < min_time) {
    const double t0 = now_s();
    fn();
    const double dt = now_s() - t0;
    best = std::min(best, dt);
    total += dt;
    ++n;
  }
  return best;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoi(item.c_str()));
  return v;
}

std::vector<float> randv(size_t n, unsigned seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  return v;
}

struct Lib {
  std::string name;
  // row-major C[M,N] = op(A) op(B); lda/ldb/ldc row strides
  std::function<void(bool, bool, int, int, int, const float*, int, const float*, int, float*, int)> gemm;
  std::function<void(int)> set_threads;
};

// Single-thread FMA peak: 10 independent accumulator chains of 512-bit (or 256-bit) FMAs.
double fma_peak_gflops() {
#ifdef __AVX512F__
  __m512 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  const long iters = 20000000;
  const double t0 = now_s();
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  const double dt = now_s() - t0;
  float sink = 0;
  alignas(64) float lanes[16];
  for (int i = 0; i < 10; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  if (sink == 12345.0f) std::printf(" ");
  return iters * 10.0 * 16 * 2 / dt / 1e9;
#else
  return 0.0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2}, hidden = {256, 1024};
  int vocab = 32000, tokens = 2048;
  double min_time = 0.3;
  bool peak = true;
  std::string libs = "onednn,openblas,blis";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") threads = parse_list(next());
    else if (a == "--hidden") hidden = parse_list(next());
    else if (a == "--vocab") vocab = std::atoi(next().c_str());
    else if (a == "--tokens") tokens = std::atoi(next().c_str());
    else if (a == "--libs") libs = next();
    else if (a == "--min-time") min_time = std::atof(next().c_str());
    else if (a == "--cpu-time") g_cpu_time = true;
    else if (a == "--no-peak") peak = false;
    else {
      std::fprintf(stderr,
                   "usage: gemm_bench [--threads 1,2] [--hidden 256,1024] [--vocab 32000] [--tokens 2048]\n"
                   "                  [--libs onednn,openblas,blis] [--min-time 0.3] [--cpu-time] [--no-peak]\n");
      return 2;
    }
  }
  const char* ct = std::getenv("OPENBLAS_CORETYPE");
  std::printf("gemm_bench: T=%d, OPENBLAS_CORETYPE=%s, timing=%s\n", tokens, ct ? ct : "(unset)",
              g_cpu_time ? "process CPU time" : "wall time");

  std::vector<Lib> L;
  if (libs.find("onednn") != std::string::npos) {
    L.push_back({"oneDNN",
                 [](bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C,
                    int ldc) {
                   if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc) !=
                       dnnl_success)
                     std::abort();
                 },
                 [](int n) { omp_set_num_threads(n); }});
    const dnnl_version_t* v = dnnl_version();
    std::printf("  oneDNN %d.%d.%d (cpu runtime %s)\n", v->major, v->minor, v->patch,
                v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
  }
  if (libs.find("openblas") != std::string::npos) {
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      std::printf("  OpenBLAS: dlopen failed: %s\n", dlerror());
    } else {
      auto f = reinterpret_cast<cblas_sgemm_t>(dlsym(h, "cblas_sgemm"));
      auto st = reinterpret_cast<set_threads_t>(dlsym(h, "openblas_set_num_threads"));
      auto cn = reinterpret_cast<corename_t>(dlsym(h, "openblas_get_corename"));
      auto cfg = reinterpret_cast<corename_t>(dlsym(h, "openblas_get_config"));
      std::printf("  OpenBLAS: core %s, config %s\n", cn ? cn() : "?", cfg ? cfg() : "?");
      if (f && st)
        L.push_back({"OpenBLAS",
                     [f](bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                         float* C, int ldc) {
                       f(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N, K, 1.0f, A, lda, B, ldb,
                         0.0f, C, ldc);
                     },
                     [st](int n) { st(n); }});
    }
  }
  if (libs.find("blis") != std::string::npos) {
    void* h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      std::printf("  BLIS: dlopen failed: %s\n", dlerror());
    } else {
      auto f = reinterpret_cast<cblas_sgemm_t>(dlsym(h, "cblas_sgemm"));
      auto st = reinterpret_cast<blis_set_threads_t>(dlsym(h, "bli_thread_set_num_threads"));
      auto id = reinterpret_cast<blis_arch_id_t>(dlsym(h, "bli_arch_query_id"));
      auto as = reinterpret_cast<blis_arch_str_t>(dlsym(h, "bli_arch_string"));
      std::printf("  BLIS: arch %s\n", id && as ? as(id()) : "?");
      if (f && st)
        L.push_back({"BLIS",
                     [f](bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                         float* C, int ldc) {
                       f(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, M, N, K, 1.0f, A, lda, B, ldb,
                         0.0f, C, ldc);
                     },
                     [st](int n) { st(n); }});
    }
  }

  if (peak) {
    const double p = fma_peak_gflops();
    std::printf("  FMA peak estimate (1 thread, 512-bit FMA chains): %.1f GFLOP/s\n", p);
  }

  // correctness check of every library on a small problem (all three forms) against a double loop
  {
    const int M = 37, N = 29, K = 53;
    auto A = randv(M * K, 1), B = randv(N * K, 2);
    std::vector<double> ref(M * N, 0.0);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) ref[m * N + n] += double(A[m * K + k]) * B[n * K + k];
    for (auto& lib : L) {
      lib.set_threads(1);
      std::vector<float> C(M * N);
      lib.gemm(false, true, M, N, K, A.data(), K, B.data(), K, C.data(), N);
      double err = 0;
      for (int i = 0; i < M * N; ++i) err = std::max(err, std::fabs(C[i] - ref[i]));
      if (err > 1e-4) {
        std::printf("  %s: WRONG RESULT (max err %.3g) -- check the dlsym'd interface\n", lib.name.c_str(), err);
        return 1;
      }
    }
  }

  std::printf("\n%-9s %7s %5s %6s %6s %6s %4s %10s %10s\n", "library", "threads", "form", "M", "N", "K", "H",
              "ms", "GFLOP/s");
  for (int H : hidden) {
    for (int N : {H, 3 * H, vocab}) {
      const int T = tokens;
      auto X = randv(size_t(T) * H, 3), W = randv(size_t(N) * H, 4), dY = randv(size_t(T) * N, 5);
      std::vector<float> Y(size_t(T) * N), dX(size_t(T) * H), dW(size_t(N) * H);
      struct Form {
        const char* name;
        int M, N, K;
        std::function<void(Lib&)> run;
      };
      std::vector<Form> forms = {
          {"fwd", T, N, H,
           [&](Lib& l) { l.gemm(false, true, T, N, H, X.data(), H, W.data(), H, Y.data(), N); }},
          {"dX", T, H, N,
           [&](Lib& l) { l.gemm(false, false, T, H, N, dY.data(), N, W.data(), H, dX.data(), H); }},
          {"dW", N, H, T,
           [&](Lib& l) { l.gemm(true, false, N, H, T, dY.data(), N, X.data(), H, dW.data(), H); }},
      };
      for (auto& f : forms)
        for (int th : threads)
          for (auto& lib : L) {
            lib.set_threads(th);
            omp_set_num_threads(th);
            const double s = best_seconds([&] { f.run(lib); }, min_time);
            std::printf("%-9s %7d %5s %6d %6d %6d %4d %10.2f %10.1f\n", lib.name.c_str(), th, f.name, f.M, f.N, f.K,
                        H, s * 1e3, 2.0 * f.M * f.N * f.K / s / 1e9);
            std::fflush(stdout);
          }
    }
  }
  return 0;
}
