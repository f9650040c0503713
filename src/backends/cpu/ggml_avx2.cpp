// Q6_K and Q4_K matmuls (the file's block layout) on AVX2 without VNNI, as integer dots, in tiles
// of 16 weight rows against every 4 rows of x (prefill reads the matrix once, as quant_avx2.cpp
// does): x rounded to int8 per 256 elements as the VNNI decode rounds it (ggml_vnni.cpp:
// xq = rint(x / dx), dx = max|x| / 127). For Q6_K a block's dot is
//   d dx sum_s sc[s] sum_{k in s} (q_k - 32) xq_k,  s the 16 sub-blocks of 16 elements,
// with the -32 taken out as -32 d dx sum_s sc[s] (sum of xq over s), from sums made with x.
// Before this path, these matrices on an AVX2 machine dequantized each row in scalar code before
// a vector dot: a GGUF Q4_0 file's Q6_K LM head took most of its decode (bench/RESULTS.md, stop 48).
//
// Block (210 bytes): ql[128] | qh[64] | sc[16] (int8) | d (f16). In each half of 128 elements
// (ql += 64, qh += 32, sc += 8), elements 32g + l (g = 0..3, l = 0..31) take their low four bits
// from ql[32 (g & 1) + l] (the low nibble for g < 2, the high one after) and their top two from
// bits 2g, 2g + 1 of qh[l]: one 32-byte load of each gives 32 codes (0..63) in element order.
// vpmaddubsw (code x xq, pairs to s16: at most 2 * 63 * 127) and vpmaddwd by the sub-blocks' sc
// give 8 s32 lanes, 0-3 of sub-block 2g and 4-7 of 2g + 1, already scaled (a block's sum is at
// most 8 * 4 * 63 * 127 * 128 < 2^31), then by d dx in f32 once per block. The offsets (-32 for
// Q6_K, the mins for Q4_K) go the same way: 8 s32 lanes from the sums of xq per 16, in f32 once
// per block. Scaling by vpmaddwd and the offsets in vectors took a Q4_K_M decode from 12.7 to
// 19.5-23.9 tok/s on a 2-core Zen 5 run as AVX2 (bench/RESULTS.md, stop 51).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/simd.h"
#include "core/dtype.h"
#include "core/ggml_blocks.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kBlock = 256, kSub = 16;

// x rounded per block of 256: q [T, K], dx [T, blocks], and the sums of q per sub-block of 16
// [T, K / 16].
struct BlockX {
  int64_t K = 0, blocks = 0;
  std::vector<int8_t> q;
  std::vector<float> dx;
  std::vector<int16_t> sub_sums;  // at most 16 * 127
};

BlockX round_blocks(ThreadPool* pool, const float* x, int64_t T, int64_t K) {
  BlockX r;
  r.K = K;
  r.blocks = K / kBlock;
  r.q.resize(static_cast<size_t>(T * K));
  r.dx.resize(static_cast<size_t>(T * r.blocks));
  r.sub_sums.resize(static_cast<size_t>(T * K / kSub));
  parallel_rows(pool, T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t b = 0; b < r.blocks; ++b) {
        const float* xb = x + t * K + b * kBlock;
        float m = 0.0f;
        for (int64_t k = 0; k < kBlock; ++k) m = std::max(m, std::fabs(xb[k]));
        const float inv = m > 0 ? 127.0f / m : 0.0f;
        r.dx[static_cast<size_t>(t * r.blocks + b)] = m / 127.0f;
        for (int64_t s = 0; s < kBlock / kSub; ++s) {
          int16_t sum = 0;
          for (int64_t k = s * kSub; k < (s + 1) * kSub; ++k) {
            // Round to nearest (even) after the same product as the VNNI path's.
            const auto v = static_cast<int8_t>(std::lrint(xb[k] * inv));
            r.q[static_cast<size_t>(t * K + b * kBlock + k)] = v;
            sum = static_cast<int16_t>(sum + v);
          }
          r.sub_sums[static_cast<size_t>((t * K + b * kBlock) / kSub + s)] = sum;
        }
      }
    }
  });
  return r;
}

