// twinkle/core/dtype.h — element types and bf16/f16 <-> f32 conversion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace twinkle {

/// Element types a Tensor can hold. Training math is f32; bf16/f16 (and f64: PyTorch writes it for
/// float64 tensors, e.g. an adapter trained in double) appear on disk (safetensors) and are
/// converted at load/save. i32/i64 hold token ids.
enum class DType { F32, BF16, F16, I32, I64, F64 };

/// Size in bytes of one element.
size_t dtype_size(DType t);
/// Safetensors / torch spelling: "F32", "BF16", "F16", "I32", "I64", "F64".
std::string dtype_name(DType t);
/// Parses a safetensors dtype string; throws twinkle::Error for an unknown one.
DType dtype_from_name(const std::string& s);
/// Parses a HF config `torch_dtype` ("float32", "bfloat16", "float16", "float64"); throws on others.
DType dtype_from_torch_name(const std::string& s);
/// HF config spelling of a float dtype ("float32", "bfloat16", "float16", "float64").
std::string dtype_torch_name(DType t);

/// bf16 -> f32 (exact).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// f32 -> bf16 with round-to-nearest-even (PyTorch's rule; NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
/// IEEE half -> f32 (exact, handles subnormals and inf; a NaN keeps its sign and payload with the quiet bit
/// set, the bits the F16C instruction vcvtph2ps gives, so vectorized and scalar conversions agree bit for bit).
float f16_to_f32(uint16_t h);
/// f32 -> IEEE half, round-to-nearest-even.
uint16_t f32_to_f16(float f);

}  // namespace twinkle
