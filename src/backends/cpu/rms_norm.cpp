// y = x * rsqrt(mean(x^2) + eps) * w, per row. x, y: [rows, d]; w: [d]. As HF's LlamaRMSNorm
// in f32: the weight multiplies the normalized value.
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"

namespace hearth::cpu {
namespace {

void rms_norm_scalar(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float ss = 0.0f;
    for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = w[i] * (xr[i] * inv);
  }
}

HEARTH_AVX2 void rms_norm_avx2(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    float ss = simd::hsum8(acc);
    for (; i < d; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= d; i += 8) {
      _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv)));
    }
    for (; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

HEARTH_AVX512 void rms_norm_avx512(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) {
      const __m512 v = simd::load16_f32(xr + i, simd::tail_mask16(d - i));
      acc = _mm512_fmadd_ps(v, v, acc);
    }
    const float inv = 1.0f / std::sqrt(_mm512_reduce_add_ps(acc) / static_cast<float>(d) + eps);
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int64_t i = 0; i < d; i += 16) {
      const __mmask16 m = simd::tail_mask16(d - i);
      const __m512 v = _mm512_mul_ps(simd::load16_f32(w + i, m), _mm512_mul_ps(simd::load16_f32(xr + i, m), vinv));
      _mm512_mask_storeu_ps(yr + i, m, v);
    }
  }
}

}  // namespace

void rms_norm(Isa isa, const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  switch (isa) {
    case Isa::kAvx512: return rms_norm_avx512(x, w, rows, d, eps, y);
    case Isa::kAvx2: return rms_norm_avx2(x, w, rows, d, eps, y);
    case Isa::kScalar: return rms_norm_scalar(x, w, rows, d, eps, y);
  }
}

}  // namespace hearth::cpu
