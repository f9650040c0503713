// New K/V rows into the paged cache, rounded to the cache's element type.
// k, v: [T, Hkv * Dh] f32; cache: n_slots positions of Hkv * Dh f32, f16 or bf16 in KvOrder
// (kernels.h); slots: [T].
#include <algorithm>
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

// dst[i * stride] = src[i] for i < n.
template <typename T>
void spread(const T* src, int64_t n, T* dst, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) dst[i * stride] = src[i];
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
  const KvOrder& o = a.order;
  const int64_t row = o.Hkv * o.Dh;
  for (int64_t t = 0; t < a.T; ++t) {
    const int64_t slot = a.slots[t];
    HEARTH_CHECK_MSG(slot >= 0 && slot < a.n_slots, "kv_write: slot " + std::to_string(slot) + " outside the pool");
    for (int64_t h = 0; h < o.Hkv; ++h) {
      store_f32_as(isa, a.v + t * row + h * o.Dh, a.cache_dtype,
                   static_cast<char*>(a.v_cache) + static_cast<size_t>(o.v_at(slot, h, 0)) * elem, o.Dh);
      // K's dims lie block_size elements apart: rounded a piece at a time into a buffer on the
      // stack, as store_f32_as rounds, then spread. (A heap buffer per call here made glibc hand
      // a 2048-token prefill's big activations back to the kernel and fault them in again: pp2048
      // -30% until core/tensor.cpp fixed its thresholds, stop 42.)
      const float* k = a.k + t * row + h * o.Dh;
      char* dst = static_cast<char*>(a.k_cache) + static_cast<size_t>(o.k_at(slot, h, 0)) * elem;
      alignas(64) unsigned char rounded[1024];  // storage for 256 elements of either width
      for (int64_t d0 = 0; d0 < o.Dh; d0 += 256) {
        const int64_t n = std::min<int64_t>(256, o.Dh - d0);
        store_f32_as(isa, k + d0, a.cache_dtype, rounded, n);
        if (elem == sizeof(float)) {
          spread(reinterpret_cast<const float*>(rounded), n, reinterpret_cast<float*>(dst) + d0 * o.block_size,
                 o.block_size);
        } else {
          spread(reinterpret_cast<const uint16_t*>(rounded), n, reinterpret_cast<uint16_t*>(dst) + d0 * o.block_size,
                 o.block_size);
        }
      }
    }
  }
}

void kv_to_cpu_order(const void* slot_major, void* dst, size_t elem_bytes, int64_t n_slots, const KvOrder& order,
                     bool keys) {
  const auto* src = static_cast<const char*>(slot_major);
  auto* out = static_cast<char*>(dst);
  for (int64_t slot = 0; slot < n_slots; ++slot) {
    for (int64_t h = 0; h < order.Hkv; ++h) {
      for (int64_t d = 0; d < order.Dh; ++d) {
        const int64_t at = keys ? order.k_at(slot, h, d) : order.v_at(slot, h, d);
        std::memcpy(out + static_cast<size_t>(at) * elem_bytes,
                    src + static_cast<size_t>((slot * order.Hkv + h) * order.Dh + d) * elem_bytes, elem_bytes);
      }
    }
  }
}

}  // namespace hearth::cpu
