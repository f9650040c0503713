// Dot products and row conversions: the inner loops of matmul, attention and embedding.
#include "backends/cpu/dot.h"

#include "backends/cpu/kernels.h"

namespace hearth::cpu {

float dot(Isa isa, const float* a, const void* b, DType bt, int64_t n) {
  return dispatch_float(bt, [&]<DType BT>() {
    switch (isa) {
      case Isa::kAvx512: return dot_avx512<BT>(a, b, n);
      case Isa::kAvx2: return dot_avx2<BT>(a, b, n);
      case Isa::kScalar: break;
    }
    return dot_scalar<BT>(a, b, n);
  });
}

namespace {

void convert_scalar(const void* src, DType st, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_scalar(src, st, i);
}

template <DType ST>
HEARTH_AVX2 void convert_avx2(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, simd::load8<ST>(src, i));
  for (; i < n; ++i) dst[i] = load_scalar(src, ST, i);
}

template <DType ST>
HEARTH_AVX512 void convert_avx512(const void* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    _mm512_mask_storeu_ps(dst + i, m, simd::load16<ST>(src, i, m));
  }
}

}  // namespace

void convert_row(Isa isa, const void* src, DType st, int64_t n, float* dst) {
  dispatch_float(st, [&]<DType ST>() {
    switch (isa) {
      case Isa::kAvx512: return convert_avx512<ST>(src, n, dst);
      case Isa::kAvx2: return convert_avx2<ST>(src, n, dst);
      case Isa::kScalar: return convert_scalar(src, ST, n, dst);
    }
  });
}

}  // namespace hearth::cpu
