// A host emulation of the part of the CUDA runtime, device language and cuBLAS that src/kernels/cuda uses,
// so the CUDA backend's own sources run on a machine without a GPU (tests/cuda.cmake: the conformance
// table as `kernel_conformance_cuda_emu`, under AddressSanitizer; the emulation's own test is
// tests/cuda/emu/test_cuda_shim.cpp). Test code; selected by -DTWINKLE_CUDA_SHIM
// (src/kernels/cuda/cuda_common.h).
//
// What it models:
//  - Streams and events. Work is deferred, as on a GPU: a launch, a cuBLAS call, an asynchronous copy or
//    memset is checked when it is called (configuration, pointer spaces: those errors come back at once)
//    and queued on its stream (cuda_shim.cpp: one FIFO per stream, the legacy default stream for
//    nullptr); queued work runs only when the host waits for it: cudaStreamSynchronize (that stream),
//    cudaEventSynchronize / cudaEventQuery (the event's stream up to the record; a query of unfinished
//    work answers cudaErrorNotReady once, having run it, and leaves it as the last error as CUDA
//    does), cudaDeviceSynchronize and cudaFree (every stream), and the calls that wait on a GPU: cudaMemcpy to or from the host (the legacy stream only:
//    a cudaStreamNonBlocking stream is not waited for, so a missing stream synchronize before a host
//    read of a kernel's output reads stale device memory, here as on a GPU; host to device, the copy
//    itself is then queued on the legacy stream, as pageable memory's DMA may still be in flight when
//    it returns) and cudaMemcpyAsync device-to-host (its stream; pageable host memory). cudaStreamWaitEvent queues a wait
//    for the other stream up to the record. A host-to-device cudaMemcpyAsync takes the source bytes when
//    called (pageable memory is staged), so the host buffer may be reused at once. Streams created
//    without cudaStreamNonBlocking synchronize with the legacy stream both ways. A fault inside queued
//    work (barriers that cannot meet) is returned by the next synchronizing call (and cudaGetLastError
//    after it), once. TWINKLE_CUDA_SHIM_EAGER=1 runs all work when it is queued (every call synchronous).
//  - Execution. Queued work runs on the host thread that waits for it, blocks one after another in (z, y, x) order.
//    The threads of a block are cooperative fibers on that one OS thread (cuda_shim.cpp: stacks from a
//    per-thread pool, reused across launches; the switch is a few instructions on x86-64, ucontext
//    elsewhere, where ASan loses the redzones of a suspended thread's frames). Threads start in index
//    order; each runs until it exits or reaches a barrier — __syncthreads, __syncthreads_or (block-wide)
//    or a warp shuffle (its warp's 32 lanes) — and a barrier lets its threads go once every thread of the
//    block / warp that has not exited has reached it. A block therefore runs to completion
//    deterministically, and a kernel without barriers runs a block's threads one after another on one
//    fiber without a switch. Barriers that can never all be met (some threads of a warp at __syncthreads,
//    others at a shuffle) fail the launch with cudaErrorLaunchFailure naming the kernel and the block (a
//    GPU would hang or be undefined). Under ASan every switch is annotated
//    (__sanitizer_start/finish_switch_fiber), so ASan knows each fiber's stack.
//  - Warp shuffles (__shfl_down_sync): every lane of the warp deposits its value, then reads lane +
//    delta's (its own value when that lane is past 31 or past the block); the mask is not checked.
//  - Device memory. cudaMalloc returns memory from a separate reserved address range (the device heap,
//    cuda_shim.cpp: page-granular blocks with an unmapped page between them, filled with 0x7F garbage,
//    the bytes past the requested size poisoned for ASan; freed blocks unmapped, their addresses reused
//    only once the range is used up; 32 GiB, TWINKLE_CUDA_SHIM_DEVICE_MIB sets it). Every pointer
//    argument of a launch (`launch` below) must be null or point into a live device block (or one past
//    its end), else the launch fails with cudaErrorIllegalAddress naming the kernel and the argument;
//    cudaMemcpy / cudaMemcpyAsync check their direction (the device side must lie inside one live block,
//    the host side outside the device heap) and cudaMemset* their range, else cudaErrorInvalidValue;
//    cuBLAS checks A, B, C the same way (whole matrices inside live blocks) and alpha / beta to be host
//    pointers (CUBLAS_POINTER_MODE_HOST), else CUBLAS_STATUS_INVALID_VALUE. Each error is returned,
//    recorded for cudaGetLastError (per host thread, not sticky) and printed to stderr, and
//    cudaGetErrorString / cublasGetStatusString of that code add the detail, so the library's
//    TWINKLE_CUDA_CHECK / TWINKLE_CUBLAS_CHECK / TWINKLE_CUDA_LAUNCHED errors carry it.
//  - Launch limits of an sm_90 device: at most 1024 threads a block, the grid limits, dynamic shared
//    memory above 48 KiB only with cudaFuncAttributeMaxDynamicSharedMemorySize, never above 227 KiB.
//  - Warp matrix operations (nvcuda::wmma, 16 x 16 x 16 bf16 fragments with an fp32 accumulator) and
//    __nv_bfloat16: the section "bf16 and warp matrix operations" below.
//  - cuBLAS sgemm and GemmEx (fp32 or bf16 A / B, fp32 C, CUBLAS_COMPUTE_32F): a column-major loop
//    accumulating in double (no TF32; a bf16 x bf16 product is exact in either), with cuBLAS's argument checks.
//
// What it cannot show: timing; races between blocks (they never overlap) or threads: the schedule is one
// fixed interleaving, so a missing barrier shows only where a thread reads what a higher-indexed thread
// of its block writes before that barrier (that thread has not run yet: the value read is stale or the
// 0x5A / 0x7F poison), and there is no independent thread scheduling inside a warp; coalescing, bank
// conflicts, sm_90 code generation, a real GPU's fp32 contraction into FMAs; streams running at the same
// time (queued work runs in an order a GPU may take, one stream at a time, so a race between streams
// without an event shows only where the order the host waits in differs from the order of the queues);
// pinned host memory (cudaMallocHost is absent: every host buffer is pageable); NCCL. A host pointer inside a struct argument
// or read by device code through a device-resident pointer is not checked, nor are host reads of device
// memory (device memory is host-addressable here). Exceptions must not leave a kernel.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>
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
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
template <typename A, typename B> inline std::common_type_t<A, B> min(A a, B b) {
  return a < b ? static_cast<std::common_type_t<A, B>>(a) : static_cast<std::common_type_t<A, B>>(b);
}
template <typename A, typename B> inline std::common_type_t<A, B> max(A a, B b) {
  return a < b ? static_cast<std::common_type_t<A, B>>(b) : static_cast<std::common_type_t<A, B>>(a);
}

