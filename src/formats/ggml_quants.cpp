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

// ggml's nearest_int: round half to even (its float trick), for |v| < 2^22; saturated here.
int nearest_int(float v) {
  if (std::isnan(v)) return 0;
  return static_cast<int>(std::nearbyint(std::clamp(v, -4194303.0f, 4194303.0f)));
}

// ggml's make_qx_quants(n, nmax, x, L, rmse_type = 1, weights = null): codes in [-nmax, nmax)
// stored as L + nmax, and the scale that minimizes the x^2-weighted squared error over 19
// candidate inverse scales around -nmax / max (max: the first element of largest magnitude).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) {  // ggml's GROUP_MAX_EPS
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  auto code = [&](float iscale, int i) { return std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = code(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l * l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = code(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l * l);
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + code(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
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

// Per block of 256: a scale per 16 elements from make_qx_quants (6-bit codes), the scales
// quantized to int8 against the largest (d = max_scale / -128), then every code recomputed
// against its rounded scale; packed as quantize_row_q6_K_ref packs them (docs/gguf.md).
void quantize_row_q6_K(const float* src, BlockQ6_K* dst, int64_t n) {
  row_bytes(GgmlType::kQ6_K, n);
  for (int64_t b = 0; b < n / 256; ++b, src += 256, ++dst) {
    int8_t L[256];
    float scales[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, src + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    *dst = BlockQ6_K{};
    if (max_abs_scale < 1e-15f) continue;  // all zero, d = 0
    const float iscale = -128.0f / max_scale;
    dst->d = f32_to_f16(1.0f / iscale);
    for (int ib = 0; ib < 16; ++ib)
      dst->scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; ++j) {
      const float d = f16_to_f32(dst->d) * static_cast<float>(dst->scales[j]);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(src[16 * j + i] / d), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {  // two halves of 128: 64 bytes of ql, 32 of qh each
      const int8_t* q = L + 128 * h;
      uint8_t* ql = dst->ql + 64 * h;
      uint8_t* qh = dst->qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const auto u = [&](int k) { return static_cast<uint8_t>(q[l + 32 * k]); };
        ql[l] = static_cast<uint8_t>((u(0) & 0xF) | ((u(2) & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((u(1) & 0xF) | ((u(3) & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((u(0) >> 4) | ((u(1) >> 4) << 2) | ((u(2) >> 4) << 4) | ((u(3) >> 4) << 6));
      }
    }
  }
}

}  // namespace hearth
