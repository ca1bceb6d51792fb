// The CUDA backend's process state (twinkle/kernels/cuda/runtime.h): device selection, stream, cuBLAS
// (dlopen), the caching allocator registered as Device::CUDA's DeviceAllocator.
#include "twinkle/kernels/cuda/runtime.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cuda_common.h"
#include "twinkle/core/device_allocator.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda {

namespace detail {

using cuda_check::describe;
using cuda_check::where;

void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const char* text = cublas().status_string ? cublas().status_string(s) : "unknown";
  throw Error(std::string("cuBLAS error: ") + call + " failed: " + text + " (status " + std::to_string(s) + ", " +
              where(file, line) + ")");
}

void after_launch(const char* kernel, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw Error(std::string("CUDA error: launch of ") + kernel + " failed: " + describe(e) + " (" +
                where(file, line) + ")");
  if (debug_sync()) {
    const cudaError_t s = cudaStreamSynchronize(stream());
    if (s != cudaSuccess)
      throw Error(std::string("CUDA error: kernel ") + kernel + " faulted: " + describe(s) + " (" + where(file, line) +
                  ", TWINKLE_CUDA_DEBUG=1)");
  }
}

const CublasApi& cublas() {
  static const CublasApi api = [] {
    CublasApi a;
#ifdef TWINKLE_CUDA_SHIM
    a = {cublasCreate_v2, cublasDestroy_v2,          cublasSetStream_v2,        cublasSetMathMode,
         cublasSgemm_v2,  cublasSgemmStridedBatched, cublasSgemmGroupedBatched, cublasGemmEx,
         cublasGetStatusString};
    return a;
#endif
    void* lib = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL))) break;
    if (!lib)
      throw Error(std::string("CUDA backend: cannot load cuBLAS (libcublas.so.13): ") + dlerror() +
                  " (add /usr/local/cuda/lib64 to LD_LIBRARY_PATH)");
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) throw Error(std::string("CUDA backend: cuBLAS lacks the symbol ") + name);
    };
    sym(a.create, "cublasCreate_v2");
    sym(a.destroy, "cublasDestroy_v2");
    sym(a.set_stream, "cublasSetStream_v2");
    sym(a.set_math_mode, "cublasSetMathMode");
    sym(a.sgemm, "cublasSgemm_v2");
    sym(a.sgemm_strided_batched, "cublasSgemmStridedBatched");
    sym(a.sgemm_grouped_batched, "cublasSgemmGroupedBatched");
    sym(a.gemm_ex, "cublasGemmEx");
    sym(a.status_string, "cublasGetStatusString");
    return a;
  }();
  return api;
}

}  // namespace detail

std::pair<double, double> peak_tflops_for(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H100") && (has("PCIe") || has("PCIE"))) return {756.0, 51.0};
  if (has("H200") || has("H100") || has("GH200")) return {989.0, 67.0};
  if (has("A100")) return {312.0, 19.5};
  return {0.0, 0.0};
}

int visible_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = cuda_check::describe(e);
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA-capable device";
  return n;
}

std::vector<DeviceInfo> device_info() {
  std::vector<DeviceInfo> out;
  const int n = visible_device_count();
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    DeviceInfo i;
    i.ordinal = d;
    i.name = p.name;
    i.sms = p.multiProcessorCount;
    i.total_memory = p.totalGlobalMem;
    i.cc_major = p.major;
    i.cc_minor = p.minor;
    std::tie(i.peak_bf16_tflops, i.peak_fp32_tflops) = peak_tflops_for(i.name);
    char bus[64] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) == cudaSuccess) i.pci_bus_id = bus;
    else (void)cudaGetLastError();
    out.push_back(i);
  }
  return out;
}

int local_rank_from_env(const std::function<const char*(const char*)>& getenv) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* v = getenv(var);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    check(*end == '\0' && r >= 0 && r < (1 << 20),
          std::string("device 'cuda': environment variable ") + var + "='" + v + "' is not a local rank (a non-negative integer)");
    return static_cast<int>(r);
  }
  return 0;
}

int select_device(int local_rank, int visible, const std::string& why) {
  if (visible <= 0) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    throw Error(std::string("device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES=") + (cvd ? cvd : "<unset>") + ")" +
                (why.empty() ? "" : ": " + why));
  }
  check(local_rank >= 0, "device 'cuda': negative local rank " + std::to_string(local_rank));
  return local_rank % visible;
}

