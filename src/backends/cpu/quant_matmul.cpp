// y = x w^T for MLX affine-quantized w (core/quant.h). On AVX-512 VNNI, 4- and 8-bit
// matrices are loaded as 16-row panels and take the integer kernels of quant_panels.cpp; this
// file has the scalar reference (either layout) and the float paths for other widths and ISAs. Decode (few rows of x)
// is bandwidth bound: each weight row is read once and unpacked in registers. Per group g of a row,
//   sum_k x[k] (s q[k] + b) = s * sum_k q[k] x[k] + b * sum_k x[k],
// so the kernel needs only the code-weighted dot; the group sums of x are computed once per
// call. For 4 bits, byte j of a 32-element chunk holds elements 2j (low nibble) and 2j + 1
// (high nibble): x is permuted per chunk into [evens, odds] so both nibble vectors meet
// contiguous x. Prefill (many rows of x) dequantizes tiles of rows and runs them through the
// dense tiles (dequantized_tiles_matmul; in bf16 on AVX512-BF16).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/quant_kernels.h"
#include "backends/cpu/simd.h"
#include "core/quant.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kDecodeRows = 4;  // x rows up to which the in-register path runs

float scale_at(const void* p, DType t, int64_t i) {
  if (t == DType::kF32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void row_params(const AffineMatrix& w, int64_t n, float* s, float* b) {
  const int64_t groups = w.K / w.group_size;
  const auto* panels = reinterpret_cast<const uint8_t*>(w.packed);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t at = n * groups + g;
    s[g] = w.panels ? panel_param(panels, w.panel, w.scale_type, n, g, 0) : scale_at(w.scales, w.scale_type, at);
    // Without biases the codes are symmetric around 2^(bits-1) (GGUF Q4_0/Q8_0 as loaded).
    if (!w.has_biases()) {
      b[g] = -static_cast<float>(1 << (w.bits - 1)) * s[g];
    } else {
      b[g] = w.panels ? panel_param(panels, w.panel, w.scale_type, n, g, 1) : scale_at(w.biases, w.scale_type, at);
    }
  }
}

void dequantize_row(const AffineMatrix& w, int64_t n, float* s, float* b, float* out) {
  row_params(w, n, s, b);
  if (!w.panels) {
    affine_dequantize_row(w.packed + n * (w.K * w.bits / 32), s, b, w.K, QuantSpec{w.bits, w.group_size}, out);
    return;
  }
  const auto* panels = reinterpret_cast<const uint8_t*>(w.packed);
  for (int64_t k = 0; k < w.K; ++k) {
    const int64_t g = k / w.group_size;
    out[k] = s[g] * static_cast<float>(panel_code(panels, w.panel, w.bits, w.group_size, n, k)) + b[g];
  }
}

// The scalar reference: dequantize the row, then a plain dot.
void rows_scalar(const float* x, int64_t T, const AffineMatrix& w, const float* bias, float* y, int64_t n0,
                 int64_t n1) {
  const int64_t groups = w.K / w.group_size;
  std::vector<float> row(static_cast<size_t>(w.K)), s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  for (int64_t n = n0; n < n1; ++n) {
    dequantize_row(w, n, s.data(), b.data(), row.data());
    for (int64_t t = 0; t < T; ++t) {
      float acc = 0;
      for (int64_t k = 0; k < w.K; ++k) acc += x[t * w.K + k] * row[static_cast<size_t>(k)];
      y[t * w.N + n] = acc + (bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

// Per x row and group: the sum of x over the group.
std::vector<float> group_sums(const float* x, int64_t T, int64_t K, int group_size) {
  const int64_t groups = K / group_size;
  std::vector<float> out(static_cast<size_t>(T * groups));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0;
      for (int64_t k = 0; k < group_size; ++k) s += x[t * K + g * group_size + k];
      out[static_cast<size_t>(t * groups + g)] = s;
    }
  }
  return out;
}

// 4 bits: x rows permuted per 32-element chunk into [x0 x2 .. x30, x1 x3 .. x31].
std::vector<float> permute_nibbles(const float* x, int64_t T, int64_t K) {
  std::vector<float> out(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < K; c += 32) {
      for (int j = 0; j < 16; ++j) {
        out[static_cast<size_t>(t * K + c + j)] = x[t * K + c + 2 * j];
        out[static_cast<size_t>(t * K + c + 16 + j)] = x[t * K + c + 2 * j + 1];
      }
    }
  }
  return out;
}

// One weight row against T (<= kDecodeRows) x rows; xq is the 4-bit permutation of x (or x).
template <int kBits>
HEARTH_AVX512 void row_avx512(const float* xq, const float* xsum, int64_t T, const AffineMatrix& w, int64_t n,
                              const float* s, const float* b, float* out) {
  const int64_t K = w.K, groups = K / w.group_size;
  const auto* bytes = reinterpret_cast<const uint8_t*>(w.packed + n * (K * kBits / 32));
  __m512 total[kDecodeRows];
  for (int64_t t = 0; t < T; ++t) total[t] = _mm512_setzero_ps();
  const __m128i low4 = _mm_set1_epi8(0x0f);
  for (int64_t g = 0; g < groups; ++g) {
    __m512 acc[kDecodeRows];
    for (int64_t t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    const int64_t k0 = g * w.group_size;
    if constexpr (kBits == 4) {
      for (int64_t c = k0; c < k0 + w.group_size; c += 32) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + c / 2));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, low4)));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), low4)));
        for (int64_t t = 0; t < T; ++t) {
          acc[t] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xq + t * K + c), acc[t]);
          acc[t] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xq + t * K + c + 16), acc[t]);
        }
      }
    } else {
      for (int64_t c = k0; c < k0 + w.group_size; c += 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + c));
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
        for (int64_t t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(q, _mm512_loadu_ps(xq + t * K + c), acc[t]);
      }
    }
    const __m512 sg = _mm512_set1_ps(s[g]);
    for (int64_t t = 0; t < T; ++t) total[t] = _mm512_fmadd_ps(acc[t], sg, total[t]);
  }
  for (int64_t t = 0; t < T; ++t) {
    float bias_part = 0;
    for (int64_t g = 0; g < groups; ++g) bias_part += b[g] * xsum[t * groups + g];
    out[t] = _mm512_reduce_add_ps(total[t]) + bias_part;
  }
}

