// Q4_K and Q6_K decode on AVX-512 VNNI: y = x w^T for few rows of x, reading each block once.
// x is rounded to int8 per 256 elements (dx = max|x| / 127, as llama.cpp's Q8_K) and the codes
// meet it in vpdpbusd (unsigned codes times signed x, four per int32 lane).
//
// Q6_K (core/ggml_blocks.h): per 256 elements, w = d * sc[e / 16] * (q - 32) with 6-bit q, in
// two halves of 128. In a half, the 64 bytes of ql hold elements 0..63 in their low nibbles and
// 64..127 in their high nibbles; byte l of qh (32 bytes) holds the top two bits of elements l,
// l + 32, l + 64 and l + 96 (bits 0-1, 2-3, 4-5, 6-7). With qh2 = [qh, qh >> 2] (64 bytes),
//   codes of elements  0..63  = (ql & 0x0f) | ((qh2 << 4) & 0x30)
//   codes of elements 64..127 = ((ql >> 4) & 0x0f) | (qh2 & 0x30),
// two vectors of unsigned 6-bit codes that meet contiguous x. vpdpbusd started from -32 * (sum
// of the lane's four x codes) gives each int32 lane sum (q - 32) xq exactly; times the lane's
// integer scale it is summed over the block in int32, and the block adds d * dx * that sum.
//
// Q6_K in lanes (core/ggml_blocks.h, made at load where VBMI runs): each 48-byte chunk of codes
// becomes a vector of 64 bytes in three instructions (vpermb gives each qword its 6 bytes,
// vpmultishiftqb byte i of it the bits from 6i, an and keeps six), and int32 lane l of every
// chunk's vpdpbusd is sub-block l, so the four chain into one sum and the scales multiply it once
// a block: ~25 vector instructions a block where the file's layout takes ~52. x is rounded in
// the same order (quantize_x), the -32 offset taken per sub-block.
//
// Q4_K: per 256 elements, w = d * sc[j] * q - dmin * m[j] for sub-block j of 32, 4-bit q. Bytes
// 32c..32c+31 of qs hold sub-block 2c in their low nibbles and 2c + 1 in their high ones, so
// 64 bytes of qs give two vectors of codes: low nibbles (sub-blocks 2c, 2c + 2) and high ones
// (2c + 1, 2c + 3), each meeting two 32-byte runs of xq. The block adds
// dx * (d * sum_j sc[j] sum q xq - dmin * sum_j m[j] sum xq), the sums of xq per sub-block
// taken once per x.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/page_prefetch.h"
#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/simd.h"

#define HEARTH_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define HEARTH_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")))

namespace hearth::cpu {
namespace {

constexpr int64_t kBlock = 256;

// x rounded to int8 per 256 elements.
struct Q8Blocks {
  int64_t T = 0, blocks = 0;
  std::vector<int8_t> q;        // [T, K]; Q4_K: each block's 32-byte runs in q4k_row's order;
                                // lanes: each block in its lanes order
  std::vector<float> dx;        // [T, blocks]
  std::vector<int32_t> offset;  // Q6_K: [T, blocks, 4, 16]: -32 * (sum of each lane's 4 codes);
                                // lanes: [T, blocks, 16]: -32 * (sum of each sub-block's 16)
  std::vector<int32_t> sums;    // Q4_K: [T, blocks, 8]: sum of each sub-block's 32 codes
};

HEARTH_VNNI Q8Blocks quantize_x(const float* x, int64_t T, int64_t K, GgmlType type, bool lanes) {
  Q8Blocks p;
  p.T = T;
  p.blocks = K / kBlock;
  p.q.resize(static_cast<size_t>(T * K));
  p.dx.resize(static_cast<size_t>(T * p.blocks));
  if (type == GgmlType::kQ6_K) {
    p.offset.resize(static_cast<size_t>(T * p.blocks * (lanes ? 16 : 64)));
  } else {
    p.sums.resize(static_cast<size_t>(T * p.blocks * 8));
  }
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
      if (lanes && type == GgmlType::kQ6_K) {
        int32_t* off = p.offset.data() + (t * p.blocks + b) * 16;
        for (int s = 0; s < 16; ++s) {
          int sum = 0;
          for (int i = 0; i < 16; ++i) sum += qb[16 * s + i];
          off[s] = -32 * sum;
        }
      } else {
        for (int v = 0; v < 4; ++v) {
          const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(qb + v * 64));
          if (type == GgmlType::kQ6_K) {
            int32_t* off = p.offset.data() + (t * p.blocks + b) * 64;
            _mm512_storeu_si512(off + v * 16, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-32)));
          } else {  // lanes 0-7 and 8-15 are sub-blocks 2v and 2v + 1
            int32_t* sub = p.sums.data() + (t * p.blocks + b) * 8 + 2 * v;
            sub[0] = _mm512_mask_reduce_add_epi32(0x00FF, sums);
            sub[1] = _mm512_mask_reduce_add_epi32(0xFF00, sums);
          }
        }
      }
      if (lanes) {  // the sums above were taken in element order
        int8_t natural[kBlock];
        std::memcpy(natural, qb, kBlock);
        for (int k = 0; k < kBlock; ++k) qb[k] = natural[lanes_element(type, k)];
      } else if (type == GgmlType::kQ4_K) {
        // The 32-byte runs in the order q4k_row meets them (sub-blocks 0, 2, 1, 3, 4, 6, 5, 7),
        // so that each of its vectors of x is one load.
        uint8_t run[32];
        for (int64_t at : {32, 160}) {
          std::memcpy(run, qb + at, 32);
          std::memcpy(qb + at, qb + at + 32, 32);
          std::memcpy(qb + at + 32, run, 32);
        }
      }
    }
  }
  return p;
}

