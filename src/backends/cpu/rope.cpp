// Rotary position embedding, HF rotate-half layout: for i < half,
//   x'[i]        = x[i] * cos - x[i + half] * sin
//   x'[i + half] = x[i + half] * cos + x[i] * sin
// with angle = position * inv_freq[i] (f32, as HF computes it) and cos/sin scaled by
// attention_factor (YaRN). Dims past 2*half (partial rotary) pass through unchanged.
// x: [T, H, Dh] in place.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"

namespace hearth::cpu {
namespace {

void cos_sin(int32_t pos, const float* inv_freq, int64_t half, float af, float* c, float* s) {
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    c[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * af;
    s[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * af;
  }
}

void rotate_scalar(float* x, const float* c, const float* s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i] + a * s[i];
  }
}

HEARTH_AVX2 void rotate_avx2(float* x, const float* c, const float* s, int64_t half) {
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + half + i);
    const __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
    _mm256_storeu_ps(x + i, _mm256_sub_ps(_mm256_mul_ps(a, vc), _mm256_mul_ps(b, vs)));
    _mm256_storeu_ps(x + half + i, _mm256_add_ps(_mm256_mul_ps(b, vc), _mm256_mul_ps(a, vs)));
  }
  for (; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i] + a * s[i];
  }
}

HEARTH_AVX512 void rotate_avx512(float* x, const float* c, const float* s, int64_t half) {
  for (int64_t i = 0; i < half; i += 16) {
    const __mmask16 m = simd::tail_mask16(half - i);
    const __m512 a = simd::load16_f32(x + i, m), b = simd::load16_f32(x + half + i, m);
    const __m512 vc = simd::load16_f32(c + i, m), vs = simd::load16_f32(s + i, m);
    _mm512_mask_storeu_ps(x + i, m, _mm512_sub_ps(_mm512_mul_ps(a, vc), _mm512_mul_ps(b, vs)));
    _mm512_mask_storeu_ps(x + half + i, m, _mm512_add_ps(_mm512_mul_ps(b, vc), _mm512_mul_ps(a, vs)));
  }
}

// The cos and sin of the last call's rows ([T, half] each), kept by the calling thread: every
// layer of a forward, q and k, rotates the same positions by the same frequencies, so a step
// computes them once instead of twice per layer (libm's sincos was 0.15-0.17% of a 28-layer
// decode's profile). Keyed by the values, not the pointers, so nothing stale is reused.
struct CosSinRows {
  std::vector<int32_t> positions;
  std::vector<float> inv_freq;
  float attention_factor = 0.0f;
  std::vector<float> c, s;

  void compute(const int32_t* pos, int64_t T, const float* freq, int64_t half, float af) {
    const bool same = static_cast<int64_t>(positions.size()) == T && static_cast<int64_t>(inv_freq.size()) == half &&
                      attention_factor == af && std::equal(positions.begin(), positions.end(), pos) &&
                      std::equal(inv_freq.begin(), inv_freq.end(), freq);
    if (same) return;
    positions.assign(pos, pos + T);
    inv_freq.assign(freq, freq + half);
    attention_factor = af;
    c.resize(static_cast<size_t>(T * half));
    s.resize(static_cast<size_t>(T * half));
    for (int64_t t = 0; t < T; ++t) cos_sin(pos[t], freq, half, af, c.data() + t * half, s.data() + t * half);
  }
};

}  // namespace

void rope(Isa isa, float* x, int64_t T, int64_t H, int64_t Dh, const int32_t* positions, const float* inv_freq,
          int64_t half, float attention_factor) {
  thread_local CosSinRows rows;
  rows.compute(positions, T, inv_freq, half, attention_factor);
  for (int64_t t = 0; t < T; ++t) {
    const float* c = rows.c.data() + t * half;
    const float* s = rows.s.data() + t * half;
    for (int64_t h = 0; h < H; ++h) {
      float* xh = x + (t * H + h) * Dh;
      switch (isa) {
        case Isa::kAvx512: rotate_avx512(xh, c, s, half); break;
        case Isa::kAvx2: rotate_avx2(xh, c, s, half); break;
        case Isa::kScalar: rotate_scalar(xh, c, s, half); break;
      }
    }
  }
}

}  // namespace hearth::cpu
