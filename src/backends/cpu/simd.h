// Vector building blocks for the AVX2 and AVX-512 kernels. Every function carries its own
// target attribute, so this header compiles into ordinary translation units and the code
// only runs after a CPUID check picked that ISA.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/dtype.h"

#define HEARTH_AVX2 __attribute__((target("avx2,fma,f16c")))
#define HEARTH_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace hearth::cpu::simd {

// ---- AVX-512: 16 floats ----

HEARTH_AVX512 inline __mmask16 tail_mask16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}
HEARTH_AVX512 inline __m512 load16_f32(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
HEARTH_AVX512 inline __m512 load16_bf16(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
HEARTH_AVX512 inline __m512 load16_f16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// exp(x) for x in [-87.3, 88.3] to about 2 ulp (Cephes polynomial); clamps outside.
HEARTH_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// ---- AVX2: 8 floats ----

HEARTH_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
HEARTH_AVX2 inline __m256 load8_bf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
HEARTH_AVX2 inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

HEARTH_AVX2 inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n by building the exponent bits.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace hearth::cpu::simd

namespace hearth::cpu::simd {

// Loads 16 (AVX-512) or 8 (AVX2) weights of type BT as floats.
template <DType BT>
HEARTH_AVX512 inline __m512 load16(const void* p, int64_t i, __mmask16 m) {
  if constexpr (BT == DType::kF32) {
    return load16_f32(static_cast<const float*>(p) + i, m);
  } else if constexpr (BT == DType::kBF16) {
    return load16_bf16(static_cast<const uint16_t*>(p) + i, m);
  } else {
    return load16_f16(static_cast<const uint16_t*>(p) + i, m);
  }
}
template <DType BT>
HEARTH_AVX2 inline __m256 load8(const void* p, int64_t i) {
  if constexpr (BT == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else if constexpr (BT == DType::kBF16) {
    return load8_bf16(static_cast<const uint16_t*>(p) + i);
  } else {
    return load8_f16(static_cast<const uint16_t*>(p) + i);
  }
}

}  // namespace hearth::cpu::simd
