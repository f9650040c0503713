// Per-ISA dot products and scalar element loads, shared by matmul, attention and embedding
// (they call the typed versions directly to keep the dtype/ISA switch out of inner loops).
#pragma once

#include <cstdint>

#include "backends/cpu/simd.h"
#include "core/dtype.h"

namespace hearth::cpu {

inline float load_scalar(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

template <DType BT>
float dot_scalar(const float* a, const void* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * load_scalar(b, BT, i);
  return s;
}

template <DType BT>
HEARTH_AVX2 float dot_avx2(const float* a, const void* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), simd::load8<BT>(b, i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), simd::load8<BT>(b, i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), simd::load8<BT>(b, i), acc0);
  float s = simd::hsum8(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * load_scalar(b, BT, i);
  return s;
}

template <DType BT>
HEARTH_AVX512 float dot_avx512(const float* a, const void* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), simd::load16<BT>(b, i, 0xffff), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), simd::load16<BT>(b, i + 16, 0xffff), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    acc0 = _mm512_fmadd_ps(simd::load16_f32(a + i, m), simd::load16<BT>(b, i, m), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// Calls fn.template operator()<BT>() with the float dtype as a compile-time constant.
template <typename Fn>
decltype(auto) dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::kBF16: return fn.template operator()<DType::kBF16>();
    case DType::kF16: return fn.template operator()<DType::kF16>();
    default: return fn.template operator()<DType::kF32>();
  }
}

}  // namespace hearth::cpu
