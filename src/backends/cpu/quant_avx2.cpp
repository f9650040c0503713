// 4- and 8-bit affine matrices in the row layout on AVX2 without VNNI: integer dots, as
// llama.cpp's AVX2 kernels take Q4_0 and Q8_0, for up to kAvx2DecodeRows rows of x per pass over
// the matrix (prefill takes one pass per kAvx2DecodeRows rows). Before this path, these matrices
// took the scalar reference on AVX2 machines: 0.27 tok/s decoding a Qwen3-1.7B-shaped 4-bit model
// on a 2-core EPYC, now ~11 (bench/RESULTS.md, stop 48). Per group g of
// weight row n (scale s, bias b, codes q) and x row t,
//   sum_k x[k] (s q[k] + b) ~= s dx sum_k q[k] xq[k] + b sum_k x[k],
// with x rounded to int8 per group exactly as the VNNI panels round it (quant_panels.cpp:
// xq = rint(x / dx), dx = max|x| / 127) and the group sums of x exact.
//
// A step is 32 bytes of a row's codes.
//   4 bits, 64 elements: byte j holds elements 2j (low nibble) and 2j + 1 (high nibble), so xq
//     is stored per 64 as [the 32 even elements, the 32 odd ones], and the nibbles meet it with
//     two vpmaddubsw (u8 code x s8 x, adjacent pairs summed to s16: at most 2 * 15 * 127).
//     vpmaddwd by ones then takes the pairs to 8 s32 lanes.
//   8 bits, 32 elements: vpmaddubsw's pairs would overflow s16 (2 * 255 * 127), and llama.cpp's
//     sign trick needs codes in -127..127 where q - 128 reaches -128: codes and x are widened to
//     s16 and vpmaddwd sums the pairs to s32 directly.
// The 8 s32 lanes belong to one group, summed over its steps and scaled by s dx in f32 once per
// group; 4 bits with groups of 32 put two groups in a step (lanes 0-3 and 4-7), scaled per step.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/quant_kernels.h"
#include "backends/cpu/simd.h"
#include "core/dtype.h"

namespace hearth::cpu {
namespace {

// x rounded per group: q [T, K] (4 bits: each 64 as evens then odds), and per (t, g) dx and the
// exact sum of x.
struct RoundedX {
  int64_t K = 0, groups = 0;
  std::vector<int8_t> q;
  std::vector<float> dx, xsum;
};

RoundedX round_x(const float* x, int64_t T, const AffineMatrix& w) {
  RoundedX r;
  r.K = w.K;
  r.groups = w.K / w.group_size;
  r.q.resize(static_cast<size_t>(T * w.K));
  r.dx.resize(static_cast<size_t>(T * r.groups));
  r.xsum.resize(r.dx.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t g = 0; g < r.groups; ++g) {
      const float* xg = x + t * w.K + g * w.group_size;
      float m = 0.0f, sum = 0.0f;
      for (int64_t k = 0; k < w.group_size; ++k) {
        m = std::max(m, std::fabs(xg[k]));
        sum += xg[k];
      }
      const float inv = m > 0 ? 127.0f / m : 0.0f;
      for (int64_t k = 0; k < w.group_size; ++k) {
        // Round to nearest (even) after the same product as the VNNI path's.
        const auto v = static_cast<int8_t>(std::lrint(xg[k] * inv));
        const int64_t e = g * w.group_size + k;
        const int64_t at = w.bits == 4 ? e / 64 * 64 + (e % 2) * 32 + (e % 64) / 2 : e;
        r.q[static_cast<size_t>(t * w.K + at)] = v;
      }
      const auto i = static_cast<size_t>(t * r.groups + g);
      r.dx[i] = m / 127.0f;
      r.xsum[i] = sum;
    }
  }
  return r;
}

// A row's groups of scales (or biases) as f32: bf16 by a shift, f16 by F16C, f32 as is.
HEARTH_AVX2 void params_f32(const void* p, DType t, int64_t at, int64_t n, float* out) {
  if (t == DType::kF32) {
    std::memcpy(out, static_cast<const float*>(p) + at, n * sizeof(float));
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(p) + at;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, t == DType::kBF16 ? simd::load8_bf16(h + i) : simd::load8_f16(h + i));
  for (; i < n; ++i) out[i] = t == DType::kBF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
}

// The s32 dot lanes of one 32-byte step of codes against x row t's int8 values at xq.
template <int kBits>
HEARTH_AVX2 inline __m256i step_dot(__m256i codes, const int8_t* xq) {
  if constexpr (kBits == 4) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(codes, low4), hi = _mm256_and_si256(_mm256_srli_epi16(codes, 4), low4);
    const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
    const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
    return _mm256_madd_epi16(pairs, ones);
  } else {
    const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xq));
    const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16));
    const __m256i a = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(codes)), _mm256_cvtepi8_epi16(x0));
    const __m256i b =
        _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(codes, 1)), _mm256_cvtepi8_epi16(x1));
    return _mm256_add_epi32(a, b);
  }
}

