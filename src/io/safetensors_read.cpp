// Safetensors reader: validation of untrusted headers, mmap, dtype conversion.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "io_util.h"
#include "twinkle/io/safetensors.h"

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace twinkle {

using io_detail::quote;
using json = nlohmann::json;

namespace {
constexpr uint64_t kMaxHeader = 100'000'000;  // same limit as the Rust crate (MAX_HEADER_SIZE)

const char* json_type(const json& j) { return j.type_name(); }
}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

struct SafetensorsFile::Impl {
  std::string path;
  const unsigned char* base = nullptr;  // start of the file bytes
  size_t size = 0;
  size_t data_start = 0;  // 8 + N
  void* map_addr = nullptr;
  size_t map_len = 0;
  std::vector<unsigned char> owned;  // open_from_memory
  std::unordered_map<std::string, TensorInfo> tensors;
  std::vector<std::string> order;  // by data offset
  std::map<std::string, std::string> metadata;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (map_addr) munmap(map_addr, map_len);
  }

  const unsigned char* data_of(const TensorInfo& t) const { return base + data_start + t.offset; }
  const TensorInfo& get(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw Error(path + ": no tensor " + quote(name));
    return it->second;
  }
  void parse();
};

namespace {

[[noreturn]] void fail_field(const std::string& path, const std::string& name, const std::string& field,
                             const std::string& what) {
  throw Error(path + ": tensor " + quote(name) + ": field '" + field + "' " + what);
}

// Reads a JSON integer that must be >= 0 (nlohmann stores non-negative ints as unsigned).
uint64_t get_uint(const std::string& path, const std::string& name, const std::string& field, const json& v,
                  const char* what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) fail_field(path, name, field, std::string("has a negative ") + what + " " + v.dump());
  fail_field(path, name, field,
             std::string("must hold non-negative integers, got ") + json_type(v) + " " + v.dump().substr(0, 40));
}

}  // namespace