// One Q6_K block against kT rows of x (xq: each row's 256 values, sums: its 16 sums per 16, s16):
// the sub-blocks' s32 sums, scaled by their sc (vpmaddwd by sc, not by ones and a 32-bit
// multiply), into acc; per row the sums to take off, off[t] (8 s32 lanes that add up to
// sum_s sc_s (sum of xq over s), to be scaled by 32 d); returns d. Forced inline, as q4k_block: as
// calls the per-row arrays went through memory, ~10% of a Q4_K_M decode.
template <int kT>
HEARTH_AVX2 __attribute__((always_inline)) inline float q6k_block(const uint8_t* blk, const int8_t* const* xq,
                                                                  const int16_t* const* sums, __m256i* acc,
                                                                  __m256i* off) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(0x03);
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  uint16_t d_bits;
  std::memcpy(&d_bits, blk + 208, 2);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    for (int g = 0; g < 4; ++g) {
      const __m256i l = g % 2 == 0 ? l0 : l1;
      const __m256i nib = g < 2 ? _mm256_and_si256(l, low4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
      const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2 * g), two), 4);
      const __m256i q = _mm256_or_si256(nib, top);
      const int s = 8 * h + 2 * g;
      // The pairs of code x xq (at most 2 * 63 * 127) times sc (-128..127): each s32 lane is two
      // of them, a block's sum under 2^31.
      const __m256i scale = _mm256_setr_m128i(_mm_set1_epi16(sc[s]), _mm_set1_epi16(sc[s + 1]));
      for (int t = 0; t < kT; ++t) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + 128 * h + 32 * g));
        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), scale));
      }
    }
  }
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
  for (int t = 0; t < kT; ++t)
    off[t] = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums[t])), sc16);
  return _cvtsh_ss(d_bits);
}

// A Q4_K block's 8 6-bit scales (sc) and mins (mn), one byte each, from its 12 bytes s, as
// q4_k_scale_min gives them: sub-blocks 0-3 from the low 6 bits of s[0..3] and s[4..7]; 4-7 from
// the nibbles of s[8..11] with the top two bits of s[0..3] (scales) and s[4..7] (mins) above.
HEARTH_AVX2 inline void q4k_scales_mins(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
  uint32_t w[3];
  std::memcpy(w, s, 12);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu, mn_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
  *sc = sc_lo | static_cast<uint64_t>(sc_hi) << 32;
  *mn = mn_lo | static_cast<uint64_t>(mn_hi) << 32;
}

// The same for a Q4_K block (144 bytes: d | dmin | 12 bytes of 6-bit scales and mins | qs[128]):
// each 64 elements are 32 bytes of qs, low nibbles sub-block 2c and high nibbles 2c + 1 (32
// elements each), so a step's 8 s32 lanes are one sub-block's; value = d sc q - dmin m, so a block's
// dot is
//   d dx sum_j sc_j sum_{k in j} q_k xq_k - dmin dx sum_j m_j (sum of xq over j).
// off[t]: 8 s32 lanes, lane j = m_j (sum of xq over j), to be scaled by dmin; returns d, dmin.
template <int kT>
HEARTH_AVX2 __attribute__((always_inline)) inline std::pair<float, float> q4k_block(const uint8_t* blk,
                                                                                    const int8_t* const* xq,
                                                                                    const int16_t* const* sums,
                                                                                    __m256i* acc, __m256i* off) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  uint16_t bits[2];
  std::memcpy(bits, blk, 4);
  uint64_t sc, mn;
  q4k_scales_mins(blk + 4, &sc, &mn);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * c));
    const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    // Pairs of code x xq (at most 2 * 15 * 127) times sc (0..63) in vpmaddwd.
    const __m256i s_lo = _mm256_set1_epi16(static_cast<int16_t>((sc >> (16 * c)) & 0xff));
    const __m256i s_hi = _mm256_set1_epi16(static_cast<int16_t>((sc >> (16 * c + 8)) & 0xff));
    for (int t = 0; t < kT; ++t) {
      const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + 64 * c));
      const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t] + 64 * c + 32));
      const __m256i d_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), s_lo);
      const __m256i d_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), s_hi);
      acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(d_lo, d_hi));
    }
  }
  const __m256i mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn)));
  for (int t = 0; t < kT; ++t) {
    // The sums per 16, two a sub-block, to sums per sub-block.
    const __m256i per_sub = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums[t])), ones);
    off[t] = _mm256_mullo_epi32(per_sub, mins);
  }
  return {_cvtsh_ss(bits[0]), _cvtsh_ss(bits[1])};
}