// Rows [n0, n1) of y = x w^T + bias for kT rows of x (a compile-time count, so that the
// accumulators stay in registers).
template <int kBits, int kT>
HEARTH_AVX2 void rows(const RoundedX& xr, const AffineMatrix& w, const float* bias, float* y, int64_t n0, int64_t n1) {
  const int64_t K = w.K, groups = xr.groups, gs = w.group_size;
  constexpr int64_t kStep = kBits == 4 ? 64 : 32;  // elements per 32 bytes of codes
  const int64_t steps_per_group = gs / kStep;      // 0 for a 64-element step over groups of 32
  std::vector<float> s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  for (int64_t n = n0; n < n1; ++n) {
    params_f32(w.scales, w.scale_type, n * groups, groups, s.data());
    if (w.has_biases()) {
      params_f32(w.biases, w.scale_type, n * groups, groups, b.data());
    } else {  // symmetric codes around 2^(bits-1) (GGUF Q4_0/Q8_0 as loaded)
      for (int64_t g = 0; g < groups; ++g) b[g] = -static_cast<float>(1 << (kBits - 1)) * s[g];
    }
    const auto* codes = reinterpret_cast<const uint8_t*>(w.packed + n * (K * kBits / 32));
    __m256 total[kT];
    for (int t = 0; t < kT; ++t) total[t] = _mm256_setzero_ps();
    if (steps_per_group == 0) {  // 4 bits, groups of 32: lanes 0-3 and 4-7 of a step
      for (int64_t e = 0, g = 0; e < K; e += kStep, g += 2) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + e * kBits / 8));
        const __m256 sg = _mm256_setr_m128(_mm_set1_ps(s[g]), _mm_set1_ps(s[g + 1]));
        for (int t = 0; t < kT; ++t) {
          const float* dx = xr.dx.data() + t * groups + g;
          const __m256 scale = _mm256_mul_ps(sg, _mm256_setr_m128(_mm_set1_ps(dx[0]), _mm_set1_ps(dx[1])));
          const __m256 dot = _mm256_cvtepi32_ps(step_dot<kBits>(v, xr.q.data() + t * K + e));
          total[t] = _mm256_fmadd_ps(dot, scale, total[t]);
        }
      }
    } else {  // whole steps per group: their s32 lanes summed, then one f32 step per group
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t e0 = g * gs;
        __m256i isum[kT];
        for (int t = 0; t < kT; ++t) isum[t] = _mm256_setzero_si256();
        for (int64_t e = e0; e < e0 + gs; e += kStep) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + e * kBits / 8));
          for (int t = 0; t < kT; ++t) isum[t] = _mm256_add_epi32(isum[t], step_dot<kBits>(v, xr.q.data() + t * K + e));
        }
        for (int t = 0; t < kT; ++t) {
          const __m256 scale = _mm256_set1_ps(s[g] * xr.dx[t * groups + g]);
          total[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), scale, total[t]);
        }
      }
    }
    for (int t = 0; t < kT; ++t) {
      float extra = bias != nullptr ? bias[n] : 0.0f;
      const float* xsum = xr.xsum.data() + t * groups;
      for (int64_t g = 0; g < groups; ++g) extra += b[g] * xsum[g];
      y[t * w.N + n] = simd::hsum8(total[t]) + extra;
    }
  }
}

template <int kBits>
void rows_for(int64_t T, const RoundedX& xr, const AffineMatrix& w, const float* bias, float* y, int64_t n0,
              int64_t n1) {
  switch (T) {
    case 1: rows<kBits, 1>(xr, w, bias, y, n0, n1); break;
    case 2: rows<kBits, 2>(xr, w, bias, y, n0, n1); break;
    case 3: rows<kBits, 3>(xr, w, bias, y, n0, n1); break;
    default: rows<kBits, 4>(xr, w, bias, y, n0, n1); break;
  }
}

}  // namespace

bool affine_matmul_avx2(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias,
                        float* y) {
  const bool shape_fits = (w.bits == 4 && w.K % 64 == 0) || (w.bits == 8 && w.K % 32 == 0);
  if (w.panels || !shape_fits || w.group_size % 32 != 0 || w.group_size > 128) return false;
  if (T > kAvx2DecodeRows) {  // prefill: kAvx2DecodeRows rows of x at a time
    for (int64_t t0 = 0; t0 < T; t0 += kAvx2DecodeRows) {
      affine_matmul_avx2(pool, x + t0 * w.K, std::min(kAvx2DecodeRows, T - t0), w, bias, y + t0 * w.N);
    }
    return true;
  }
  const RoundedX xr = round_x(x, T, w);
  parallel_rows(pool, w.N, 16, [&](int64_t a, int64_t b) {
    if (w.bits == 4) {
      rows_for<4>(T, xr, w, bias, y, a, b);
    } else {
      rows_for<8>(T, xr, w, bias, y, a, b);
    }
  });
  return true;
}

}  // namespace hearth::cpu