#define __align__(n) __attribute__((aligned(n)))

// ---------------------------------------------------------------- bf16 and warp matrix operations (mma.h)
// __nv_bfloat16 (cuda_bf16.h) as its bit pattern, and the part of nvcuda::wmma the backend uses: 16 x 16 x 16
// bf16 fragments (matrix_a / matrix_b, row- or column-major) with an fp32 accumulator. On a GPU a fragment
// is spread over the 32 lanes of a warp in an unspecified way; here every lane's matrix_a / matrix_b fragment
// holds the whole tile (load_matrix_sync reads all of it), and its accumulator holds the 8 elements
// e = lane + 32 i (i < num_elements) of the 16 x 16 tile, so mma_sync computes each output once per warp and
// store_matrix_sync writes each once; elementwise use of an accumulator's x[] works as on a GPU. mma_sync sums
// in fp32 in k order (a bf16 x bf16 product is exact in fp32; a tensor core's summation order differs).
// The CUDA rules checked: the pointer of a load or store 256-bit (32-byte) aligned, ldm a multiple of 16 bytes
// (8 bf16 values, 4 floats); a breach aborts naming it (a GPU's result would be undefined). Not modelled:
// that every lane of the warp must take part (each lane's call here is independent of the others').
struct __nv_bfloat16 {
  uint16_t bits;
};
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline unsigned lane() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
}
inline void check_mem(const void* p, unsigned ldm, size_t elem, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * elem) % 16 != 0) {
    std::fprintf(stderr, "cuda shim: wmma::%s: pointer %p not 32-byte aligned or ldm %u not a multiple of 16 bytes\n",
                 what, p, ldm);
    std::abort();
  }
}
inline float bf16_value(__nv_bfloat16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment;
/// matrix_a (M x K) and matrix_b (K x N) tiles, held whole, as fp32 values of the bf16 inputs.
template <int M, int N, int K, typename Layout> struct fragment<matrix_a, M, N, K, __nv_bfloat16, Layout> {
  static_assert(M == 16 && N == 16 && K == 16, "the shim models 16 x 16 x 16 fragments");
  float tile[M * K];  // [row][k]
};
template <int M, int N, int K, typename Layout> struct fragment<matrix_b, M, N, K, __nv_bfloat16, Layout> {
  static_assert(M == 16 && N == 16 && K == 16, "the shim models 16 x 16 x 16 fragments");
  float tile[K * N];  // [k][col]
};
template <int M, int N, int K> struct fragment<accumulator, M, N, K, float, void> {
  static_assert(M == 16 && N == 16 && K == 16, "the shim models 16 x 16 x 16 fragments");
  static constexpr int num_elements = M * N / 32;
  float x[num_elements];  // element lane + 32 i of the [row][col] tile
};

template <typename L>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, L>& f, const __nv_bfloat16* p, unsigned ldm) {
  detail::check_mem(p, ldm, sizeof(__nv_bfloat16), "load_matrix_sync (matrix_a)");
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k)
      f.tile[r * 16 + k] = detail::bf16_value(std::is_same_v<L, row_major> ? p[r * ldm + k] : p[k * ldm + r]);
}
template <typename L>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, L>& f, const __nv_bfloat16* p, unsigned ldm) {
  detail::check_mem(p, ldm, sizeof(__nv_bfloat16), "load_matrix_sync (matrix_b)");
  for (int k = 0; k < 16; ++k)
    for (int c = 0; c < 16; ++c)
      f.tile[k * 16 + c] = detail::bf16_value(std::is_same_v<L, row_major> ? p[k * ldm + c] : p[c * ldm + k]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  detail::check_mem(p, ldm, sizeof(float), "load_matrix_sync (accumulator)");
  for (int i = 0; i < f.num_elements; ++i) {
    const unsigned e = detail::lane() + 32 * i, r = e / 16, c = e % 16;
    f.x[i] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  }
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  for (float& x : f.x) x = v;
}
template <typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  for (int i = 0; i < d.num_elements; ++i) {
    const unsigned e = detail::lane() + 32 * i, r = e / 16, col = e % 16;
    float s = c.x[i];
    for (int k = 0; k < 16; ++k) s += a.tile[r * 16 + k] * b.tile[k * 16 + col];
    d.x[i] = s;
  }
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  detail::check_mem(p, ldm, sizeof(float), "store_matrix_sync");
  for (int i = 0; i < f.num_elements; ++i) {
    const unsigned e = detail::lane() + 32 * i, r = e / 16, c = e % 16;
    (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[i];
  }
}
}  // namespace nvcuda::wmma

