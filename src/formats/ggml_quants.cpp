#include "formats/ggml_quants.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "core/dtype.h"

namespace hearth {
namespace {

// C's float -> int8_t conversion where it is defined (truncation toward zero); NaN and
// out-of-range values, undefined there, saturate here.
int8_t trunc_to_i8(float v) {
  if (std::isnan(v)) return 0;
  if (v <= -128.0f) return -128;
  if (v >= 127.0f) return 127;
  return static_cast<int8_t>(v);
}

}  // namespace

// d = amax / 127, q = round(x / d) (half away from zero), as quantize_row_q8_0_ref.
void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n) {
  row_bytes(GgmlType::kQ8_0, n);
  for (int64_t b = 0; b < n / 32; ++b, src += 32, ++dst) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(src[j]);
      amax = amax > a ? amax : a;  // ggml's MAX(amax, a): a NaN replaces amax
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst->d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) dst->qs[j] = trunc_to_i8(std::round(src[j] * id));
  }
}

// d = -max / 8 where max is the first element of largest magnitude (sign kept), so that
// element maps to code 0; q = min(15, trunc(x / d + 8.5)).
void quantize_row_q4_0(const float* src, BlockQ4_0* dst, int64_t n) {
  row_bytes(GgmlType::kQ4_0, n);
  for (int64_t b = 0; b < n / 32; ++b, src += 32, ++dst) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst->d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min<int>(15, trunc_to_i8(src[j] * id + 8.5f));
      const int q1 = std::min<int>(15, trunc_to_i8(src[16 + j] * id + 8.5f));
      dst->qs[j] = static_cast<uint8_t>(static_cast<uint8_t>(q0) | (static_cast<uint8_t>(q1) << 4));
    }
  }
}

}  // namespace hearth