template <int kT>
HEARTH_VNNI void q6k_row(const Q8Blocks& p, const GgmlMatrix& w, const float* bias, float* y, int64_t n,
                         uintptr_t& last_page) {
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
    prefetch_page_ahead(blk, last_page);
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
HEARTH_VBMI void q6k_lanes_row(const Q8Blocks& p, const GgmlMatrix& w, const float* bias, float* y, int64_t n,
                               uintptr_t& last_page) {
  const uint8_t* row = w.blocks + static_cast<size_t>(n) * w.row_bytes;
  const int64_t K = w.K;
  // Byte 8j + i of a chunk's vector: byte 6j + min(i, 5) of the chunk (vpermb), then the 8 bits
  // from bit 6i of its qword (vpmultishiftqb): code 8j + i in the low six.
  alignas(64) static constexpr auto kSpread = [] {
    std::array<uint8_t, 128> t{};
    for (int j = 0; j < 8; ++j) {
      for (int i = 0; i < 8; ++i) {
        t[8 * j + i] = static_cast<uint8_t>(6 * j + std::min(i, 5));
        t[64 + 8 * j + i] = static_cast<uint8_t>(6 * i);
      }
    }
    return t;
  }();
  const __m512i spread = _mm512_load_si512(kSpread.data()), shifts = _mm512_load_si512(kSpread.data() + 64);
  const __m512i low6 = _mm512_set1_epi8(0x3f);
  __m512 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < p.blocks; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockQ6_K);
    prefetch_page_ahead(blk, last_page);
    __m512i codes[4];
    for (int v = 0; v < 4; ++v) {  // the last chunk's load ends at byte 207, inside the block
      const __m512i bytes = _mm512_permutexvar_epi8(spread, _mm512_loadu_si512(blk + 48 * v));
      codes[v] = _mm512_and_si512(_mm512_multishift_epi64_epi8(shifts, bytes), low6);
    }
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
    uint16_t dh;
    std::memcpy(&dh, blk + 208, 2);
    const float d = _cvtsh_ss(dh);
    for (int t = 0; t < kT; ++t) {
      const int8_t* xq = p.q.data() + t * K + b * kBlock;
      __m512i isum = _mm512_loadu_si512(p.offset.data() + (t * p.blocks + b) * 16);
      for (int v = 0; v < 4; ++v) isum = _mm512_dpbusd_epi32(isum, codes[v], _mm512_loadu_si512(xq + v * 64));
      const float f = d * p.dx[static_cast<size_t>(t * p.blocks + b)];
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(isum, sc)), _mm512_set1_ps(f), acc[t]);
    }
  }
  const float add = bias != nullptr ? bias[n] : 0.0f;
  for (int t = 0; t < kT; ++t) y[t * w.N + n] = _mm512_reduce_add_ps(acc[t]) + add;
}

