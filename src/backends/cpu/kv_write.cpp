// New K/V rows into the paged cache, rounded to the cache's element type.
// k, v: [T, Hkv * Dh] f32; cache: [n_slots, Hkv * Dh] of f32, f16 or bf16; slots: [T].
#include <cstring>
#include <string>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"
#include "base/error.h"

namespace hearth::cpu {
namespace {

void store_scalar(const float* src, DType to, void* dst, int64_t n) {
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = to == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
}

// Rounds to nearest even like f32_to_f16 / f32_to_bf16 (NaN stays NaN, subnormals kept).
HEARTH_AVX512 void store_avx512(const float* src, DType to, void* dst, int64_t n) {
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, src + i);
    __m256i h;
    if (to == DType::kF16) {
      h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m512i bits = _mm512_castps_si512(x);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      const __m512i rounded =
          _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
      const __mmask16 nan =
          _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
      const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
      h = _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
    }
    _mm256_mask_storeu_epi16(out + i, m, h);
  }
}

}  // namespace

void store_f32_as(Isa isa, const float* src, DType to, void* dst, int64_t n) {
  if (to == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (isa == Isa::kAvx512) {
    store_avx512(src, to, dst, n);
  } else {
    store_scalar(src, to, dst, n);
  }
}

void kv_write(Isa isa, const KvWriteArgs& a) {
  const size_t elem = dtype_size(a.cache_dtype);
  for (int64_t t = 0; t < a.T; ++t) {
    const int64_t slot = a.slots[t];
    HEARTH_CHECK_MSG(slot >= 0 && slot < a.n_slots, "kv_write: slot " + std::to_string(slot) + " outside the pool");
    const size_t at = static_cast<size_t>(slot * a.row) * elem;
    store_f32_as(isa, a.k + t * a.row, a.cache_dtype, static_cast<char*>(a.k_cache) + at, a.row);
    store_f32_as(isa, a.v + t * a.row, a.cache_dtype, static_cast<char*>(a.v_cache) + at, a.row);
  }
}

}  // namespace hearth::cpu
