// 4- and 8-bit affine matrices in the row layout on AVX2 without VNNI: integer dots, as
// llama.cpp's AVX2 kernels take Q4_0 and Q8_0. Before this path, these matrices took the scalar
// reference on AVX2 machines: 0.27 tok/s decoding a Qwen3-1.7B-shaped 4-bit model on a 2-core
// EPYC, then ~11 (bench/RESULTS.md, stop 48). Per group g of weight row n (scale s, bias b,
// codes q) and x row t,
//   sum_k x[k] (s q[k] + b) ~= s dx sum_k q[k] xq[k] + b sum_k x[k],
// with x rounded to int8 per group exactly as the VNNI panels round it (quant_panels.cpp:
// xq = rint(x / dx), dx = max|x| / 127) and the group sums of x exact.
//
// Work goes in tiles of kRowTile weight rows: each tile's rows meet every x row, four at a time
// (kXRows), so a prefill reads the matrix from memory once, its tile from L1/L2 for each
// four rows of x, and x (rounded once for all its rows) from L1 for each weight row.
//
// A step is 32 bytes of a row's codes, unpacked once for the four x rows.
//   4 bits, 64 elements: byte j holds elements 2j (low nibble) and 2j + 1 (high nibble), so xq
//     is stored per 64 as [the 32 even elements, the 32 odd ones], and the nibbles meet it with
//     two vpmaddubsw (u8 code x s8 x, adjacent pairs summed to s16: at most 2 * 15 * 127).
//     vpmaddwd by ones then takes the pairs to 8 s32 lanes.
//   8 bits, 32 elements: vpmaddubsw's pairs would overflow s16 (2 * 255 * 127), and llama.cpp's
//     sign trick needs codes in -127..127 where q - 128 reaches -128: the codes are widened to
//     s16 and x is kept widened (xq16), so that vpmaddwd sums the pairs to s32 from memory.
// The 8 s32 lanes belong to one group, summed over its steps and scaled by s dx in f32 once per
// group; 4 bits with groups of 32 put two groups in a step (lanes 0-3 and 4-7), scaled per step
// by [s_g dx_g x4, s_g+1 dx_g+1 x4]. The bias terms b sum_k x[k] go 8 groups to a vector.
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

constexpr int64_t kRowTile = 16;  // weight rows per tile
constexpr int kXRows = static_cast<int>(kAvx2DecodeRows);

// x rounded per group: 4 bits, q8 [T, K] (each 64 as evens then odds); 8 bits, q16 [T, K] (the
// int8 values widened); per (t, g) dx and the exact sum of x; 4 bits in groups of 32, dx as a
// step's 8 lanes see it, dx_lanes [T, K / 64, 8].
struct RoundedX {
  int64_t K = 0, groups = 0;
  std::vector<int8_t> q8;
  std::vector<int16_t> q16;
  std::vector<float> dx, xsum, dx_lanes;
  // Symmetric matrices (no biases: codes around 2^(bits-1), GGUF Q4_0/Q8_0 as loaded) have
  // b = -2^(bits-1) s per group; xsum holds that power of two times the sums instead, exactly,
  // so that the bias terms take s as b.
  bool symmetric = false;
};

// Row t of x into r (sized for all rows).
void round_row(const float* x, int64_t t, const AffineMatrix& w, RoundedX& r) {
  const int64_t gs = w.group_size;
  for (int64_t g = 0; g < r.groups; ++g) {
    const float* xg = x + t * w.K + g * gs;
    float m = 0.0f, sum = 0.0f;
    for (int64_t k = 0; k < gs; ++k) {
      m = std::max(m, std::fabs(xg[k]));
      sum += xg[k];
    }
    const float inv = m > 0 ? 127.0f / m : 0.0f;
    for (int64_t k = 0; k < gs; ++k) {
      // Round to nearest (even) after the same product as the VNNI path's.
      const auto v = static_cast<int8_t>(std::lrint(xg[k] * inv));
      const int64_t e = g * gs + k;
      if (w.bits == 4) {
        r.q8[static_cast<size_t>(t * w.K + e / 64 * 64 + (e % 2) * 32 + (e % 64) / 2)] = v;
      } else {
        r.q16[static_cast<size_t>(t * w.K + e)] = v;
      }
    }
    const auto i = static_cast<size_t>(t * r.groups + g);
    r.dx[i] = m / 127.0f;
    r.xsum[i] = r.symmetric ? -static_cast<float>(1 << (w.bits - 1)) * sum : sum;
    if (!r.dx_lanes.empty()) std::fill_n(r.dx_lanes.begin() + static_cast<int64_t>(i) * 4, 4, r.dx[i]);
  }
}