// A Q4_K block's 12 scale bytes as 8 scales (low 8 bytes) and 8 mins (high 8 bytes), whole
// words at a time (core/ggml_blocks.h's q4_k_scale_min, four sub-blocks per step).
inline __m128i q4_k_scales_mins(const uint8_t* s12) {
  uint32_t s0, s1, s2;
  std::memcpy(&s0, s12, 4);
  std::memcpy(&s1, s12 + 4, 4);
  std::memcpy(&s2, s12 + 8, 4);
  const uint32_t scales_lo = s0 & 0x3F3F3F3Fu, mins_lo = s1 & 0x3F3F3F3Fu;
  const uint32_t scales_hi = (s2 & 0x0F0F0F0Fu) | (((s0 >> 6) & 0x03030303u) << 4);
  const uint32_t mins_hi = ((s2 >> 4) & 0x0F0F0F0Fu) | (((s1 >> 6) & 0x03030303u) << 4);
  return _mm_set_epi32(static_cast<int>(mins_hi), static_cast<int>(mins_lo), static_cast<int>(scales_hi),
                       static_cast<int>(scales_lo));
}

// y[t, n] = the sum of acc[t] less that of mins[t], plus the bias.
template <int kT>
HEARTH_VNNI void finish_q4k(const __m512 (&acc)[kT], const __m256 (&mins)[kT], const float* bias, float* y, int64_t N,
                            int64_t n) {
  const float add = bias != nullptr ? bias[n] : 0.0f;
  for (int t = 0; t < kT; ++t) {
    const __m128 m4 = _mm_add_ps(_mm256_castps256_ps128(mins[t]), _mm256_extractf128_ps(mins[t], 1));
    const __m128 m2 = _mm_add_ps(m4, _mm_movehl_ps(m4, m4));
    const float min_total = _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
    y[t * N + n] = _mm512_reduce_add_ps(acc[t]) - min_total + add;
  }
}

template <int kT>
HEARTH_VNNI void q4k_row(const Q8Blocks& p, const GgmlMatrix& w, const float* bias, float* y, int64_t n) {
  const uint8_t* row = w.blocks + static_cast<size_t>(n) * w.row_bytes;
  const int64_t K = w.K;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // codes[v] (below) has sub-blocks j and j + 2 in lanes 0-7 and 8-15, j = 4 (v / 2) + v % 2:
  // the lanes' indexes into the block's 8 scales.
  __m512i sc_idx[4];
  for (int v = 0; v < 4; ++v) {
    const int j = 4 * (v / 2) + v % 2;
    sc_idx[v] = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(j), _mm512_set1_epi32(j + 2));
  }
  __m512 acc[kT];
  __m256 mins[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps(), mins[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < p.blocks; ++b) {
    const auto* blk = reinterpret_cast<const BlockQ4_K*>(row + b * sizeof(BlockQ4_K));
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4) + 64, _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(blk + 4) + 128, _MM_HINT_T1);
    const __m128i sm = q4_k_scales_mins(blk->scales);
    const __m512i sc = _mm512_cvtepu8_epi32(sm);                    // lanes 0-7: the scales
    const __m256i m = _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8));  // the mins
    // codes[2h + hi]: qs bytes 64h..64h+63, low (hi = 0) or high nibbles.
    __m512i codes[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i qs = _mm512_loadu_si512(blk->qs + 64 * h);
      codes[2 * h] = _mm512_and_si512(qs, low4);
      codes[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4);
    }
    uint16_t dh, mh;
    std::memcpy(&dh, &blk->d, 2);
    std::memcpy(&mh, &blk->dmin, 2);
    const float d = _cvtsh_ss(dh), dmin = _cvtsh_ss(mh);
    for (int t = 0; t < kT; ++t) {
      const int8_t* xq = p.q.data() + t * K + b * kBlock;
      __m512i isum = _mm512_setzero_si512();
      for (int v = 0; v < 4; ++v) {
        // xq's runs are in codes' order (quantize_x): sub-blocks j and j + 2 (sc_idx's j) at 64 v.
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[v], _mm512_loadu_si512(xq + 64 * v));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(dot, _mm512_permutexvar_epi32(sc_idx[v], sc)));
      }
      const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.sums.data() + (t * p.blocks + b) * 8));
      const float dx = p.dx[static_cast<size_t>(t * p.blocks + b)];
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * dx), acc[t]);
      mins[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(m, sums)), _mm256_set1_ps(dmin * dx), mins[t]);
    }
  }
  finish_q4k(acc, mins, bias, y, w.N, n);
}

