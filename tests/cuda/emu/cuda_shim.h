// A host emulation of the part of the CUDA runtime, device language and cuBLAS that src/kernels/cuda uses,
// so the CUDA backend's own sources run on a machine without a GPU (tests/cuda.cmake: the conformance
// table as `kernel_conformance_cuda_emu`, under AddressSanitizer). Every CUDA thread is a host thread; a
// block's threads run concurrently and meet at real barriers (__syncthreads, warp shuffles), blocks run one
// after another; device memory is host memory; cuBLAS sgemm is a double-accumulating loop. It checks what
// a launch on an sm_90 device would refuse (block size, grid size, dynamic shared memory above 48 KiB
// without the attribute or above 227 KiB). It cannot show timing, coalescing or sm_90 code generation
// bugs: it tests the algorithms, index arithmetic, synchronization structure and host logic.
// Test code; selected by -DTWINKLE_CUDA_SHIM (src/kernels/cuda/cuda_common.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------- device language
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__ __restrict
#define __shared__ static

struct alignas(16) float4 {
  float x, y, z, w;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace twinkle_shim {
void syncthreads();
int syncthreads_or(int p);
float shfl_down(float v, int delta);
double shfl_down(double v, int delta);
void* dyn_smem();
}  // namespace twinkle_shim

inline void __syncthreads() { twinkle_shim::syncthreads(); }
inline int __syncthreads_or(int p) { return twinkle_shim::syncthreads_or(p); }
inline float __shfl_down_sync(unsigned, float v, int d) { return twinkle_shim::shfl_down(v, d); }
inline double __shfl_down_sync(unsigned, double v, int d) { return twinkle_shim::shfl_down(v, d); }
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
inline int atomicMin(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
template <typename A, typename B> inline std::common_type_t<A, B> min(A a, B b) {
  return a < b ? static_cast<std::common_type_t<A, B>>(a) : static_cast<std::common_type_t<A, B>>(b);
}
template <typename A, typename B> inline std::common_type_t<A, B> max(A a, B b) {
  return a < b ? static_cast<std::common_type_t<A, B>>(b) : static_cast<std::common_type_t<A, B>>(a);
}

// ---------------------------------------------------------------- runtime API
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                      cudaErrorInvalidConfiguration = 9;
using cudaStream_t = void*;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamNonBlocking = 1;
struct cudaDeviceProp {
  char name[256];
  int multiProcessorCount;
  size_t totalGlobalMem;
  int major, minor;
};
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaMalloc(void** p, size_t n);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st);
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int v, size_t width, size_t height, cudaStream_t st);
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
namespace twinkle_shim {
cudaError_t set_smem_attribute(const void* fn, int bytes);
}
template <typename F> cudaError_t cudaFuncSetAttribute(F* fn, cudaFuncAttribute, int bytes) {
  return twinkle_shim::set_smem_attribute(reinterpret_cast<const void*>(fn), bytes);
}

// ---------------------------------------------------------------- cuBLAS
using cublasStatus_t = int;
constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7;
struct cublasContext;
using cublasHandle_t = cublasContext*;
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };
cublasStatus_t cublasCreate_v2(cublasHandle_t* h);
cublasStatus_t cublasDestroy_v2(cublasHandle_t h);
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batch);
const char* cublasGetStatusString(cublasStatus_t s);

// ---------------------------------------------------------------- launch
namespace twinkle_shim {
struct LaunchCfg {
  dim3 grid, block;
  size_t smem;
  const void* fn;
};
/// Runs body(thread) for every thread of every block (returns an error code for a refused launch).
cudaError_t run_grid(const LaunchCfg& cfg, void (*thunk)(void*), void* ctx);

template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  auto tup = std::make_tuple(static_cast<P>(args)...);
  using Tup = decltype(tup);
  struct Ctx {
    void (*k)(P...);
    Tup* t;
  } ctx{kernel, &tup};
  run_grid({grid, block, smem, reinterpret_cast<const void*>(kernel)},
           [](void* c) {
             auto* x = static_cast<Ctx*>(c);
             std::apply(x->k, *x->t);
           },
           &ctx);
}
}  // namespace twinkle_shim
