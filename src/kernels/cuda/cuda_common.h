// Internal to src/kernels/cuda: the cuBLAS status check (CUDA statuses: src/core/cuda_check.h), the launch check, the dlopen'ed cuBLAS entry points,
// the raw stream and device scratch. Not installed; CUDA headers are fine here.
#pragma once
#ifdef TWINKLE_CUDA_SHIM  // host emulation for tests without a GPU (tests/cuda/emu/cuda_shim.h)
#include "cuda_shim.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include <string>

#include "../../core/cuda_check.h"  // TWINKLE_CUDA_CHECK
#include "twinkle/kernels/cuda/runtime.h"

namespace twinkle::cuda::detail {

/// Throws twinkle::Error "cuBLAS error: <call> failed: <status> (file:line)" unless s == CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t s, const char* call, const char* file, int line);
/// After a kernel launch: cudaGetLastError (a bad launch configuration) and, with TWINKLE_CUDA_DEBUG=1,
/// a stream synchronize so that a fault inside the kernel is reported here, naming `kernel`.
void after_launch(const char* kernel, const char* file, int line);

/// cuBLAS entry points, resolved from libcublas.so.13 at first use (cuBLAS is loaded with dlopen).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  decltype(&cublasSgemmGroupedBatched) sgemm_grouped_batched = nullptr;  // cuBLAS 12.5+: the MoE experts' GEMMs
  // the bf16 GEMMs (CUDA_R_16BF inputs, fp32 C and compute); spelled out: cublas_api.h overloads cublasGemmEx
  // in C++ (a legacy form taking the compute type as a cudaDataType)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};
/// The loaded API (throws twinkle::Error naming the library and dlerror() when it cannot be loaded).
const CublasApi& cublas();

inline cudaStream_t stream() { return static_cast<cudaStream_t>(stream_handle()); }
inline cublasHandle_t handle() { return static_cast<cublasHandle_t>(cublas_handle()); }

}  // namespace twinkle::cuda::detail

namespace twinkle::cuda::ops {

/// Blocks of `per_block` threads for a grid-stride loop over n elements: ceil(n / per_block), at least 1,
/// at most 65535 * 16 (the loop covers the rest).
inline unsigned grid_stride_blocks(int64_t n, int64_t per_block = 256) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > 65535LL * 16) b = 65535LL * 16;
  return static_cast<unsigned>(b);
}

/// Device scratch from the caching allocator, returned at scope exit (stream-ordered: the block is
/// reused only by work queued later on the same stream).
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) : p(allocator().allocate(bytes)) {}
  ~Scratch() { allocator().deallocate(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

}  // namespace twinkle::cuda::ops

#define TWINKLE_CUBLAS_CHECK(call) ::twinkle::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)
#define TWINKLE_CUDA_LAUNCHED(kernel) ::twinkle::cuda::detail::after_launch(kernel, __FILE__, __LINE__)

// Kernel launch on the backend's stream, and a kernel's dynamic shared memory (macros so that the same
// sources also build against the host emulation of tests/cuda/emu).
#ifdef TWINKLE_CUDA_SHIM
#define TWINKLE_LAUNCH(kernel, grid, block, smem, ...) \
  ::twinkle_shim::launch_on(::twinkle::cuda::detail::stream(), kernel, grid, block, smem, __VA_ARGS__)
#define TWINKLE_DYN_SMEM(T, name) T* name = static_cast<T*>(::twinkle_shim::dyn_smem())
#else
#define TWINKLE_LAUNCH(kernel, grid, block, smem, ...) \
  kernel<<<grid, block, smem, ::twinkle::cuda::detail::stream()>>>(__VA_ARGS__)
#define TWINKLE_DYN_SMEM(T, name) extern __shared__ T name[]
#endif
