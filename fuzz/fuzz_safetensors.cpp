// libFuzzer target: arbitrary bytes parsed as a safetensors file. Every accepted file must
// be fully loadable (raw, f32, narrowed) without a sanitizer report; every rejection must be
// a twinkle::Error. Built with clang++ -fsanitize=fuzzer,address,undefined (fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "twinkle/io/safetensors.h"

using namespace twinkle;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsFile f;
  try {
    f = SafetensorsFile::open_from_memory(data, size, "fuzz-input");
  } catch (const Error&) {
    return 0;
  }
  // Invariants the parser promises for accepted files.
  size_t covered = 0;
  for (const auto& name : f.names()) {
    const TensorInfo& t = f.info(name);
    if (t.offset + t.nbytes > size || static_cast<int64_t>(t.nbytes) != t.numel() * static_cast<int64_t>(dtype_size(t.dtype)))
      std::abort();
    covered += t.nbytes;
    Tensor raw = f.load(name);
    if (raw.nbytes() != t.nbytes || (t.nbytes && std::memcmp(raw.raw(), f.raw_data(name), t.nbytes) != 0)) std::abort();
    if (t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16) {
      Tensor x = f.load_f32(name);
      if (x.numel() != t.numel()) std::abort();
      if (!t.shape.empty()) {
        int64_t d = static_cast<int64_t>(t.shape.size()) - 1, n = t.shape.back();
        Tensor y = f.load_f32_narrow(name, d, n / 2, n - n / 2);
        const int64_t outer = n ? x.numel() / n : 0;
        if (y.numel() != outer * (n - n / 2)) std::abort();
        if (outer > 0 && std::memcmp(y.raw(), x.f32() + n / 2, static_cast<size_t>(n - n / 2) * 4) != 0) std::abort();
      }
    }
  }
  if (size >= 8 && covered > size) std::abort();
  return 0;
}