// Rows [n0, n1) of y = x w^T + bias for kT rows of x, block by block: the block's s32 sums times
// d dx, less its offsets times dx (32 d for Q6_K, dmin for Q4_K), in f32.
template <GgmlType kType, int kT>
HEARTH_AVX2 void rows(const BlockX& xr, int64_t t0, const GgmlMatrix& w, const float* bias, float* y, int64_t n0,
                      int64_t n1) {
  constexpr size_t kBlockBytes = kType == GgmlType::kQ6_K ? sizeof(BlockQ6_K) : sizeof(BlockQ4_K);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* blk = w.blocks + static_cast<size_t>(n) * w.row_bytes;
    __m256 total[kT];
    for (int t = 0; t < kT; ++t) total[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < xr.blocks; ++b, blk += kBlockBytes) {
      const int8_t* xq[kT];
      const int16_t* sums[kT];
      __m256i acc[kT], off[kT];
      for (int t = 0; t < kT; ++t) {
        xq[t] = xr.q.data() + (t0 + t) * w.K + b * kBlock;
        sums[t] = xr.sub_sums.data() + ((t0 + t) * w.K + b * kBlock) / kSub;
        acc[t] = _mm256_setzero_si256();
      }
      float d, off_scale;
      if constexpr (kType == GgmlType::kQ6_K) {
        d = q6k_block<kT>(blk, xq, sums, acc, off);
        off_scale = 32.0f * d;
      } else {
        std::tie(d, off_scale) = q4k_block<kT>(blk, xq, sums, acc, off);
      }
      for (int t = 0; t < kT; ++t) {
        const float dx = xr.dx[static_cast<size_t>((t0 + t) * xr.blocks + b)];
        total[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[t]), _mm256_set1_ps(d * dx), total[t]);
        total[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(off[t]), _mm256_set1_ps(off_scale * dx), total[t]);
      }
    }
    for (int t = 0; t < kT; ++t) y[(t0 + t) * w.N + n] = simd::hsum8(total[t]) + (bias != nullptr ? bias[n] : 0.0f);
  }
}

template <GgmlType kType>
void rows_for(int64_t kt, const BlockX& xr, int64_t t0, const GgmlMatrix& w, const float* bias, float* y, int64_t n0,
              int64_t n1) {
  switch (kt) {
    case 1: rows<kType, 1>(xr, t0, w, bias, y, n0, n1); break;
    case 2: rows<kType, 2>(xr, t0, w, bias, y, n0, n1); break;
    case 3: rows<kType, 3>(xr, t0, w, bias, y, n0, n1); break;
    default: rows<kType, 4>(xr, t0, w, bias, y, n0, n1); break;
  }
}

}  // namespace

bool ggml_matmul_avx2(ThreadPool* pool, const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y) {
  const bool q6k = w.type == GgmlType::kQ6_K, q4k = w.type == GgmlType::kQ4_K;
  if (!(q6k || q4k) || w.in_lanes() || w.K % kBlock != 0) return false;
  const BlockX xr = round_blocks(pool, x, T, w.K);
  constexpr int64_t kRowTile = 16;
  const auto kernel = q6k ? rows_for<GgmlType::kQ6_K> : rows_for<GgmlType::kQ4_K>;
  parallel_rows(pool, w.N, kRowTile, [&](int64_t a, int64_t b) {
    for (int64_t n0 = a; n0 < b; n0 += kRowTile) {
      const int64_t n1 = std::min(b, n0 + kRowTile);
      for (int64_t t0 = 0; t0 < T; t0 += 4) kernel(std::min<int64_t>(4, T - t0), xr, t0, w, bias, y, n0, n1);
    }
  });
  return true;
}

}  // namespace hearth::cpu
