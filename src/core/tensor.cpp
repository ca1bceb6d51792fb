#include "twinkle/core/tensor.h"

#include "twinkle/core/device_allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace twinkle {

std::string device_name(Device d) {
  switch (d) {
    case Device::CPU: return "cpu";
    case Device::CUDA: return "cuda";
    case Device::NPU: return "npu";
  }
  return "?";
}

Storage::Storage(size_t nbytes, Device dev) : nbytes_(nbytes), device_(dev) {
  size_t n = (nbytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  if (dev != Device::CPU) {
    DeviceAllocator& a = device_allocator(dev);
    data_ = a.alloc(n);
    a.fill_zero(data_, n);
    return;
  }
  data_ = std::aligned_alloc(64, n);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, n);
}
Storage::~Storage() {
  if (device_ == Device::CPU) {
    std::free(data_);
  } else if (has_device_allocator(device_)) {
    device_allocator(device_).free(data_);  // never throws for a pointer it handed out
  }
}

namespace {
void check_host(const Tensor& t, const char* what) {
  if (t.device() != Device::CPU)
    throw Error(std::string("Tensor::") + what + ": the tensor is on device '" + device_name(t.device()) +
                "' (copy it to the host with to(Device::CPU) first)");
}
}  // namespace

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

static Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) {
  int64_t n = 1;
  for (auto d : shape) {
    check(d >= 0, "Tensor: negative dimension in shape " + shape_str(shape));
    n *= d;
  }
  Tensor t;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(n) * dtype_size(dtype), dev);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = dev;
  return t;
}
Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev) { return zeros(shape, dtype, dev); }
Tensor Tensor::full(const Shape& shape, float v) {
  Tensor t = zeros(shape);
  t.fill_(v);
  return t;
}
Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  Tensor t = zeros(shape);
  check(static_cast<int64_t>(values.size()) == t.numel(),
        "Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " + shape_str(shape));
  std::memcpy(t.raw(), values.data(), values.size() * 4);
  return t;
}

int64_t Tensor::size(int64_t i) const {
  if (i < 0) i += dim();
  check(i >= 0 && i < dim(), "Tensor::size: dim out of range");
  return shape_[static_cast<size_t>(i)];
}
int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto d : shape_) n *= d;
  return n;
}
bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::view(const Shape& shape) const {
  check(is_contiguous(), "Tensor::view on a non-contiguous tensor");
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) infer = static_cast<int64_t>(i);
    else known *= s[i];
  }
  if (infer >= 0) s[static_cast<size_t>(infer)] = known ? numel() / known : 0;
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  check(t.numel() == numel(), "Tensor::view: cannot view " + shape_str(shape_) + " as " + shape_str(shape));
  return t;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t len) const {
  if (d < 0) d += dim();
  check(d >= 0 && d < dim() && start >= 0 && len >= 0 && start + len <= shape_[static_cast<size_t>(d)],
        "Tensor::narrow out of range on shape " + shape_str(shape_));
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(start * strides_[static_cast<size_t>(d)]) * dtype_size(dtype_);
  t.shape_[static_cast<size_t>(d)] = len;
  return t;
}

static void strided_copy(char* dst, const char* src, const Shape& shape, const Shape& dst_st, const Shape& src_st,
                         size_t es, size_t d) {
  if (shape.empty()) {
    std::memcpy(dst, src, es);
    return;
  }
  if (d + 1 == shape.size()) {
    if (dst_st[d] == 1 && src_st[d] == 1) {
      std::memcpy(dst, src, static_cast<size_t>(shape[d]) * es);
    } else {
      for (int64_t i = 0; i < shape[d]; ++i)
        std::memcpy(dst + static_cast<size_t>(i * dst_st[d]) * es, src + static_cast<size_t>(i * src_st[d]) * es, es);
    }
    return;
  }
  for (int64_t i = 0; i < shape[d]; ++i)
    strided_copy(dst + static_cast<size_t>(i * dst_st[d]) * es, src + static_cast<size_t>(i * src_st[d]) * es, shape,
                 dst_st, src_st, es, d + 1);
}

