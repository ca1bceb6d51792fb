// twinkle/core/device_allocator.h — the memory seam between core::Tensor and an accelerator backend.
//
// A backend (the CUDA one: twinkle/kernels/cuda/runtime.h) registers one DeviceAllocator per Device;
// Storage / Tensor::zeros with that device allocate through it, Tensor::copy_ / zero_ / clone / to move
// bytes through it. core itself has no accelerator dependency: it only knows this interface.
//
// Semantics (the CUDA runtime's): all work is ordered on the backend's one stream per process
// (PyTorch's current-stream model, torch.cuda.current_stream); alloc/free are stream-ordered (a block
// freed and reused is safe on that stream); copy() with a host side returns only when the host bytes
// may be reused / read (it synchronizes); fill_zero and device-to-device copies are asynchronous.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "twinkle/core/tensor.h"

namespace twinkle {

/// Direction of DeviceAllocator::copy (cudaMemcpyKind's three cases).
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };

/// Memory of one accelerator device. Implementations throw twinkle::Error (naming the call, the
/// size and the allocator's counters) on failure.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  /// `bytes` of device memory (any bytes >= 0; 0 gives a valid unique pointer), 256-byte aligned,
  /// contents unspecified. Throws twinkle::Error when the device is out of memory or absent.
  virtual void* alloc(size_t bytes) = 0;
  /// Returns a pointer from alloc() (nullptr: no-op). Throws twinkle::Error for an unknown pointer.
  virtual void free(void* ptr) = 0;
  /// Copies `bytes` between host and device memory (or device to device) in stream order.
  /// Host-side copies are synchronous with respect to the host buffer.
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind) = 0;
  /// Device-to-device copy of `height` rows of `width` bytes, row r from src + r * spitch to dst + r * dpitch
  /// (cudaMemcpy2DAsync's contract), stream-ordered. The default copies row by row.
  virtual void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) {
    for (size_t r = 0; r < height; ++r)
      copy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width,
           CopyKind::DeviceToDevice);
  }
  /// Sets `bytes` at `ptr` (device memory) to zero, stream-ordered.
  virtual void fill_zero(void* ptr, size_t bytes) = 0;
  /// Blocks until all work queued on the backend's stream is done.
  virtual void synchronize() = 0;
  /// The backend's stream as its native handle (cudaStream_t for cuda), for code below the backend that
  /// orders its own device work on it (the CUDA process groups' non-blocking collectives,
  /// src/dist/cuda); nullptr: the device's default stream.
  virtual void* stream() { return nullptr; }
  /// One line for logs: device name and counters.
  virtual std::string describe() const = 0;
  /// The most bytes handed out by alloc() and not yet freed at any time since the process start
  /// (PyTorch's torch.cuda.memory_stats()["allocated_bytes.all.peak"], which Megatron-LM's
  /// training_log writes as "mem-max-allocated-bytes"); -1 (the default) = not tracked.
  virtual int64_t peak_bytes_in_use() const { return -1; }
};

/// Makes `a` the allocator of device `d` (not owned; it must outlive every tensor of that device;
/// nullptr unregisters). Throws twinkle::Error for Device::CPU (host memory is always core's own).
void register_device_allocator(Device d, DeviceAllocator* a);

/// The allocator registered for `d`. Throws twinkle::Error when there is none:
///  * cuda, CUDA backend not compiled: "device 'cuda' is not built in (configure with
///    -DTWINKLE_CUDA=ON where nvcc exists)";
///  * cuda, compiled but not initialized: names twinkle::cuda::init() (resolve_kernels("cuda") calls it);
///    init() itself throws "device 'cuda': no GPU visible (CUDA_VISIBLE_DEVICES=...)" without a GPU;
///  * npu: needs Huawei Ascend's CANN toolkit, not available;
///  * cpu: host memory has no DeviceAllocator.
DeviceAllocator& device_allocator(Device d);

/// True when an allocator is registered for `d`.
bool has_device_allocator(Device d);

}  // namespace twinkle