// ---------------------------------------------------------------- runtime API
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                      cudaErrorInvalidConfiguration = 9, cudaErrorInvalidResourceHandle = 400,
                      cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700, cudaErrorLaunchFailure = 719;
using cudaStream_t = void*;  // nullptr: the legacy default stream
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamNonBlocking = 1;
struct cudaDeviceProp {
  char name[256];
  int multiProcessorCount;
  size_t totalGlobalMem;
  int major, minor;
};
/// How cudaPointerGetAttributes classifies a pointer (CUDA Runtime API, cudaPointerAttributes): a
/// live device block is cudaMemoryTypeDevice; anything else, freed device memory included, is
/// cudaMemoryTypeUnregistered (CUDA >= 11 reports plain host memory so, with cudaSuccess).
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2,
                      cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* dev);
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int dev);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaMalloc(void** p, size_t n);
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st);
cudaError_t cudaMemset(void* p, int v, size_t n);
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int v, size_t width, size_t height, cudaStream_t st);
/// Device-to-device only (what the backend uses); both ranges checked like cudaMemcpyAsync's.
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t st);
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
constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7,
                         CUBLAS_STATUS_NOT_SUPPORTED = 15;
/// Element types (library_types.h) and compute types / algorithms (cublas_api.h) of cublasGemmEx, with
/// the values of the CUDA headers; the shim's GemmEx takes A and B as CUDA_R_32F or CUDA_R_16BF (bf16 bit
/// patterns, uint16_t), C as CUDA_R_32F, and CUBLAS_COMPUTE_32F (float alpha / beta), else
/// CUBLAS_STATUS_NOT_SUPPORTED.
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_PEDANTIC = 69 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
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
/// cuBLAS 12.5's grouped GEMM: host descriptor arrays, device arrays of matrix pointers (checked to be device
/// memory at the call; every matrix checked when the work runs: cudaErrorIllegalAddress from the next sync).
cublasStatus_t cublasSgemmGroupedBatched(cublasHandle_t h, const cublasOperation_t transa_array[],
                                         const cublasOperation_t transb_array[], const int m_array[],
                                         const int n_array[], const int k_array[], const float alpha_array[],
                                         const float* const Aarray[], const int lda_array[],
                                         const float* const Barray[], const int ldb_array[],
                                         const float beta_array[], float* const Carray[], const int ldc_array[],
                                         int group_count, const int group_size[]);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
