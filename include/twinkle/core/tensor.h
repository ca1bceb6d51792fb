// twinkle/core/tensor.h — a strided n-d array over 64-byte aligned storage.
//
// No autograd: layers call explicit forward/backward kernels and name the
// activations they save. A Tensor is a cheap handle (shared storage); views
// (view, narrow, slice_rows) share storage with their base.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "twinkle/core/dtype.h"
#include "twinkle/core/error.h"

namespace twinkle {

/// Where a tensor's bytes live. CPU storage is core's own (aligned_alloc); an accelerator's comes
/// from the DeviceAllocator its backend registered (twinkle/core/device_allocator.h).
enum class Device { CPU, CUDA, NPU };
std::string device_name(Device d);

/// Owning byte buffer, zero-filled on creation: host memory 64-byte aligned, or device memory from
/// device_allocator(dev) (256-byte aligned; zeroed on the backend's stream).
class Storage {
 public:
  /// Allocates `nbytes` (rounded up to 64) on `dev`; throws std::bad_alloc (host) or twinkle::Error
  /// (device without an allocator, out of device memory).
  explicit Storage(size_t nbytes, Device dev = Device::CPU);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_ = Device::CPU;
};

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  /// New zero-filled contiguous tensor (device memory through device_allocator(dev)).
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device dev = Device::CPU);
  /// Same as zeros (storage is always zero-filled; kept for call-site clarity).
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device dev = Device::CPU);
  /// f32 tensor filled with `v`.
  static Tensor full(const Shape& shape, float v);
  /// f32 tensor copied from `values` (size must equal prod(shape)).
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);

  bool defined() const { return static_cast<bool>(storage_); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  /// Size of dimension i (negative i counts from the end).
  int64_t size(int64_t i) const;
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  /// Raw pointer to the first element.
  void* raw() { return static_cast<char*>(storage_->data()) + offset_; }
  const void* raw() const { return static_cast<const char*>(storage_->data()) + offset_; }
  /// Typed pointer; throws twinkle::Error when T does not match dtype().
  template <typename T> T* data();
  template <typename T> const T* data() const;
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }

  /// Contiguous reshape sharing storage; throws if not contiguous or numel differs.
  Tensor view(const Shape& shape) const;
  /// View of indices [start, start+len) along dim `d`.
  Tensor narrow(int64_t d, int64_t start, int64_t len) const;
  /// Deep copy into a new contiguous tensor on the same device.
  Tensor clone() const;
  /// Contiguous copy on device `dev` (itself when already there and contiguous): host <-> device
  /// through the device's allocator (synchronous on the host side).
  Tensor to(Device dev) const;
  /// Sets every element to zero (device tensors: contiguous only, stream-ordered).
  void zero_();
  /// Fills with `v` (f32 host tensors only; fill_, to_f32, to_dtype, to_vector throw twinkle::Error
  /// naming the device for a device tensor: copy it to the host with to(Device::CPU) first).
  void fill_(float v);
  /// Element-wise copy from `src` (same shape and dtype). Host to host: any strides. When either side
  /// is on a device: both contiguous (else twinkle::Error), through that device's allocator.
  void copy_(const Tensor& src);
  /// f32 copy of a float tensor of any dtype (bf16/f16/f32 exactly; f64 rounded to nearest even).
  Tensor to_f32() const;
  /// Converts an f32 tensor to `dt` (BF16 / F16 with round-to-nearest-even, F64 exactly).
  Tensor to_dtype(DType dt) const;
  /// Elements as a std::vector<float> (f32 tensors; test helper).
  std::vector<float> to_vector() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_, strides_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::BF16; };  // bf16 or f16 bits

template <typename T> T* Tensor::data() {
  check(defined(), "Tensor::data on an undefined tensor");
  check(dtype_of<T>::value == dtype_ || (dtype_ == DType::F16 && dtype_of<T>::value == DType::BF16),
        "Tensor::data: dtype mismatch (tensor is " + dtype_name(dtype_) + ")");
  return static_cast<T*>(raw());
}
template <typename T> const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}

}  // namespace twinkle