RoundedX round_x(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w) {
  RoundedX r;
  r.K = w.K;
  r.groups = w.K / w.group_size;
  (w.bits == 4 ? r.q8.resize(static_cast<size_t>(T * w.K)) : r.q16.resize(static_cast<size_t>(T * w.K)));
  r.dx.resize(static_cast<size_t>(T * r.groups));
  r.xsum.resize(r.dx.size());
  r.symmetric = !w.has_biases();
  if (w.bits == 4 && w.group_size == 32) r.dx_lanes.resize(r.dx.size() * 4);
  parallel_rows(pool, T, 1, [&](int64_t a, int64_t b) {
    for (int64_t t = a; t < b; ++t) round_row(x, t, w, r);
  });
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

// The scales s and biases b of a tile's rows [n0, n1) as f32, [row - n0, group]; a symmetric
// matrix has no b (RoundedX::symmetric).
struct TileParams {
  std::vector<float> s, b;
};
HEARTH_AVX2 void tile_params(const AffineMatrix& w, int64_t groups, int64_t n0, int64_t n1, TileParams& p) {
  p.s.resize(static_cast<size_t>(kRowTile * groups));
  if (w.has_biases()) p.b.resize(p.s.size());
  for (int64_t n = n0; n < n1; ++n) {
    params_f32(w.scales, w.scale_type, n * groups, groups, p.s.data() + (n - n0) * groups);
    if (w.has_biases()) params_f32(w.biases, w.scale_type, n * groups, groups, p.b.data() + (n - n0) * groups);
  }
}

// One step's 32 bytes of codes, unpacked for vpmaddubsw (4 bits: low and high nibbles) or
// vpmaddwd (8 bits: the two halves widened to s16).
struct Step {
  __m256i a, b;
};
template <int kBits>
HEARTH_AVX2 inline Step unpack(const uint8_t* codes) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  if constexpr (kBits == 4) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    return {_mm256_and_si256(v, low4), _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)};
  } else {
    return {_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1))};
  }
}

// The s32 dot lanes of one step against x row t's values at element e of the step.
template <int kBits>
HEARTH_AVX2 inline __m256i step_dot(const Step& c, const RoundedX& xr, int64_t t, int64_t e) {
  if constexpr (kBits == 4) {
    const int8_t* xq = xr.q8.data() + t * xr.K + e;
    const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
    const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(c.a, xe), _mm256_maddubs_epi16(c.b, xo));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  } else {
    const int16_t* xq = xr.q16.data() + t * xr.K + e;
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 16));
    return _mm256_add_epi32(_mm256_madd_epi16(c.a, x0), _mm256_madd_epi16(c.b, x1));
  }
}

// Rows [n0, n1) of a tile (parameters p) against x rows t0 .. t0 + kT - 1: y = x w^T + bias.
// kSteps: steps per group (0: a 64-element step over groups of 32), a constant so that a group's
// steps unroll and the sums stay in registers (as a variable, GCC kept them on the stack: Q8_0
// prefill 1.4x slower).
template <int kBits, int kT, int kSteps>
HEARTH_AVX2 void tile_rows(const RoundedX& xr, int64_t t0, const AffineMatrix& w, const TileParams& p,
                           const float* bias, float* y, int64_t n0, int64_t n1) {
  const int64_t K = w.K, groups = xr.groups;
  constexpr int64_t kStep = kBits == 4 ? 64 : 32;  // elements per 32 bytes of codes
  for (int64_t n = n0; n < n1; ++n) {
    const float* s = p.s.data() + (n - n0) * groups;
    const float* b = xr.symmetric ? s : p.b.data() + (n - n0) * groups;
    const auto* codes = reinterpret_cast<const uint8_t*>(w.packed + n * (K * kBits / 32));
    __m256 total[kT];
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) total[t] = _mm256_setzero_ps();
    if constexpr (kSteps == 0) {  // 4 bits, groups of 32: lanes 0-3 and 4-7 of a step
      for (int64_t e = 0, g = 0; e < K; e += kStep, g += 2) {
        const Step c = unpack<kBits>(codes + e * kBits / 8);
        const __m256 sg = _mm256_setr_m128(_mm_set1_ps(s[g]), _mm_set1_ps(s[g + 1]));
#pragma GCC unroll 4
        for (int t = 0; t < kT; ++t) {
          const __m256 dx = _mm256_loadu_ps(xr.dx_lanes.data() + ((t0 + t) * groups + g) * 4);
          const __m256 dot = _mm256_cvtepi32_ps(step_dot<kBits>(c, xr, t0 + t, e));
          total[t] = _mm256_fmadd_ps(dot, _mm256_mul_ps(sg, dx), total[t]);
        }
      }
    } else {  // whole steps per group: their s32 lanes summed, then one f32 step per group
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t e0 = g * kSteps * kStep;
        __m256i isum[kT];
        {
          const Step c = unpack<kBits>(codes + e0 * kBits / 8);
#pragma GCC unroll 4
          for (int t = 0; t < kT; ++t) isum[t] = step_dot<kBits>(c, xr, t0 + t, e0);
        }
#pragma GCC unroll 4
        for (int i = 1; i < kSteps; ++i) {
          const int64_t e = e0 + i * kStep;
          const Step c = unpack<kBits>(codes + e * kBits / 8);
#pragma GCC unroll 4
          for (int t = 0; t < kT; ++t) isum[t] = _mm256_add_epi32(isum[t], step_dot<kBits>(c, xr, t0 + t, e));
        }
        const __m256 sg = _mm256_broadcast_ss(s + g);
#pragma GCC unroll 4
        for (int t = 0; t < kT; ++t) {
          const __m256 scale = _mm256_mul_ps(sg, _mm256_broadcast_ss(xr.dx.data() + (t0 + t) * groups + g));
          total[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), scale, total[t]);
        }
      }
    }
    // The bias terms, the x rows' chains side by side (one after another, their FMAs' latency
    // took ~12% of a prefill).
    const float* xsum = xr.xsum.data() + t0 * groups;
    int64_t g = 0;
    for (; g + 8 <= groups; g += 8) {
      const __m256 bg = _mm256_loadu_ps(b + g);
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) total[t] = _mm256_fmadd_ps(bg, _mm256_loadu_ps(xsum + t * groups + g), total[t]);
    }