void Tensor::copy_(const Tensor& src) {
  check(src.shape_ == shape_, "Tensor::copy_: shape " + shape_str(src.shape_) + " into " + shape_str(shape_));
  check(src.dtype_ == dtype_, "Tensor::copy_: dtype mismatch");
  if (numel() == 0) return;
  if (device_ != Device::CPU || src.device_ != Device::CPU) {
    check(is_contiguous() && src.is_contiguous(), "Tensor::copy_: a copy from device '" + device_name(src.device_) +
                                                      "' to device '" + device_name(device_) +
                                                      "' needs contiguous tensors");
    check(device_ == Device::CPU || src.device_ == Device::CPU || device_ == src.device_,
          "Tensor::copy_: no direct copy from device '" + device_name(src.device_) + "' to '" + device_name(device_) +
              "'");
    const CopyKind kind = device_ == Device::CPU       ? CopyKind::DeviceToHost
                          : src.device_ == Device::CPU ? CopyKind::HostToDevice
                                                       : CopyKind::DeviceToDevice;
    device_allocator(device_ == Device::CPU ? src.device_ : device_).copy(raw(), src.raw(), nbytes(), kind);
    return;
  }
  strided_copy(static_cast<char*>(raw()), static_cast<const char*>(src.raw()), shape_, strides_, src.strides_,
               dtype_size(dtype_), 0);
}

Tensor Tensor::clone() const {
  Tensor t = zeros(shape_, dtype_, device_);
  if (device_ != Device::CPU && !is_contiguous()) {  // gather on the host, then upload
    t.copy_(to(Device::CPU));
    return t;
  }
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device_ && is_contiguous()) return *this;
  if (dev == device_) return clone();
  Tensor src = *this;
  if (!is_contiguous()) {
    check(device_ == Device::CPU, "Tensor::to: a non-contiguous tensor on device '" + device_name(device_) +
                                      "' (make it contiguous there first)");
    src = clone();
  }
  Tensor t = zeros(shape_, dtype_, dev);
  t.copy_(src);
  return t;
}

void Tensor::zero_() {
  if (device_ != Device::CPU) {
    check(is_contiguous(), "Tensor::zero_: a non-contiguous tensor on device '" + device_name(device_) + "'");
    device_allocator(device_).fill_zero(raw(), nbytes());
    return;
  }
  if (is_contiguous()) {
    std::memset(raw(), 0, nbytes());
  } else {
    Tensor z = zeros(shape_, dtype_);
    copy_(z);
  }
}

void Tensor::fill_(float v) {
  check_host(*this, "fill_");
  check(dtype_ == DType::F32 && is_contiguous(), "Tensor::fill_ needs a contiguous f32 tensor");
  float* p = f32();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
}

Tensor Tensor::to_f32() const {
  check_host(*this, "to_f32");
  Tensor c = is_contiguous() ? *this : clone();
  Tensor out = zeros(shape_);
  float* o = out.f32();
  int64_t n = numel();
  switch (dtype_) {
    case DType::F32: std::memcpy(o, c.raw(), static_cast<size_t>(n) * 4); break;
    case DType::BF16: {
      const auto* p = static_cast<const uint16_t*>(c.raw());
      for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(p[i]);
      break;
    }
    case DType::F16: {
      const auto* p = static_cast<const uint16_t*>(c.raw());
      for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(p[i]);
      break;
    }
    case DType::F64: {
      const auto* p = static_cast<const double*>(c.raw());
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(p[i]);
      break;
    }
    default: throw Error("Tensor::to_f32: " + dtype_name(dtype_) + " is not a float dtype");
  }
  return out;
}

Tensor Tensor::to_dtype(DType dt) const {
  check_host(*this, "to_dtype");
  check(dtype_ == DType::F32, "Tensor::to_dtype: source must be F32");
  Tensor c = is_contiguous() ? *this : clone();
  if (dt == DType::F32) return c.clone();
  Tensor out = zeros(shape_, dt);
  if (dt == DType::F64) {  // exact widening
    auto* d = static_cast<double*>(out.raw());
    const float* p = c.f32();
    for (int64_t i = 0, n = numel(); i < n; ++i) d[i] = p[i];
    return out;
  }
  const float* p = c.f32();
  auto* o = static_cast<uint16_t*>(out.raw());
  int64_t n = numel();
  if (dt == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(p[i]);
  } else if (dt == DType::F16) {
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_f16(p[i]);
  } else {
    throw Error("Tensor::to_dtype: unsupported target " + dtype_name(dt));
  }
  return out;
}

std::vector<float> Tensor::to_vector() const {
  Tensor c = (device_ == Device::CPU ? *this : to(Device::CPU)).to_f32();
  return std::vector<float>(c.f32(), c.f32() + c.numel());
}

}  // namespace twinkle
