// twinkle/kernels/cuda/runtime.h — the CUDA backend's process state: device selection, the one
// stream, the cuBLAS handle, the caching allocator registered for Device::CUDA, device facts.
//
// One device and one stream per process (PyTorch's current-device / current-stream model): every
// CUDA kernel, cuBLAS call and allocator copy of twinkle runs on stream(); NCCL calls use it too.
// Errors of the CUDA runtime and cuBLAS become twinkle::Error naming the call and file:line.
// Debugging: TWINKLE_CUDA_DEBUG=1 synchronizes after every kernel launch, so an asynchronous fault is
// reported at the launch that caused it (naming the kernel), like CUDA_LAUNCH_BLOCKING=1.
// cuBLAS (libcublas.so.13) is loaded with dlopen at the first GEMM, so CPU-only processes of a
// CUDA build do not pay its ~120 ms load time.
// This header needs no CUDA headers; kernels reach the raw stream through stream_handle().
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "twinkle/kernels/cuda/caching_allocator.h"

namespace twinkle::cuda {

/// One visible GPU, as cudaGetDeviceProperties reports it, plus its peak for MFU.
struct DeviceInfo {
  int ordinal = 0;             ///< CUDA ordinal among the visible devices
  std::string name;            ///< e.g. "NVIDIA H200"
  int sms = 0;                 ///< multiprocessors
  size_t total_memory = 0;     ///< bytes
  int cc_major = 0, cc_minor = 0;
  double peak_bf16_tflops = 0; ///< dense tensor-core bf16 peak (datasheet, peak_tflops_for); 0 = unknown
  double peak_fp32_tflops = 0; ///< fp32 CUDA-core peak (datasheet); 0 = unknown
  std::string pci_bus_id;      ///< cudaDeviceGetPCIBusId (the physical device, whatever CUDA_VISIBLE_DEVICES); "" if unknown
};

/// Datasheet peaks (dense, no sparsity) {bf16, fp32} in TFLOP/s by device name: H100/H200 SXM 989/67,
/// H100 PCIe 756/51, A100 312/19.5; {0, 0} when the name is unknown.
std::pair<double, double> peak_tflops_for(const std::string& name);

/// Number of visible GPUs; 0 when there is no driver or no device (never throws). `why` receives the
/// runtime's reason when 0 (e.g. "CUDA driver version is insufficient ...", "no CUDA-capable device").
int visible_device_count(std::string* why = nullptr);

/// Every visible GPU (empty without one).
std::vector<DeviceInfo> device_info();

/// The local rank this process has among the ranks of its node, from the launcher's environment:
/// OMPI_COMM_WORLD_LOCAL_RANK (OpenMPI's mpirun, twinkle-run), else SLURM_LOCALID, else
/// LOCAL_RANK (torchrun), else 0. Throws twinkle::Error naming the variable for a value that is not a
/// non-negative integer. `getenv` is injectable for tests.
int local_rank_from_env(const std::function<const char*(const char*)>& getenv);

/// The device ordinal this process uses: local_rank modulo `visible` (several ranks share a GPU when
/// there are more ranks than GPUs). CUDA_VISIBLE_DEVICES is applied by the CUDA runtime itself
/// (ordinals are among the visible devices). Throws twinkle::Error when visible <= 0:
/// "device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES=<value or unset>): <why>".
int select_device(int local_rank, int visible, const std::string& why = "");

/// Initializes the backend once per process (idempotent, thread-safe): selects the device
/// (select_device(local_rank_from_env(getenv), visible_device_count())), creates the stream and registers
/// the caching allocator as device_allocator(Device::CUDA). Throws twinkle::Error without a GPU.
void init();
/// True once init() succeeded.
bool initialized();
/// The selected device ordinal (init() first).
int current_device();
/// The process's stream as an opaque cudaStream_t (init() first).
void* stream_handle();
/// The cuBLAS handle (cublasHandle_t, opaque) bound to stream(), math mode CUBLAS_DEFAULT_MATH with
/// TF32 disallowed (fp32 GEMMs in full fp32, as torch.backends.cuda.matmul.allow_tf32 = False),
/// created on first use
/// (dlopen of libcublas.so.13; throws twinkle::Error when it cannot be loaded).
void* cublas_handle();
/// Blocks until the stream is idle; throws twinkle::Error for an asynchronous error.
void synchronize();
/// The caching allocator behind device_allocator(Device::CUDA) (init() first).
CachingAllocator& allocator();
/// Whether TWINKLE_CUDA_DEBUG=1 (synchronize and check after every launch).
bool debug_sync();

}  // namespace twinkle::cuda