namespace {

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

// Device::CUDA's DeviceAllocator: the caching allocator over cudaMalloc, copies on the stream.
class CudaDeviceAllocator final : public DeviceAllocator {
 public:
  explicit CudaDeviceAllocator(CachingAllocator& c) : cache_(c) {}
  void* alloc(size_t bytes) override { return cache_.allocate(bytes); }
  void free(void* p) override { cache_.deallocate(p); }
  void copy(void* dst, const void* src, size_t bytes, CopyKind kind) override {
    if (bytes == 0) return;
    const cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                             : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
    TWINKLE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, detail::stream()));
    if (kind != CopyKind::DeviceToDevice)
      cuda_check::check(cudaStreamSynchronize(detail::stream()), "CUDA error", {},
                        "cudaStreamSynchronize (after a host copy)", __FILE__, __LINE__);
  }
  void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) override {
    if (width == 0 || height == 0) return;
    TWINKLE_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, detail::stream()));
  }
  void fill_zero(void* p, size_t bytes) override {
    if (bytes == 0) return;
    TWINKLE_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, detail::stream()));
  }
  void synchronize() override { cuda::synchronize(); }
  void* stream() override { return detail::stream(); }
  std::string describe() const override {
    return "cuda:" + std::to_string(current_device()) + " caching allocator: " + cache_.summary();
  }
  int64_t peak_bytes_in_use() const override { return cache_.stats().peak_in_use; }

 private:
  CachingAllocator& cache_;
};

struct State {
  std::mutex mu;
  bool ready = false;
  int device = -1;
  cudaStream_t stream = nullptr;
  CachingAllocator* cache = nullptr;       // never destroyed: tensors may be freed during static destruction
  CudaDeviceAllocator* dev_alloc = nullptr;
  cublasHandle_t blas = nullptr;
};
State& state() {
  static State* s = new State();
  return *s;
}

State& ready_state(const char* what) {
  State& s = state();
  if (!s.ready) throw Error(std::string("twinkle::cuda::") + what + ": the CUDA backend is not initialized (call twinkle::cuda::init())");
  return s;
}

}  // namespace

void ensure_device(int dev);

bool debug_sync() {
  static const bool on = env_on("TWINKLE_CUDA_DEBUG") || env_on("CUDA_LAUNCH_BLOCKING");
  return on;
}

void init() {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.ready) return;
  std::string why;
  const int visible = visible_device_count(&why);
  const int dev = select_device(local_rank_from_env([](const char* v) { return std::getenv(v); }), visible, why);
  TWINKLE_CUDA_CHECK(cudaSetDevice(dev));
  TWINKLE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  s.cache = new CachingAllocator({[dev](size_t n) -> void* {
                                    ensure_device(dev);
                                    void* p = nullptr;
                                    if (cudaMalloc(&p, n) != cudaSuccess) {
                                      (void)cudaGetLastError();
                                      return nullptr;
                                    }
                                    return p;
                                  },
                                  [](void* p) { (void)cudaFree(p); }});
  s.dev_alloc = new CudaDeviceAllocator(*s.cache);
  s.device = dev;
  s.ready = true;
  register_device_allocator(Device::CUDA, s.dev_alloc);
}

bool initialized() {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  return s.ready;
}

int current_device() { return ready_state("current_device").device; }

// The CUDA runtime's current device is per host thread: a thread other than init()'s gets it set on its
// first use of the stream or of the allocator.
void ensure_device(int dev) {
  thread_local int t_dev = -1;
  if (t_dev != dev) {
    TWINKLE_CUDA_CHECK(cudaSetDevice(dev));
    t_dev = dev;
  }
}

void* stream_handle() {
  State& s = ready_state("stream_handle");
  ensure_device(s.device);
  return s.stream;
}
CachingAllocator& allocator() { return *ready_state("allocator").cache; }

void* cublas_handle() {
  State& s = ready_state("cublas_handle");
  std::lock_guard<std::mutex> lk(s.mu);
  if (!s.blas) {
    const auto& api = detail::cublas();
    cublasHandle_t h = nullptr;
    TWINKLE_CUBLAS_CHECK(api.create(&h));
    TWINKLE_CUBLAS_CHECK(api.set_stream(h, s.stream));
    // fp32 GEMMs in full fp32: no TF32 tensor-op math (torch.backends.cuda.matmul.allow_tf32 = False)
    TWINKLE_CUBLAS_CHECK(api.set_math_mode(h, CUBLAS_DEFAULT_MATH));
    s.blas = h;
  }
  return s.blas;
}

void synchronize() { TWINKLE_CUDA_CHECK(cudaStreamSynchronize(detail::stream())); }

}  // namespace twinkle::cuda
