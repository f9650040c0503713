// y = x w^T for ggml block-quantized w (GGUF's Q8_0, Q4_0, Q4_K, Q6_K). Decode (few rows of
// x) is bandwidth bound: each weight row is read once. On AVX-512, Q8_0 and Q4_0 blocks are
// unpacked in registers: a Q8_0 block is d | 32 int8 codes, a Q4_0 block d | 16 bytes whose low
// nibbles are elements 0..15 and high nibbles 16..31, so both halves meet contiguous x and
// w = d * q is formed in registers. The other types dequantize the row into a buffer and take
// a vector dot. Prefill (many rows of x) dequantizes tiles of rows and runs them through the
// dense tiles (dequantized_tiles_matmul; in bf16 on AVX512-BF16), as quant_matmul.cpp does.
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "backends/cpu/ggml_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/page_prefetch.h"
#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/simd.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kDecodeRows = 4;  // x rows up to which the decode paths run

const uint8_t* row_of(const GgmlMatrix& w, int64_t n) { return w.blocks + static_cast<size_t>(n) * w.row_bytes; }

}  // namespace

namespace {

// A Q4_K row in lanes (core/ggml_blocks.h) -> n floats, bit for bit dequantize_lanes's: byte k
// of run h holds in its low nibble the code of element 32 (k / 8) + 16h + k % 8 and in its high
// nibble that of the element 8 on, so 8 bytes give two runs of 8 consecutive elements of
// sub-block k / 8; x = d1[s] * q - m1[s] (a product, then a difference, as the reference).
HEARTH_AVX512 void dequantize_q4_k_lanes_avx512(const uint8_t* p, float* dst, int64_t n) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / 256; ++b, p += sizeof(BlockQ4_K), dst += 256) {
    const float d = f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8));
    const float dmin = f16_to_f32(static_cast<uint16_t>(p[2] | p[3] << 8));
    uint64_t scales = 0, mins = 0;
    std::memcpy(&scales, p + 4, 6);
    std::memcpy(&mins, p + 10, 6);
    float d1[8], m1[8];
    for (int s = 0; s < 8; ++s) {
      d1[s] = d * static_cast<float>((scales >> (6 * s)) & 63);
      m1[s] = dmin * static_cast<float>((mins >> (6 * s)) & 63);
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i bytes = _mm512_loadu_si512(p + 16 + 64 * h);
      alignas(64) uint8_t nibbles[2][64];
      _mm512_store_si512(nibbles[0], _mm512_and_si512(bytes, low4));
      _mm512_store_si512(nibbles[1], _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4));
      for (int j = 0; j < 4; ++j) {  // bytes 16j .. 16j + 15: sub-blocks 2j and 2j + 1
        const __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(d1[2 * j]), _mm256_set1_ps(d1[2 * j + 1]), 1);
        const __m512 min = _mm512_insertf32x8(_mm512_set1_ps(m1[2 * j]), _mm256_set1_ps(m1[2 * j + 1]), 1);
        for (int nib = 0; nib < 2; ++nib) {
          const __m128i q8 = _mm_load_si128(reinterpret_cast<const __m128i*>(nibbles[nib] + 16 * j));
          const __m512 x = _mm512_sub_ps(_mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q8))), min);
          float* at = dst + 16 * h + 8 * nib;
          _mm256_storeu_ps(at + 32 * (2 * j), _mm512_castps512_ps256(x));
          _mm256_storeu_ps(at + 32 * (2 * j + 1), _mm512_extractf32x8_ps(x, 1));
        }
      }
    }
  }
}

