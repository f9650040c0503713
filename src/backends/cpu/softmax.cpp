// Row softmax (max-subtracted) and argmax (first maximum wins, like torch.argmax).
#include <cmath>
#include <limits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"

namespace hearth::cpu {
namespace {

void softmax_scalar(float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

HEARTH_AVX2 void softmax_avx2(float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = simd::hsum8(acc);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const __m256 vinv = _mm256_set1_ps(1.0f / sum);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
  for (; i < n; ++i) x[i] *= 1.0f / sum;
}

HEARTH_AVX512 void softmax_avx512(float* x, int64_t n) {
  __m512 vmx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    vmx = _mm512_mask_max_ps(vmx, m, vmx, simd::load16_f32(x + i, m));
  }
  vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    const __m512 e = simd::exp16(_mm512_sub_ps(simd::load16_f32(x + i, m), vmx));
    _mm512_mask_storeu_ps(x + i, m, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
  }
  const __m512 vinv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(acc));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(simd::load16_f32(x + i, m), vinv));
  }
}

int64_t argmax_scalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

// Max first (vectorized), then the first index holding it.
HEARTH_AVX512 int64_t argmax_avx512(const float* x, int64_t n) {
  __m512 vmx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    vmx = _mm512_mask_max_ps(vmx, m, vmx, simd::load16_f32(x + i, m));
  }
  const float mx = _mm512_reduce_max_ps(vmx);
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] == mx) return i;
  }
  return argmax_scalar(x, n);  // only reached for all-NaN rows
}

}  // namespace

void softmax_row(Isa isa, float* x, int64_t n) {
  switch (isa) {
    case Isa::kAvx512: return softmax_avx512(x, n);
    case Isa::kAvx2: return softmax_avx2(x, n);
    case Isa::kScalar: return softmax_scalar(x, n);
  }
}

int64_t argmax_row(Isa isa, const float* x, int64_t n) {
  // AVX2 gains little over the scalar loop here; it shares the scalar path.
  return isa == Isa::kAvx512 ? argmax_avx512(x, n) : argmax_scalar(x, n);
}

}  // namespace hearth::cpu
