// Host emulation of CUDA for the CUDA backend's sources (see cuda_shim.h). Test code.
#include "cuda_shim.h"

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace twinkle_shim {

namespace {

struct Block {
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bar;
  std::vector<double> warp_slot;  // per thread, for shuffles
  std::vector<int> or_slot;
  std::vector<char> smem;
};
thread_local Block* t_block = nullptr;
thread_local unsigned t_tid = 0;

std::mutex g_mu;
std::map<const void*, int> g_smem_attr;
cudaError_t g_last = cudaSuccess;

}  // namespace

void syncthreads() { t_block->bar->arrive_and_wait(); }

int syncthreads_or(int p) {
  Block& b = *t_block;
  b.or_slot[t_tid] = p != 0;
  b.bar->arrive_and_wait();
  int r = 0;
  for (int v : b.or_slot) r |= v;
  b.bar->arrive_and_wait();  // nobody overwrites or_slot before everyone has read it
  return r;
}

template <typename T> T shfl(T v, int delta) {
  Block& b = *t_block;
  const unsigned warp = t_tid / 32, lane = t_tid % 32;
  b.warp_slot[t_tid] = static_cast<double>(v);
  b.warp_bar[warp]->arrive_and_wait();
  const unsigned src = lane + static_cast<unsigned>(delta);
  const T r = src < 32 && warp * 32 + src < b.warp_slot.size() ? static_cast<T>(b.warp_slot[warp * 32 + src]) : v;
  b.warp_bar[warp]->arrive_and_wait();
  return r;
}
float shfl_down(float v, int delta) { return shfl(v, delta); }
double shfl_down(double v, int delta) { return shfl(v, delta); }

void* dyn_smem() { return t_block->smem.data(); }

cudaError_t set_smem_attribute(const void* fn, int bytes) {
  if (bytes > 227 * 1024) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lk(g_mu);
  g_smem_attr[fn] = bytes;
  return cudaSuccess;
}

cudaError_t run_grid(const LaunchCfg& cfg, void (*thunk)(void*), void* ctx) {
  const unsigned nt = cfg.block.x * cfg.block.y * cfg.block.z;
  int allowed = 48 * 1024;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (auto it = g_smem_attr.find(cfg.fn); it != g_smem_attr.end()) allowed = std::max(allowed, it->second);
  }
  if (nt == 0 || nt > 1024 || cfg.grid.x == 0 || cfg.grid.y == 0 || cfg.grid.z == 0 || cfg.grid.y > 65535 ||
      cfg.grid.z > 65535 || cfg.grid.x > 2147483647u || cfg.smem > static_cast<size_t>(allowed)) {
    std::fprintf(stderr, "cuda shim: refused launch: block %u threads, grid %u x %u x %u, %zu B dynamic smem (allowed %d)\n",
                 nt, cfg.grid.x, cfg.grid.y, cfg.grid.z, cfg.smem, allowed);
    g_last = cudaErrorInvalidConfiguration;
    return g_last;
  }
  for (unsigned bz = 0; bz < cfg.grid.z; ++bz)
    for (unsigned by = 0; by < cfg.grid.y; ++by)
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        Block b;
        b.bar = std::make_unique<std::barrier<>>(nt);
        for (unsigned w = 0; w < (nt + 31) / 32; ++w)
          b.warp_bar.push_back(std::make_unique<std::barrier<>>(std::min(32u, nt - w * 32)));
        b.warp_slot.assign(nt, 0.0);
        b.or_slot.assign(nt, 0);
        b.smem.assign(cfg.smem + 16, static_cast<char>(0x5A));  // poisoned: kernels must write before reading
        std::vector<std::thread> threads;
        threads.reserve(nt);
        for (unsigned t = 0; t < nt; ++t)
          threads.emplace_back([&, t] {
            t_block = &b;
            t_tid = t;
            threadIdx = dim3(t % cfg.block.x, (t / cfg.block.x) % cfg.block.y, t / (cfg.block.x * cfg.block.y));
            blockIdx = dim3(bx, by, bz);
            blockDim = cfg.block;
            gridDim = cfg.grid;
            thunk(ctx);
            b.warp_bar[t / 32]->arrive_and_drop();  // an exited thread no longer holds back barriers
            b.bar->arrive_and_drop();
          });
        for (auto& th : threads) th.join();
      }
  return cudaSuccess;
}

}  // namespace twinkle_shim

// ---------------------------------------------------------------- runtime API
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "twinkle CUDA emulator (host threads)");
  p->multiProcessorCount = 1;
  p->totalGlobalMem = size_t{4} << 30;
  p->major = 9;
  p->minor = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  static int stream_tag;
  *s = &stream_tag;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0x7F, n);  // fresh device memory is garbage (0x7F7F7F7F = 3.4e38 as a float)
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  if (n && (!d || !s)) return cudaErrorInvalidValue;
  if (n) std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) {
  return cudaMemcpy(d, s, n, k);
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int v, size_t width, size_t height, cudaStream_t) {
  for (size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(p) + r * pitch, v, width);
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = twinkle_shim::g_last;
  twinkle_shim::g_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

// ---------------------------------------------------------------- cuBLAS (column-major, as the real one)
struct cublasContext {};
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  // the argument checks of cuBLAS: leading dimensions of the stored (column-major) matrices
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0.0;
      for (int p = 0; p < k; ++p) {
        const float a = ta == CUBLAS_OP_N ? A[i + static_cast<int64_t>(p) * lda] : A[p + static_cast<int64_t>(i) * lda];
        const float b = tb == CUBLAS_OP_N ? B[p + static_cast<int64_t>(j) * ldb] : B[j + static_cast<int64_t>(p) * ldb];
        s += static_cast<double>(a) * b;
      }
      float& c = C[i + static_cast<int64_t>(j) * ldc];
      c = static_cast<float>(*alpha * s + (*beta == 0.0f ? 0.0 : static_cast<double>(*beta) * c));
    }
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batch) {
  for (int i = 0; i < batch; ++i) {
    const cublasStatus_t s =
        cublasSgemm_v2(h, ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
  }
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}