// A Q6_K row in lanes -> n floats, bit for bit dequantize_lanes's: chunk v's 48 bytes hold 64
// six-bit codes, 8 to each 6 bytes, the k-th that of element 16 (k / 4) + 4v + k % 4, so 4
// codes give 4 consecutive elements of sub-block k / 4; x = (d * sc[s]) * (q - 32). vpermb puts
// each 6 bytes in a 64-bit lane and vpmultishiftqb takes its 8 codes out.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c"))) void dequantize_q6_k_lanes_vbmi(
    const uint8_t* p, float* dst, int64_t n) {
  alignas(64) uint8_t gather[64], shifts[64];
  for (int lane = 0; lane < 8; ++lane) {
    for (int i = 0; i < 8; ++i) {
      gather[8 * lane + i] = static_cast<uint8_t>(6 * lane + std::min(i, 5));
      shifts[8 * lane + i] = static_cast<uint8_t>(6 * i);
    }
  }
  const __m512i gather_v = _mm512_load_si512(gather), shifts_v = _mm512_load_si512(shifts);
  const __m512i six = _mm512_set1_epi8(63), bias = _mm512_set1_epi32(32);
  for (int64_t b = 0; b < n / 256; ++b, p += sizeof(BlockQ6_K), dst += 256) {
    const float d = f16_to_f32(static_cast<uint16_t>(p[208] | p[209] << 8));
    alignas(64) float ds[16];
    for (int s = 0; s < 16; ++s) ds[s] = d * static_cast<float>(static_cast<int8_t>(p[192 + s]));
    const __m512 ds_v = _mm512_load_ps(ds);
    for (int v = 0; v < 4; ++v) {
      const __m512i raw = _mm512_maskz_loadu_epi8(0xFFFFFFFFFFFFull, p + 48 * v);
      alignas(64) uint8_t codes[64];
      _mm512_store_si512(
          codes, _mm512_and_si512(_mm512_multishift_epi64_epi8(shifts_v, _mm512_permutexvar_epi8(gather_v, raw)), six));
      for (int j = 0; j < 4; ++j) {  // codes 16j .. 16j + 15: sub-blocks 4j .. 4j + 3
        const __m512i q = _mm512_sub_epi32(
            _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(codes + 16 * j))), bias);
        const __m512i sub = _mm512_add_epi32(
            _mm512_set1_epi32(4 * j),
            _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2));
        const __m512 x = _mm512_mul_ps(_mm512_permutexvar_ps(sub, ds_v), _mm512_cvtepi32_ps(q));
        alignas(64) float out[16];
        _mm512_store_ps(out, x);
        for (int g = 0; g < 4; ++g) std::memcpy(dst + 16 * (4 * j + g) + 4 * v, out + 4 * g, 4 * sizeof(float));
      }
    }
  }
}

}  // namespace

void ggml_dequantize_row(Isa isa, const GgmlMatrix& w, int64_t n, float* out) {
  // Prefill dequantizes every weight once per call: the scalar lanes decode took a fifth of a
  // Q4_K_M model's pp512 (bench/RESULTS.md, stop 49).
  if (w.type == GgmlType::kQ4_K && w.in_lanes() && isa == Isa::kAvx512) {
    dequantize_q4_k_lanes_avx512(row_of(w, n), out, w.K);
    return;
  }
  if (w.type == GgmlType::kQ6_K && w.in_lanes() && isa == Isa::kAvx512 && has_avx512_vbmi()) {
    dequantize_q6_k_lanes_vbmi(row_of(w, n), out, w.K);
    return;
  }
  dequantize_row(w.type, w.layout, row_of(w, n), out, w.K);
}

namespace {

// The scalar reference: dequantize the row, then a plain dot.
void rows_scalar(const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y, int64_t n0, int64_t n1) {
  std::vector<float> row(static_cast<size_t>(w.K));
  for (int64_t n = n0; n < n1; ++n) {
    ggml_dequantize_row(Isa::kScalar, w, n, row.data());
    for (int64_t t = 0; t < T; ++t) {
      float acc = 0;
      for (int64_t k = 0; k < w.K; ++k) acc += x[t * w.K + k] * row[static_cast<size_t>(k)];
      y[t * w.N + n] = acc + (bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

// Any type on a vector ISA: dequantize the row once, then a vector dot per x row.
void rows_dequant_dot(Isa isa, const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y, int64_t n0,
                      int64_t n1) {
  std::vector<float> row(static_cast<size_t>(w.K));
  for (int64_t n = n0; n < n1; ++n) {
    ggml_dequantize_row(isa, w, n, row.data());
    for (int64_t t = 0; t < T; ++t)
      y[t * w.N + n] = dot(isa, x + t * w.K, row.data(), DType::kF32, w.K) + (bias != nullptr ? bias[n] : 0.0f);
  }
}

HEARTH_AVX512 inline __m512 splat_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm512_set1_ps(_cvtsh_ss(h));
}

// 16 signed 8-bit codes -> 16 floats.
HEARTH_AVX512 inline __m512 widen_i8(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

// One weight row against kT x rows. The two halves of each block accumulate separately so
// that consecutive FMAs do not wait on each other.
template <GgmlType kType, int kT>
HEARTH_AVX512 void row_avx512(const float* x, int64_t K, const uint8_t* row, float* out) {
  __m512 acc[kT][2];
  for (int t = 0; t < kT; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (int64_t k = 0; k < K; k += 32) {
    __m512 w0, w1;
    if constexpr (kType == GgmlType::kQ8_0) {
      const uint8_t* b = row + (k / 32) * sizeof(BlockQ8_0);
      const __m512 d = splat_f16(b);
      w0 = _mm512_mul_ps(widen_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2))), d);
      w1 = _mm512_mul_ps(widen_i8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18))), d);
    } else {
      static_assert(kType == GgmlType::kQ4_0);
      const uint8_t* b = row + (k / 32) * sizeof(BlockQ4_0);
      const __m512 d = splat_f16(b);
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, low4), eight);
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), low4), eight);
      w0 = _mm512_mul_ps(widen_i8(lo), d);
      w1 = _mm512_mul_ps(widen_i8(hi), d);
    }
    for (int t = 0; t < kT; ++t) {
      acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * K + k), acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * K + k + 16), acc[t][1]);
    }
  }
  for (int t = 0; t < kT; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]));
}