void SafetensorsFile::Impl::parse() {
  if (size < 8)
    throw Error(path + ": file is " + std::to_string(size) +
                " bytes, shorter than the 8-byte safetensors header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  if (n > kMaxHeader)
    throw Error(path + ": header length " + std::to_string(n) + " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  if (n > size - 8)
    throw Error(path + ": header length " + std::to_string(n) + " exceeds the file size " + std::to_string(size) +
                " (truncated or not a safetensors file)");
  data_start = 8 + static_cast<size_t>(n);
  const size_t data_len = size - data_start;

  const char* hb = reinterpret_cast<const char*>(base + 8);
  std::set<std::string> seen;
  json header;
  try {
    header = json::parse(hb, hb + n, [&](int depth, json::parse_event_t ev, json& parsed) {
      if (depth == 1 && ev == json::parse_event_t::key) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!seen.insert(k).second) throw Error(path + ": duplicate tensor name " + quote(k) + " in the header");
      }
      if (depth > 16) throw Error(path + ": header JSON nested deeper than 16 levels");
      return true;
    });
  } catch (const json::exception& e) {
    throw Error(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object())
    throw Error(path + ": header must be a JSON object, got " + std::string(json_type(header)));

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  spans.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object())
        throw Error(path + ": '__metadata__' must be an object of strings, got " + std::string(json_type(v)));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw Error(path + ": '__metadata__' entry " + quote(m.key()) + " must be a string, got " +
                      json_type(m.value()));
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object())
      throw Error(path + ": tensor " + quote(name) + ": entry must be an object, got " + json_type(v));
    auto fd = v.find("dtype"), fs = v.find("shape"), fo = v.find("data_offsets");
    if (fd == v.end()) fail_field(path, name, "dtype", "is missing");
    if (fs == v.end()) fail_field(path, name, "shape", "is missing");
    if (fo == v.end()) fail_field(path, name, "data_offsets", "is missing");
    if (!fd->is_string()) fail_field(path, name, "dtype", std::string("must be a string, got ") + json_type(*fd));
    TensorInfo t;
    try {
      t.dtype = dtype_from_name(fd->get<std::string>());
    } catch (const Error& e) {
      fail_field(path, name, "dtype", std::string("is unsupported: ") + e.what());
    }
    if (!fs->is_array()) fail_field(path, name, "shape", std::string("must be an array, got ") + json_type(*fs));
    // numel with checked multiplication; the product of the non-zero dims must fit too, so
    // that strides of a zero-size tensor such as [0, 2^40, 2^40] cannot overflow later.
    uint64_t numel = 1, nonzero = 1;
    bool overflow = false;
    for (const auto& d : *fs) {
      uint64_t x = get_uint(path, name, "shape", d, "dimension");
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail_field(path, name, "shape", "has a dimension " + std::to_string(x) + " that overflows int64");
      t.shape.push_back(static_cast<int64_t>(x));
      if (__builtin_mul_overflow(numel, x, &numel)) overflow = true;
      if (x != 0 && __builtin_mul_overflow(nonzero, x, &nonzero)) overflow = true;
    }
    uint64_t nbytes = 0, nz_bytes = 0;
    if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes) ||
        __builtin_mul_overflow(nonzero, static_cast<uint64_t>(dtype_size(t.dtype)), &nz_bytes) ||
        nz_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail_field(path, name, "shape", shape_str(t.shape) + " overflows: its byte size does not fit in 64 bits");
    if (!fo->is_array() || fo->size() != 2)
      fail_field(path, name, "data_offsets",
                 std::string("must be an array of 2 integers [begin, end], got ") + fo->dump().substr(0, 60));
    uint64_t b = get_uint(path, name, "data_offsets", (*fo)[0], "offset");
    uint64_t e = get_uint(path, name, "data_offsets", (*fo)[1], "offset");
    if (b > e)
      fail_field(path, name, "data_offsets", "[" + std::to_string(b) + ", " + std::to_string(e) + "] has begin > end");
    if (e > data_len)
      fail_field(path, name, "data_offsets",
                 "end " + std::to_string(e) + " is beyond the data buffer (" + std::to_string(data_len) + " bytes)");
    if (e - b != nbytes)
      fail_field(path, name, "data_offsets",
                 "span " + std::to_string(e - b) + " bytes != " + std::to_string(nbytes) + " bytes of " +
                     dtype_name(t.dtype) + " " + shape_str(t.shape));
    t.offset = static_cast<size_t>(b);
    t.nbytes = static_cast<size_t>(nbytes);
    auto ins = tensors.emplace(name, std::move(t));
    spans.push_back({b, e, &ins.first->first});
  }
  // Coverage: sorted by (begin, end), consecutive spans must touch exactly.
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t at = 0;
  const std::string* prev = nullptr;
  for (const auto& s : spans) {
    if (s.begin < at)
      throw Error(path + ": tensors " + quote(*prev) + " and " + quote(*s.name) + " overlap (data bytes " +
                  std::to_string(s.begin) + ".." + std::to_string(at) + ")");
    if (s.begin > at)
      throw Error(path + ": hole in the data buffer at bytes [" + std::to_string(at) + ", " + std::to_string(s.begin) +
                  ") before tensor " + quote(*s.name) + " (not covered by any tensor)");
    at = s.end;
    prev = s.name;
    order.push_back(*s.name);
  }
  if (at != data_len)
    throw Error(path + ": data buffer has " + std::to_string(data_len - at) +
                " trailing bytes not covered by any tensor (buffer " + std::to_string(data_len) + " bytes, tensors end at " +
                std::to_string(at) + ")");
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  impl->size = static_cast<size_t>(st.st_size);
  if (impl->size >= 8) {
    void* p = mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error(path + ": cannot mmap " + std::to_string(impl->size) + " bytes: " + std::strerror(err));
    }
    impl->map_addr = p;
    impl->map_len = impl->size;
    impl->base = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  impl->parse();
  SafetensorsFile f;
  f.impl_ = std::move(impl);
  return f;
}

SafetensorsFile SafetensorsFile::open_from_memory(const void* data, size_t size, const std::string& name) {
  auto impl = std::make_shared<Impl>();
  impl->path = name;
  impl->owned.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + size);
  impl->base = impl->owned.data();
  impl->size = size;
  impl->parse();
  SafetensorsFile f;
  f.impl_ = std::move(impl);
  return f;
}

namespace {
const SafetensorsFile::Impl& need(const std::shared_ptr<const SafetensorsFile::Impl>& p) {
  if (!p) throw Error("SafetensorsFile: used before open()");
  return *p;
}
}  // namespace

const std::string& SafetensorsFile::path() const { return need(impl_).path; }
std::vector<std::string> SafetensorsFile::names() const { return need(impl_).order; }
bool SafetensorsFile::contains(const std::string& name) const { return need(impl_).tensors.count(name) != 0; }
const TensorInfo& SafetensorsFile::info(const std::string& name) const { return need(impl_).get(name); }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return need(impl_).metadata; }
const void* SafetensorsFile::raw_data(const std::string& name) const {
  const auto& im = need(impl_);
  return im.data_of(im.get(name));
}

// ---- conversion ---------------------------------------------------------------------------