// Q4_K in lanes (core/ggml_blocks.h): the 12 bytes of scales and mins become 16 bytes in three
// instructions as Q6_K's codes do, and nibble vector u (run u / 2, low or high nibbles) has
// sub-block l / 2 in lane l, so the four dots chain into one sum and the scales (each twice)
// multiply it once a block: ~22 vector instructions a block where the file's layout takes ~35
// and a dozen scalar ones for the scales.
template <int kT>
HEARTH_VBMI void q4k_lanes_row(const Q8Blocks& p, const GgmlMatrix& w, const float* bias, float* y, int64_t n,
                               uintptr_t& last_page) {
  const uint8_t* row = w.blocks + static_cast<size_t>(n) * w.row_bytes;
  const int64_t K = w.K;
  // Bytes 0-5 (scales) to qword 0 and 6-11 (mins) to qword 1, then byte i of each qword the
  // bits from 6 (i % 8).
  const __m128i spread = _mm_set_epi8(11, 11, 11, 10, 9, 8, 7, 6, 5, 5, 5, 4, 3, 2, 1, 0);
  const __m128i shifts = _mm_set1_epi64x(0x2a241e18120c0600);
  const __m128i low6 = _mm_set1_epi8(0x3f);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  __m512 acc[kT];
  __m256 mins[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps(), mins[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < p.blocks; ++b) {
    const uint8_t* blk = row + b * sizeof(BlockQ4_K);
    prefetch_page_ahead(blk, last_page);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
    const __m128i sm = _mm_and_si128(_mm_multishift_epi64_epi8(shifts, _mm_permutexvar_epi8(spread, packed)), low6);
    const __m512i sc = _mm512_permutexvar_epi32(twice, _mm512_cvtepu8_epi32(sm));
    const __m256i m = _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8));
    __m512i codes[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i qs = _mm512_loadu_si512(blk + 16 + 64 * h);
      codes[2 * h] = _mm512_and_si512(qs, low4);
      codes[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(qs, 4), low4);
    }
    uint16_t dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, blk + 2, 2);
    const float d = _cvtsh_ss(dh), dmin = _cvtsh_ss(mh);
    for (int t = 0; t < kT; ++t) {
      const int8_t* xq = p.q.data() + t * K + b * kBlock;
      __m512i isum = _mm512_setzero_si512();
      for (int u = 0; u < 4; ++u) isum = _mm512_dpbusd_epi32(isum, codes[u], _mm512_loadu_si512(xq + 64 * u));
      const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.sums.data() + (t * p.blocks + b) * 8));
      const float dx = p.dx[static_cast<size_t>(t * p.blocks + b)];
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(isum, sc)), _mm512_set1_ps(d * dx), acc[t]);
      mins[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(m, sums)), _mm256_set1_ps(dmin * dx), mins[t]);
    }
  }
  finish_q4k(acc, mins, bias, y, w.N, n);
}

template <int kT>
void rows(const Q8Blocks& p, const GgmlMatrix& w, const float* bias, float* y, int64_t n0, int64_t n1) {
  uintptr_t last_page = 0;                  // the rows are one stream (prefetch_page_ahead)
  prefetch_buffer(p.q.data(), p.q.size());  // x: see prefetch_buffer
  prefetch_buffer(p.dx.data(), p.dx.size());
  prefetch_buffer(p.offset.data(), p.offset.size());
  prefetch_buffer(p.sums.data(), p.sums.size());
  for (int64_t n = n0; n < n1; ++n) {
    if (w.in_lanes() && w.type == GgmlType::kQ6_K) {
      q6k_lanes_row<kT>(p, w, bias, y, n, last_page);
    } else if (w.in_lanes()) {
      q4k_lanes_row<kT>(p, w, bias, y, n, last_page);
    } else if (w.type == GgmlType::kQ6_K) {
      q6k_row<kT>(p, w, bias, y, n, last_page);
    } else {
      q4k_row<kT>(p, w, bias, y, n);
    }
  }
}

}  // namespace

bool ggml_vnni_supports(const GgmlMatrix& w, int64_t T) {
  return has_avx512_vnni() && (w.type == GgmlType::kQ6_K || w.type == GgmlType::kQ4_K) && T <= 4 && w.K % kBlock == 0 &&
         (!w.in_lanes() || has_avx512_vbmi());
}

bool ggml_lanes_pay(Isa isa) { return isa == Isa::kAvx512 && has_avx512_vbmi(); }

void ggml_vnni_matmul(ThreadPool* pool, const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y) {
  const Q8Blocks p = quantize_x(x, T, w.K, w.type, w.in_lanes());
  auto run = [&](int64_t a, int64_t b) {
    switch (T) {
      case 1: rows<1>(p, w, bias, y, a, b); break;
      case 2: rows<2>(p, w, bias, y, a, b); break;
      case 3: rows<3>(p, w, bias, y, a, b); break;
      default: rows<4>(p, w, bias, y, a, b); break;
    }
  };
  parallel_rows(pool, w.N, 16, run);
}

}  // namespace hearth::cpu