const char* cublasGetStatusString(cublasStatus_t s);

// ---------------------------------------------------------------- launch
namespace twinkle_shim {
struct LaunchCfg {
  dim3 grid, block;
  size_t smem;
  const void* fn;
};
/// Runs thunk(ctx) for every thread of every block now, on the calling thread (returns an error code for
/// a refused or failed launch, also recorded for cudaGetLastError).
cudaError_t run_grid(const LaunchCfg& cfg, void (*thunk)(void*), void* ctx);
/// The launch limits run_grid applies (cudaErrorInvalidConfiguration, recorded, when cfg breaks them).
cudaError_t check_launch_config(const LaunchCfg& cfg);

/// Queues `work` on stream s (nullptr: the legacy default stream; cudaErrorInvalidResourceHandle, recorded,
/// for a stream that was never created or is destroyed). `work` runs when the host waits for it (the
/// header's "Streams and events"); an error it returns is reported by that wait.
cudaError_t enqueue(cudaStream_t s, std::function<cudaError_t()> work);

/// Whether p is null or points into a live device allocation (one past its end included); otherwise records
/// cudaErrorIllegalAddress naming the kernel `fn` (`launch_sig`: the launch's __PRETTY_FUNCTION__, for the
/// parameter types when the kernel's name cannot be found) and the argument (`index` of `count`, `type`).
bool check_kernel_pointer(const void* fn, const char* launch_sig, size_t index, size_t count, std::string_view type,
                          const void* p);

/// Fiber scheduler counters of the calling host thread: context switches (either direction) and fibers
/// created (each with its own stack, kept for later launches).
struct FiberStats {
  uint64_t switches = 0, fibers = 0;
};
FiberStats fiber_stats();

/// The spelling of T (from __PRETTY_FUNCTION__), for messages.
template <typename T> constexpr std::string_view type_name() {
  std::string_view s = __PRETTY_FUNCTION__;
  const size_t b = s.find("T = ");
  if (b == std::string_view::npos) return "?";
  s.remove_prefix(b + 4);
  return s.substr(0, s.find_first_of(";]"));
}

template <typename T> bool kernel_arg_ok(const void* fn, const char* sig, size_t i, size_t n, const T& v) {
  if constexpr (std::is_pointer_v<T>)
    return check_kernel_pointer(fn, sig, i, n, type_name<T>(), static_cast<const void*>(v));
  else
    return true;
}
template <typename Tup, size_t... I>
bool kernel_args_ok(const void* fn, const char* sig, const Tup& t, std::index_sequence<I...>) {
  return (kernel_arg_ok(fn, sig, I, sizeof...(I), std::get<I>(t)) && ...);
}

/// kernel<<<grid, block, smem, stream>>>(args...): the configuration and every pointer argument are
/// checked now (a refusal is recorded for cudaGetLastError and nothing is queued), the kernel with its
/// arguments (by value) is queued on `stream`.
template <typename... P, typename... A>
void launch_on(cudaStream_t stream, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  auto tup = std::make_tuple(static_cast<P>(args)...);
  using Tup = decltype(tup);
  const void* fn = reinterpret_cast<const void*>(kernel);
  if (!kernel_args_ok(fn, __PRETTY_FUNCTION__, tup, std::index_sequence_for<P...>{})) return;
  const LaunchCfg cfg{grid, block, smem, fn};
  if (check_launch_config(cfg) != cudaSuccess) return;
  enqueue(stream, [kernel, tup, cfg]() mutable -> cudaError_t {
    struct Ctx {
      void (*k)(P...);
      Tup* t;
    } ctx{kernel, &tup};
    return run_grid(cfg,
                    [](void* c) {
                      auto* x = static_cast<Ctx*>(c);
                      std::apply(x->k, *x->t);
                    },
                    &ctx);
  });
}
/// kernel<<<grid, block, smem>>>(args...): on the legacy default stream.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  launch_on(nullptr, kernel, grid, block, smem, std::forward<A>(args)...);
}
}  // namespace twinkle_shim