void rows_decode(Isa isa, const float* xq, const float* xsum, int64_t T, const AffineMatrix& w, const float* bias,
                 float* y, int64_t n0, int64_t n1) {
  const int64_t groups = w.K / w.group_size;
  std::vector<float> s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  float out[kDecodeRows];
  for (int64_t n = n0; n < n1; ++n) {
    row_params(w, n, s.data(), b.data());
    if (w.bits == 4) {
      row_avx512<4>(xq, xsum, T, w, n, s.data(), b.data(), out);
    } else {
      row_avx512<8>(xq, xsum, T, w, n, s.data(), b.data(), out);
    }
    for (int64_t t = 0; t < T; ++t) y[t * w.N + n] = out[t] + (bias != nullptr ? bias[n] : 0.0f);
  }
  (void)isa;
}

}  // namespace

void affine_matmul(Isa isa, ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias,
                   float* y) {
  const bool fast_bits = w.bits == 4 || w.bits == 8;
  std::function<void(int64_t, int64_t)> run;
  TileX tile_x{};
  std::vector<float> xq, xsum;
  int64_t grain_rows = 16;
  if (w.panels && runs_panel_kernels(isa)) {
    panel_matmul(pool, x, T, w, bias, y);
    return;
  }
  if (isa == Isa::kAvx2 && fast_bits && affine_matmul_avx2(pool, x, T, w, bias, y)) return;
  if (isa == Isa::kAvx512 && fast_bits && !w.panels && T <= kDecodeRows) {
    if (w.bits == 4) xq = permute_nibbles(x, T, w.K);
    xsum = group_sums(x, T, w.K, w.group_size);
    const float* xp = w.bits == 4 ? xq.data() : x;
    run = [&, xp](int64_t a, int64_t b) { rows_decode(isa, xp, xsum.data(), T, w, bias, y, a, b); };
  } else if (isa != Isa::kScalar && T > kDecodeRows) {
    grain_rows = kDequantTileRows;
    tile_x = prepare_tile_x(isa, x, T, w.K);
    run = [&](int64_t a, int64_t b) {
      const int64_t groups = w.K / w.group_size;
      std::vector<float> s(static_cast<size_t>(groups)), bs(static_cast<size_t>(groups));
      dequantized_tiles_matmul(
          isa, tile_x, T, w.K, w.N, [&](int64_t n, float* out) { dequantize_row(w, n, s.data(), bs.data(), out); },
          bias, y, a, b);
    };
  } else {
    run = [&](int64_t a, int64_t b) { rows_scalar(x, T, w, bias, y, a, b); };
  }
  parallel_rows(pool, w.N, grain_rows, run);
}

void affine_rows(const AffineMatrix& w, const int32_t* ids, int64_t n_ids, float* out) {
  const int64_t groups = w.K / w.group_size;
  std::vector<float> s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  for (int64_t i = 0; i < n_ids; ++i) dequantize_row(w, ids[i], s.data(), b.data(), out + i * w.K);
}

}  // namespace hearth::cpu