namespace io_detail {

void convert_to_f32(const void* src, DType dt, float* dst, size_t n) {
  const unsigned char* s = static_cast<const unsigned char*>(src);
  switch (dt) {
    case DType::F32:
      std::memcpy(dst, s, n * 4);
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        uint32_t u = static_cast<uint32_t>(h) << 16;
        std::memcpy(dst + i, &u, 4);
      }
      return;
    case DType::F16: {
      size_t i = 0;
#if defined(__AVX512F__)
      for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * i))));
#elif defined(__F16C__)
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i))));
#endif
      for (; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    }
    case DType::F64:  // round to nearest even, as PyTorch's Tensor.float()
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, s + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return;
    default:
      throw Error("convert_to_f32: integer dtype " + dtype_name(dt));
  }
}

}  // namespace io_detail

namespace {
void require_float(const SafetensorsFile::Impl& im, const std::string& name, const TensorInfo& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F64)
    throw Error(im.path + ": tensor " + quote(name) + " has integer dtype " + dtype_name(t.dtype) +
                "; it cannot be loaded as F32 (use load())");
}
}  // namespace

Tensor SafetensorsFile::load(const std::string& name) const {
  const auto& im = need(impl_);
  const TensorInfo& t = im.get(name);
  Tensor out = Tensor::empty(t.shape, t.dtype);
  if (t.nbytes) std::memcpy(out.raw(), im.data_of(t), t.nbytes);
  return out;
}

Tensor SafetensorsFile::load_f32(const std::string& name) const {
  const auto& im = need(impl_);
  const TensorInfo& t = im.get(name);
  require_float(im, name, t);
  Tensor out = Tensor::empty(t.shape, DType::F32);
  io_detail::convert_to_f32(im.data_of(t), t.dtype, out.f32(), static_cast<size_t>(t.numel()));
  return out;
}

Tensor SafetensorsFile::load_f32_narrow(const std::string& name, int64_t dim, int64_t start, int64_t len) const {
  const auto& im = need(impl_);
  const TensorInfo& t = im.get(name);
  require_float(im, name, t);
  const int64_t nd = static_cast<int64_t>(t.shape.size());
  int64_t d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd)
    throw Error(im.path + ": tensor " + quote(name) + ": load_f32_narrow dim " + std::to_string(dim) +
                " out of range for shape " + shape_str(t.shape));
  const int64_t D = t.shape[static_cast<size_t>(d)];
  if (start < 0 || len < 0 || start > D || len > D - start)
    throw Error(im.path + ": tensor " + quote(name) + ": load_f32_narrow range [" + std::to_string(start) + ", " +
                std::to_string(start + len) + ") outside dim " + std::to_string(d) + " of shape " + shape_str(t.shape));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= t.shape[static_cast<size_t>(i)];
  for (int64_t i = d + 1; i < nd; ++i) inner *= t.shape[static_cast<size_t>(i)];
  Shape os = t.shape;
  os[static_cast<size_t>(d)] = len;
  Tensor out = Tensor::empty(os, DType::F32);
  const size_t es = dtype_size(t.dtype);
  const unsigned char* src = im.data_of(t);
  float* dst = out.f32();
  const size_t chunk = static_cast<size_t>(len * inner);
  for (int64_t o = 0; o < outer; ++o)
    io_detail::convert_to_f32(src + static_cast<size_t>((o * D + start) * inner) * es, t.dtype,
                              dst + static_cast<size_t>(o) * chunk, chunk);
  return out;
}

void SafetensorsFile::load_into(const std::string& name, Tensor& dst) const {
  const auto& im = need(impl_);
  const TensorInfo& t = im.get(name);
  std::string who = im.path + ": tensor " + quote(name) + ": load_into: ";
  if (!dst.defined()) throw Error(who + "destination tensor is undefined");
  if (dst.device() != Device::CPU) throw Error(who + "destination is on " + device_name(dst.device()) + ", not cpu");
  if (!dst.is_contiguous()) throw Error(who + "destination is not contiguous");
  if (dst.shape() != t.shape)
    throw Error(who + "destination shape " + shape_str(dst.shape()) + " != stored shape " + shape_str(t.shape));
  if (dst.dtype() == t.dtype) {
    if (t.nbytes) std::memcpy(dst.raw(), im.data_of(t), t.nbytes);
    return;
  }
  if (dst.dtype() != DType::F32)
    throw Error(who + "cannot convert stored " + dtype_name(t.dtype) + " to " + dtype_name(dst.dtype()));
  require_float(im, name, t);
  io_detail::convert_to_f32(im.data_of(t), t.dtype, dst.f32(), static_cast<size_t>(t.numel()));
}

}  // namespace twinkle
