#include "twinkle/core/dtype.h"

#include <cmath>
#include <cstring>

#include "twinkle/core/error.h"

namespace twinkle {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::F64: return 8;
  }
  return 0;
}

std::string dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::F64: return "F64";
  }
  return "?";
}

DType dtype_from_name(const std::string& s) {
  if (s == "F32") return DType::F32;
  if (s == "BF16") return DType::BF16;
  if (s == "F16") return DType::F16;
  if (s == "I32") return DType::I32;
  if (s == "I64") return DType::I64;
  if (s == "F64") return DType::F64;
  throw Error("unknown dtype '" + s + "' (supported: F32, BF16, F16, F64, I32, I64)");
}

DType dtype_from_torch_name(const std::string& s) {
  if (s == "float32" || s == "float") return DType::F32;
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16" || s == "half") return DType::F16;
  if (s == "float64" || s == "double") return DType::F64;
  throw Error("unsupported torch_dtype '" + s + "' (supported: float32, bfloat16, float16, float64)");
}

std::string dtype_torch_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F64: return "float64";
    default: throw Error("dtype " + dtype_name(t) + " has no torch float name");
  }
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    if (mant) {  // NaN as the F16C / AVX-512 instruction vcvtph2ps converts it: sign and payload kept, quiet bit
      // set, so the scalar tail and the vector body of a conversion give the same bits
      const uint32_t u = (sign << 31) | 0x7fc00000u | (mant << 13);
      std::memcpy(&v, &u, 4);
      return v;
    }
    v = INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {  // subnormal half (or zero)
    float a;
    std::memcpy(&a, &absx, 4);
    // round-to-nearest-even via float add trick
    float r = a * 16777216.0f;  // 2^24
    uint32_t m = static_cast<uint32_t>(std::nearbyint(r));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((absx >> 23) - 112) << 10;
  uint32_t mant = (absx >> 13) & 0x3ffu;
  uint32_t rest = absx & 0x1fffu;
  uint32_t h = exp | mant;
  if (rest > 0x1000u || (rest == 0x1000u && (mant & 1u))) h += 1;
  return static_cast<uint16_t>(sign | h);
}

}  // namespace twinkle
