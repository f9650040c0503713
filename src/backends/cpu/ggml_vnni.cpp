// Q6_K decode on AVX-512 VNNI: y = x w^T for few rows of x, reading each 210-byte block once.
//
// Q6_K (core/ggml_blocks.h): per 256 elements, w = d * sc[e / 16] * (q - 32) with 6-bit q, in
// two halves of 128. In a half, the 64 bytes of ql hold elements 0..63 in their low nibbles and
// 64..127 in their high nibbles; byte l of qh (32 bytes) holds the top two bits of elements l,
// l + 32, l + 64 and l + 96 (bits 0-1, 2-3, 4-5, 6-7). With qh2 = [qh, qh >> 2] (64 bytes),
//   codes of elements  0..63  = (ql & 0x0f) | ((qh2 << 4) & 0x30)
//   codes of elements 64..127 = ((ql >> 4) & 0x0f) | (qh2 & 0x30),
// two vectors of unsigned 6-bit codes that meet contiguous x. x is rounded to int8 per 256
// elements (dx = max|x| / 127, as llama.cpp's Q8_K); vpdpbusd started from -32 * (sum of the
// lane's four x codes) gives each int32 lane sum (q - 32) xq exactly; times the lane's integer
// scale it is summed over the block in int32, and the block adds d * dx * that sum in float.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/simd.h"

#define HEARTH_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace hearth::cpu {
namespace {

constexpr int64_t kBlock = 256;

// x rounded to int8 per 256 elements.
struct Q8Blocks {
  int64_t T = 0, blocks = 0;
  std::vector<int8_t> q;        // [T, K]
  std::vector<float> dx;        // [T, blocks]
  std::vector<int32_t> offset;  // [T, blocks, 4, 16]: -32 * (sum of each lane's 4 codes)
};

HEARTH_VNNI Q8Blocks quantize_x(const float* x, int64_t T, int64_t K) {
  Q8Blocks p;
  p.T = T;
  p.blocks = K / kBlock;
  p.q.resize(static_cast<size_t>(T * K));
  p.dx.resize(static_cast<size_t>(T * p.blocks));
  p.offset.resize(static_cast<size_t>(T * p.blocks * 64));
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < p.blocks; ++b) {
      const float* xb = x + t * K + b * kBlock;
      __m512 amax = _mm512_setzero_ps();
      for (int k = 0; k < kBlock; k += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(xb + k)));
      const float m = _mm512_reduce_max_ps(amax);
      p.dx[static_cast<size_t>(t * p.blocks + b)] = m / 127.0f;
      const __m512 inv = _mm512_set1_ps(m > 0 ? 127.0f / m : 0.0f);
      int8_t* qb = p.q.data() + t * K + b * kBlock;
      for (int k = 0; k < kBlock; k += 16) {
        const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + k), inv));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + k), _mm512_cvtepi32_epi8(v));
      }
      int32_t* off = p.offset.data() + (t * p.blocks + b) * 64;
      for (int v = 0; v < 4; ++v) {
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(qb + v * 64));
        _mm512_storeu_si512(off + v * 16, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-32)));
      }
    }
  }
  return p;
}

template <int kT>
HEARTH_VNNI void q6k_row(const Q8Blocks& p, const GgmlMatrix& w, const float* bias, float* y, int64_t n) {
  const uint8_t* row = w.blocks + static_cast<size_t>(n) * w.row_bytes;
  const int64_t K = w.K;
  const __m512i low4 = _mm512_set1_epi8(0x0f), top2 = _mm512_set1_epi8(0x30);
  // Lane l of the vector for elements 64v .. 64v + 63 of a block has scale sc[4v + l / 4].
  __m512i sc_idx[4];
  for (int v = 0; v < 4; ++v) {
    sc_idx[v] =
        _mm512_add_epi32(_mm512_set1_epi32(4 * v),
                         _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2));
  }
  __m512 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < p.blocks; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockQ6_K);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * sizeof(BlockQ6_K)), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * sizeof(BlockQ6_K) + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * sizeof(BlockQ6_K) + 128), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4 * sizeof(BlockQ6_K) + 192), _MM_HINT_T0);
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
    __m512i codes[4];
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(blk + half * 64);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + half * 32));
      const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      codes[2 * half] = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_slli_epi16(qh2, 4), top2));
      codes[2 * half + 1] =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), _mm512_and_si512(qh2, top2));
    }
    uint16_t dh;
    std::memcpy(&dh, blk + 208, 2);
    const float d = _cvtsh_ss(dh);
    for (int t = 0; t < kT; ++t) {
      const int8_t* xq = p.q.data() + t * K + b * kBlock;
      const int32_t* off = p.offset.data() + (t * p.blocks + b) * 64;
      __m512i isum = _mm512_setzero_si512();
      for (int v = 0; v < 4; ++v) {
        const __m512i dot =
            _mm512_dpbusd_epi32(_mm512_loadu_si512(off + v * 16), codes[v], _mm512_loadu_si512(xq + v * 64));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, _mm512_permutexvar_epi32(sc_idx[v], sc)));
      }
      const float f = d * p.dx[static_cast<size_t>(t * p.blocks + b)];
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(f), acc[t]);
    }
  }
  const float add = bias != nullptr ? bias[n] : 0.0f;
  for (int t = 0; t < kT; ++t) y[t * w.N + n] = _mm512_reduce_add_ps(acc[t]) + add;
}

template <int kT>
void q6k_rows(const Q8Blocks& p, const GgmlMatrix& w, const float* bias, float* y, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) q6k_row<kT>(p, w, bias, y, n);
}

}  // namespace

bool ggml_vnni_supports(const GgmlMatrix& w, int64_t T) {
  return has_avx512_vnni() && w.type == GgmlType::kQ6_K && T <= 4 && w.K % kBlock == 0;
}

void ggml_vnni_matmul(ThreadPool* pool, const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y) {
  const Q8Blocks p = quantize_x(x, T, w.K);
  auto run = [&](int64_t a, int64_t b) {
    switch (T) {
      case 1: q6k_rows<1>(p, w, bias, y, a, b); break;
      case 2: q6k_rows<2>(p, w, bias, y, a, b); break;
      case 3: q6k_rows<3>(p, w, bias, y, a, b); break;
      default: q6k_rows<4>(p, w, bias, y, a, b); break;
    }
  };
  parallel_rows(pool, w.N, 16, run);
}

}  // namespace hearth::cpu
