#include "core/dtype.h"

#include <cmath>

namespace hearth {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kU32: return 4;
    case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kU32: return "u32";
    case DType::kU8: return "u8";
    case DType::kI64: return "i64";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "float16") return DType::kF16;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      const float v = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {  // inf, or NaN made quiet with its payload kept (as F16C does)
    bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // overflow (rounds to inf) or inf
  if (abs < 0x38800000u) {                       // f16 subnormal or zero: round(|f| * 2^24)
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias the exponent, round the mantissa to nearest even.
  uint32_t v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | static_cast<uint16_t>(v >> 13);
}

}  // namespace hearth