template <GgmlType kType>
void rows_decode_avx512(const float* x, int64_t T, const GgmlMatrix& w, const float* bias, float* y, int64_t n0,
                        int64_t n1) {
  float out[kDecodeRows];
  prefetch_buffer(x, static_cast<size_t>(T * w.K));  // x: see prefetch_buffer
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = row_of(w, n);
    switch (T) {
      case 1: row_avx512<kType, 1>(x, w.K, row, out); break;
      case 2: row_avx512<kType, 2>(x, w.K, row, out); break;
      case 3: row_avx512<kType, 3>(x, w.K, row, out); break;
      default: row_avx512<kType, 4>(x, w.K, row, out); break;
    }
    for (int64_t t = 0; t < T; ++t) y[t * w.N + n] = out[t] + (bias != nullptr ? bias[n] : 0.0f);
  }
}

}  // namespace

void ggml_matmul(Isa isa, ThreadPool* pool, const float* x, int64_t T, const GgmlMatrix& w, const float* bias,
                 float* y) {
  if (isa == Isa::kAvx512 && ggml_vnni_supports(w, T)) {
    ggml_vnni_matmul(pool, x, T, w, bias, y);
    return;
  }
  if (isa == Isa::kAvx2 && ggml_matmul_avx2(pool, x, T, w, bias, y)) return;
  std::function<void(int64_t, int64_t)> run;
  int64_t grain_rows = 16;
  TileX tile_x{};
  if (isa == Isa::kScalar) {
    run = [&](int64_t a, int64_t b) { rows_scalar(x, T, w, bias, y, a, b); };
  } else if (T > kDecodeRows) {
    grain_rows = kDequantTileRows;
    tile_x = prepare_tile_x(isa, x, T, w.K);
    run = [&](int64_t a, int64_t b) {
      dequantized_tiles_matmul(
          isa, tile_x, T, w.K, w.N, [&](int64_t n, float* out) { ggml_dequantize_row(isa, w, n, out); }, bias, y, a, b);
    };
  } else if (isa == Isa::kAvx512 && w.type == GgmlType::kQ8_0) {
    run = [&](int64_t a, int64_t b) { rows_decode_avx512<GgmlType::kQ8_0>(x, T, w, bias, y, a, b); };
  } else if (isa == Isa::kAvx512 && w.type == GgmlType::kQ4_0) {
    run = [&](int64_t a, int64_t b) { rows_decode_avx512<GgmlType::kQ4_0>(x, T, w, bias, y, a, b); };
  } else {
    run = [&](int64_t a, int64_t b) { rows_dequant_dot(isa, x, T, w, bias, y, a, b); };
  }
  parallel_rows(pool, w.N, grain_rows, run);
}

void ggml_rows(Isa isa, const GgmlMatrix& w, const int32_t* ids, int64_t n_ids, float* out) {
  for (int64_t i = 0; i < n_ids; ++i) ggml_dequantize_row(isa, w, ids[i], out + i * w.K);
}

}  // namespace hearth::cpu
