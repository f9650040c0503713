// Element types and the f32 <-> bf16/f16 conversions every backend agrees on.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace hearth {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kU32, kU8, kI64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", ...
// Parses our names ("f32", "bf16", "f16") for flags.
std::optional<DType> dtype_from_name(std::string_view name);
inline bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace hearth
