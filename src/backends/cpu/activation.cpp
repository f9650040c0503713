// Elementwise kernels: the gated-MLP activation and the residual add.
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"

namespace hearth::cpu {
namespace {

// silu(g) * u = g / (1 + exp(-g)) * u
void silu_mul_scalar(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

HEARTH_AVX2 void silu_mul_avx2(const float* g, const float* u, int64_t n, float* out) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 vg = _mm256_loadu_ps(g + i);
    const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_setzero_ps(), vg));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(vg, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  silu_mul_scalar(g + i, u + i, n - i, out + i);
}

HEARTH_AVX512 void silu_mul_avx512(const float* g, const float* u, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    const __m512 vg = simd::load16_f32(g + i, m);
    const __m512 e = simd::exp16(_mm512_sub_ps(_mm512_setzero_ps(), vg));
    _mm512_mask_storeu_ps(out + i, m,
                          _mm512_mul_ps(_mm512_div_ps(vg, _mm512_add_ps(one, e)), simd::load16_f32(u + i, m)));
  }
}

void add_scalar(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

HEARTH_AVX2 void add_avx2(float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  add_scalar(a + i, b + i, n - i);
}

HEARTH_AVX512 void add_avx512(float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    _mm512_mask_storeu_ps(a + i, m, _mm512_add_ps(simd::load16_f32(a + i, m), simd::load16_f32(b + i, m)));
  }
}

}  // namespace

void silu_mul(Isa isa, const float* gate, const float* up, int64_t n, float* out) {
  switch (isa) {
    case Isa::kAvx512: return silu_mul_avx512(gate, up, n, out);
    case Isa::kAvx2: return silu_mul_avx2(gate, up, n, out);
    case Isa::kScalar: return silu_mul_scalar(gate, up, n, out);
  }
}

void add(Isa isa, float* a, const float* b, int64_t n) {
  switch (isa) {
    case Isa::kAvx512: return add_avx512(a, b, n);
    case Isa::kAvx2: return add_avx2(a, b, n);
    case Isa::kScalar: return add_scalar(a, b, n);
  }
}

}  // namespace hearth::cpu