#pragma GCC unroll 4  // whole, or GCC keeps total[] on the stack through the loops above
    for (int t = 0; t < kT; ++t) {
      float extra = bias != nullptr ? bias[n] : 0.0f;
      for (int64_t r = g; r < groups; ++r) extra += b[r] * xsum[t * groups + r];
      y[(t0 + t) * w.N + n] = simd::hsum8(total[t]) + extra;
    }
  }
}

template <int kBits, int kSteps>
void tile_rows_for(int64_t kt, const RoundedX& xr, int64_t t0, const AffineMatrix& w, const TileParams& p,
                   const float* bias, float* y, int64_t n0, int64_t n1) {
  switch (kt) {
    case 1: tile_rows<kBits, 1, kSteps>(xr, t0, w, p, bias, y, n0, n1); break;
    case 2: tile_rows<kBits, 2, kSteps>(xr, t0, w, p, bias, y, n0, n1); break;
    case 3: tile_rows<kBits, 3, kSteps>(xr, t0, w, p, bias, y, n0, n1); break;
    default: tile_rows<kBits, kXRows, kSteps>(xr, t0, w, p, bias, y, n0, n1); break;
  }
}

// The kernel for the matrix's bits and group size (32, 64 or 128).
using TileRows = void (*)(int64_t, const RoundedX&, int64_t, const AffineMatrix&, const TileParams&, const float*,
                          float*, int64_t, int64_t);
TileRows tile_kernel(int bits, int64_t group_size) {
  if (bits == 4) {
    return group_size == 32 ? tile_rows_for<4, 0> : group_size == 64 ? tile_rows_for<4, 1> : tile_rows_for<4, 2>;
  }
  return group_size == 32 ? tile_rows_for<8, 1> : group_size == 64 ? tile_rows_for<8, 2> : tile_rows_for<8, 4>;
}

}  // namespace

bool affine_matmul_avx2(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias,
                        float* y) {
  const bool shape_fits = (w.bits == 4 && w.K % 64 == 0) || (w.bits == 8 && w.K % 32 == 0);
  const bool group_fits = w.group_size == 32 || w.group_size == 64 || w.group_size == 128;
  if (w.panels || !shape_fits || !group_fits) return false;
  const TileRows kernel = tile_kernel(w.bits, w.group_size);
  const RoundedX xr = round_x(pool, x, T, w);
  parallel_rows(pool, w.N, kRowTile, [&](int64_t a, int64_t b) {
    TileParams p;
    for (int64_t n0 = a; n0 < b; n0 += kRowTile) {
      const int64_t n1 = std::min(b, n0 + kRowTile);
      tile_params(w, xr.groups, n0, n1, p);
      for (int64_t t0 = 0; t0 < T; t0 += kXRows) {
        kernel(std::min<int64_t>(kXRows, T - t0), xr, t0, w, p, bias, y, n0, n1);
      }
    }
  });
  return true;
}

}  // namespace hearth::cpu
