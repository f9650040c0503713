// Integer kernels for 4- and 8-bit affine matrices on AVX-512 VNNI: y = x w^T.
//
// Per group g of a weight row (scale s, bias b, codes q) and x row,
//   sum_k x[k] (s q[k] + b) ~= s dx sum_k q[k] xq[k] + b sum_k x[k],
// where x is rounded to int8 per group (xq = round(x / dx), dx = max|x| / 127, as llama.cpp
// rounds x per block for its Q4_0/Q8_0 dots) and the group sums of x are exact. vpdpbusd
// multiplies 64 unsigned codes with 64 signed x bytes, four pairs per int32 lane.
//
// Weight rows are read in 64-byte blocks: 128 4-bit codes (byte j holds elements 2j and 2j+1
// in its low and high nibble) or 64 8-bit codes. x is laid out to meet them: for 4 bits,
// `lo` holds the even and `hi` the odd elements of each 128-element block. Int32 lane l of a
// block's dot covers 8 (4-bit) or 4 (8-bit) consecutive elements, so all of a lane lies in
// one group; a per-block index vector maps each lane to its group among the 16 groups of a
// "super-block", whose 16 scales are one vector. Matrices without biases are symmetric (GGUF
// Q4_0/Q8_0 as loaded): b = -2^(bits-1) s.
//
// Decode (T <= 4 x rows): one weight row at a time, read once for all x rows; the scale vector
// is folded with dx once per super-block.
// Prefill (T > 4): a kR x kTT register tile of (weight rows) x (x rows), so each unpacked
// weight block is used kTT times; x is processed in chunks of kTChunk rows that stay in L2.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "backends/cpu/parallel_rows.h"
#include "backends/cpu/quant_kernels.h"
#include "backends/cpu/simd.h"

#define HEARTH_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace hearth::cpu {
namespace {

constexpr int kSuper = 16;       // groups per super-block: one vector of scales
constexpr int64_t kTChunk = 64;  // x rows per prefill chunk (their int8 copy stays in L2)
constexpr int kMaxSuperBlocks = 32;
constexpr int64_t kPrefetchBytes =
    2048;  // decode: software prefetch distance along a row  // 64-byte blocks per super-block: 16 * 128 / 64 at most

struct Layout {
  int bits = 0, group_size = 0;
  int64_t K = 0, groups = 0, padded_groups = 0;  // padded to a whole super-block
  int64_t blocks = 0;                            // 64-byte blocks per row
  int64_t blocks_per_super = 0;
  int64_t row_bytes = 0;
};

Layout layout_of(const AffineMatrix& w) {
  Layout L;
  L.bits = w.bits;
  L.group_size = w.group_size;
  L.K = w.K;
  L.groups = w.K / w.group_size;
  L.padded_groups = (L.groups + kSuper - 1) / kSuper * kSuper;
  const int per_block = w.bits == 4 ? 128 : 64;
  L.blocks = w.K / per_block;
  L.blocks_per_super = kSuper * w.group_size / per_block;
  L.row_bytes = w.K * w.bits / 8;
  return L;
}

// x rounded to int8 per group, in the layout the weight blocks meet.
struct PreparedX {
  Layout L;
  int64_t T = 0;
  std::vector<int8_t> lo, hi;   // [T, blocks, 64]; hi for 4 bits only
  std::vector<float> dx, xsum;  // [T, padded_groups], zero past the last group
  std::vector<float> lane_dx;   // [T, blocks, 16]: dx of each lane's group (prefill only)
  alignas(64) std::array<int32_t, kMaxSuperBlocks * 16> lane_group{};  // per block of a super-block
};

HEARTH_VNNI void prepare_row(const float* x, const Layout& L, int64_t t, bool lane_dx, PreparedX& p) {
  const int64_t K = L.K, gs = L.group_size;
  // 8 bits: the codes are the layout itself; 4 bits: a per-thread row, deinterleaved below.
  thread_local std::vector<int8_t> row4;
  if (L.bits == 4) row4.resize(static_cast<size_t>(K));
  int8_t* q = L.bits == 8 ? p.lo.data() + t * L.blocks * 64 : row4.data();
  float* dx = p.dx.data() + t * L.padded_groups;
  float* xsum = p.xsum.data() + t * L.padded_groups;
  for (int64_t g = 0; g < L.groups; ++g) {
    const float* xg = x + g * gs;
    __m512 amax = _mm512_setzero_ps(), sum = _mm512_setzero_ps();
    for (int64_t k = 0; k < gs; k += 16) {
      const __m512 v = _mm512_loadu_ps(xg + k);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      sum = _mm512_add_ps(sum, v);
    }
    const float m = _mm512_reduce_max_ps(amax);
    dx[g] = m / 127.0f;
    xsum[g] = _mm512_reduce_add_ps(sum);
    const __m512 inv = _mm512_set1_ps(m > 0 ? 127.0f / m : 0.0f);
    for (int64_t k = 0; k < gs; k += 16) {
      // Round to nearest (even), as lrint does under the default rounding mode.
      const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + k), inv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * gs + k), _mm512_cvtepi32_epi8(v));
    }
  }
  int8_t* lo = p.lo.data() + t * L.blocks * 64;
  if (L.bits == 4) {
    // Deinterleave each 128-byte block: as 16-bit words, the low bytes are the even elements.
    int8_t* hi = p.hi.data() + t * L.blocks * 64;
    for (int64_t b = 0; b < L.blocks; ++b) {
      const __m512i w0 = _mm512_loadu_si512(q + b * 128), w1 = _mm512_loadu_si512(q + b * 128 + 64);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + b * 64), _mm512_cvtepi16_epi8(w0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + b * 64 + 32), _mm512_cvtepi16_epi8(w1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + b * 64), _mm512_cvtepi16_epi8(_mm512_srai_epi16(w0, 8)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + b * 64 + 32), _mm512_cvtepi16_epi8(_mm512_srai_epi16(w1, 8)));
    }
  }
  if (lane_dx) {
    float* ld = p.lane_dx.data() + t * L.blocks * 16;
    const int64_t per_lane = L.bits == 4 ? 8 : 4;
    for (int64_t b = 0; b < L.blocks; ++b) {
      for (int l = 0; l < 16; ++l) ld[b * 16 + l] = dx[(b * 16 * per_lane + l * per_lane) / gs];
    }
  }
}

PreparedX prepare_x(ThreadPool* pool, const float* x, int64_t T, const Layout& L, bool lane_dx) {
  PreparedX p;
  p.L = L;
  p.T = T;
  p.lo.resize(static_cast<size_t>(T * L.blocks * 64));
  if (L.bits == 4) p.hi.resize(p.lo.size());
  p.dx.assign(static_cast<size_t>(T * L.padded_groups), 0.0f);
  p.xsum.assign(p.dx.size(), 0.0f);
  if (lane_dx) p.lane_dx.resize(static_cast<size_t>(T * L.blocks * 16));
  const int64_t per_lane = L.bits == 4 ? 8 : 4, per_block = 16 * per_lane;
  for (int64_t j = 0; j < L.blocks_per_super; ++j) {
    for (int l = 0; l < 16; ++l)
      p.lane_group[static_cast<size_t>(j * 16 + l)] =
          static_cast<int32_t>((j * per_block + l * per_lane) / L.group_size);
  }
  auto rows = [&](int64_t a, int64_t b) {
    for (int64_t t = a; t < b; ++t) prepare_row(x + t * L.K, L, t, lane_dx, p);
  };
  if (pool != nullptr && T > 1) {
    pool->parallel_for(T, 1, rows);
  } else {
    rows(0, T);
  }
  return p;
}

// 16 scales (or biases) of a row from group g0 on, as f32; zero past n.
HEARTH_VNNI inline __m512 load_params16(const void* p, DType t, int64_t g0, int64_t n) {
  const __mmask16 m = simd::tail_mask16(n);
  if (t == DType::kF32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + g0);
  const uint16_t* h = static_cast<const uint16_t*>(p) + g0;
  return t == DType::kBF16 ? simd::load16_bf16(h, m) : simd::load16_f16(h, m);
}

// The 16 int32 lane sums of one 64-byte weight block against x (lo, and hi for 4 bits).
template <int kBits>
HEARTH_VNNI inline __m512i block_dot(__m512i wlo, __m512i whi, const int8_t* xlo, const int8_t* xhi) {
  __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wlo, _mm512_loadu_si512(xlo));
  if constexpr (kBits == 4) d = _mm512_dpbusd_epi32(d, whi, _mm512_loadu_si512(xhi));
  return d;
}

// Splits a 64-byte block of codes into the vectors vpdpbusd takes (8 bits: as is).
template <int kBits>
HEARTH_VNNI inline void unpack(const uint8_t* p, __m512i& lo, __m512i& hi) {
  const __m512i v = _mm512_loadu_si512(p);
  if constexpr (kBits == 4) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    lo = _mm512_and_si512(v, low4);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
  } else {
    lo = v;
    hi = v;
  }
}

struct RowParams {
  __m512 scale, bias;
};

template <int kBits>
HEARTH_VNNI inline RowParams row_params(const AffineMatrix& w, int64_t n, const Layout& L, int64_t g0) {
  const int64_t at = n * L.groups + g0, count = L.groups - g0;
  RowParams r;
  r.scale = load_params16(w.scales, w.scale_type, at, count);
  r.bias = w.biases != nullptr ? load_params16(w.biases, w.scale_type, at, count)
                               : _mm512_mul_ps(r.scale, _mm512_set1_ps(-static_cast<float>(1 << (kBits - 1))));
  return r;
}

// Decode: row n of w against all kT rows of x. One row at a time, with a software prefetch
// ahead of the stream: interleaving several rows per pass measured 2x slower here.
template <int kBits, int kT>
HEARTH_VNNI void decode_row(const PreparedX& p, const AffineMatrix& w, const float* bias, float* y, int64_t n) {
  const Layout& L = p.L;
  const uint8_t* row = reinterpret_cast<const uint8_t*>(w.packed) + n * L.row_bytes;
  __m512 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t g0 = 0, b0 = 0; g0 < L.groups; g0 += kSuper, b0 += L.blocks_per_super) {
    __m512 c[kT];  // scale * dx per group
    const RowParams rp = row_params<kBits>(w, n, L, g0);
    for (int t = 0; t < kT; ++t) {
      const float* xs = p.xsum.data() + t * L.padded_groups + g0;
      acc[t] = _mm512_fmadd_ps(rp.bias, _mm512_loadu_ps(xs), acc[t]);
      c[t] = _mm512_mul_ps(rp.scale, _mm512_loadu_ps(p.dx.data() + t * L.padded_groups + g0));
    }
    const int64_t b1 = std::min(L.blocks, b0 + L.blocks_per_super);
    for (int64_t b = b0; b < b1; ++b) {
      const __m512i idx = _mm512_load_si512(p.lane_group.data() + (b - b0) * 16);
      _mm_prefetch(reinterpret_cast<const char*>(row + b * 64 + kPrefetchBytes), _MM_HINT_T0);
      __m512i wlo, whi;
      unpack<kBits>(row + b * 64, wlo, whi);
      for (int t = 0; t < kT; ++t) {
        const size_t at = static_cast<size_t>((t * L.blocks + b) * 64);
        const __m512i d = block_dot<kBits>(wlo, whi, p.lo.data() + at, kBits == 4 ? p.hi.data() + at : nullptr);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, c[t]), acc[t]);
      }
    }
  }
  const float add = bias != nullptr ? bias[n] : 0.0f;
  for (int t = 0; t < kT; ++t) y[t * w.N + n] = _mm512_reduce_add_ps(acc[t]) + add;
}

template <int kBits, int kT>
void decode_range(const PreparedX& p, const AffineMatrix& w, const float* bias, float* y, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) decode_row<kBits, kT>(p, w, bias, y, n);
}

// Prefill reuses a panel of kR weight rows for every pair of x rows, so its scales are
// converted once: per lane of each block (permuted to the lane's group) and its biases per group.
struct Panel {
  std::vector<float> lane_scale;  // [kR, blocks, 16]
  std::vector<float> bias;        // [kR, padded_groups], zero past the last group
};

template <int kBits, int kR>
HEARTH_VNNI void fill_panel(const PreparedX& p, const AffineMatrix& w, int64_t n, Panel& panel) {
  const Layout& L = p.L;
  panel.lane_scale.resize(static_cast<size_t>(kR * L.blocks * 16));
  panel.bias.resize(static_cast<size_t>(kR * L.padded_groups));
  for (int r = 0; r < kR; ++r) {
    for (int64_t g0 = 0, b0 = 0; g0 < L.groups; g0 += kSuper, b0 += L.blocks_per_super) {
      const RowParams rp = row_params<kBits>(w, n + r, L, g0);
      _mm512_storeu_ps(panel.bias.data() + r * L.padded_groups + g0, rp.bias);
      for (int64_t b = b0; b < std::min(L.blocks, b0 + L.blocks_per_super); ++b) {
        const __m512i idx = _mm512_load_si512(p.lane_group.data() + (b - b0) * 16);
        _mm512_storeu_ps(panel.lane_scale.data() + (r * L.blocks + b) * 16, _mm512_permutexvar_ps(idx, rp.scale));
      }
    }
  }
}

// Rows n .. n + kR of w (their panel) against x rows t0 .. t0 + kTT.
template <int kBits, int kTT, int kR>
HEARTH_VNNI void gemm_tile(const PreparedX& p, const AffineMatrix& w, const Panel& panel, const float* bias, float* y,
                           int64_t n, int64_t t0) {
  const Layout& L = p.L;
  const uint8_t* rows[kR];
  for (int r = 0; r < kR; ++r) rows[r] = reinterpret_cast<const uint8_t*>(w.packed) + (n + r) * L.row_bytes;
  __m512 acc[kR][kTT];
  for (int r = 0; r < kR; ++r) {
    for (int t = 0; t < kTT; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  // The bias terms: sum_g bias[r, g] * xsum[t, g].
  for (int64_t g0 = 0; g0 < L.groups; g0 += kSuper) {
    for (int r = 0; r < kR; ++r) {
      const __m512 b = _mm512_loadu_ps(panel.bias.data() + r * L.padded_groups + g0);
      for (int t = 0; t < kTT; ++t) {
        acc[r][t] = _mm512_fmadd_ps(b, _mm512_loadu_ps(p.xsum.data() + (t0 + t) * L.padded_groups + g0), acc[r][t]);
      }
    }
  }
  for (int64_t b = 0; b < L.blocks; ++b) {
    __m512i wlo[kR], whi[kR];
    for (int r = 0; r < kR; ++r) unpack<kBits>(rows[r] + b * 64, wlo[r], whi[r]);
    for (int t = 0; t < kTT; ++t) {
      const size_t at = static_cast<size_t>(((t0 + t) * L.blocks + b) * 64);
      const __m512 dxl = _mm512_loadu_ps(p.lane_dx.data() + ((t0 + t) * L.blocks + b) * 16);
      for (int r = 0; r < kR; ++r) {
        const __m512i d = block_dot<kBits>(wlo[r], whi[r], p.lo.data() + at, kBits == 4 ? p.hi.data() + at : nullptr);
        const __m512 sl = _mm512_loadu_ps(panel.lane_scale.data() + (r * L.blocks + b) * 16);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sl, dxl), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    const float add = bias != nullptr ? bias[n + r] : 0.0f;
    for (int t = 0; t < kTT; ++t) y[(t0 + t) * w.N + n + r] = _mm512_reduce_add_ps(acc[r][t]) + add;
  }
}

template <int kBits, int kR>
void gemm_rows(const PreparedX& p, const AffineMatrix& w, Panel& panel, const float* bias, float* y, int64_t n,
               int64_t t0, int64_t t1) {
  constexpr int kTT = 2;
  fill_panel<kBits, kR>(p, w, n, panel);
  int64_t t = t0;
  for (; t + kTT <= t1; t += kTT) gemm_tile<kBits, kTT, kR>(p, w, panel, bias, y, n, t);
  if (t < t1) gemm_tile<kBits, 1, kR>(p, w, panel, bias, y, n, t);
}

template <int kBits>
void gemm_range(const PreparedX& p, const AffineMatrix& w, const float* bias, float* y, int64_t n0, int64_t n1) {
  constexpr int kR = 4;
  Panel panel;
  for (int64_t t0 = 0; t0 < p.T; t0 += kTChunk) {
    const int64_t t1 = std::min(p.T, t0 + kTChunk);
    int64_t n = n0;
    for (; n + kR <= n1; n += kR) gemm_rows<kBits, kR>(p, w, panel, bias, y, n, t0, t1);
    for (; n < n1; ++n) gemm_rows<kBits, 1>(p, w, panel, bias, y, n, t0, t1);
  }
}

template <int kBits>
void decode_any(const PreparedX& p, const AffineMatrix& w, const float* bias, float* y, int64_t n0, int64_t n1) {
  switch (p.T) {
    case 1: decode_range<kBits, 1>(p, w, bias, y, n0, n1); break;
    case 2: decode_range<kBits, 2>(p, w, bias, y, n0, n1); break;
    case 3: decode_range<kBits, 3>(p, w, bias, y, n0, n1); break;
    default: decode_range<kBits, 4>(p, w, bias, y, n0, n1); break;
  }
}

}  // namespace

bool vnni_supports(const AffineMatrix& w) {
  return has_avx512_vnni() && ((w.bits == 4 && w.K % 128 == 0) || (w.bits == 8 && w.K % 64 == 0));
}

void vnni_matmul(ThreadPool* pool, const float* x, int64_t T, const AffineMatrix& w, const float* bias, float* y) {
  const Layout L = layout_of(w);
  const bool decode = T <= kVnniDecodeRows;
  const PreparedX p = prepare_x(pool, x, T, L, !decode);
  auto run = [&](int64_t a, int64_t b) {
    if (decode) {
      w.bits == 4 ? decode_any<4>(p, w, bias, y, a, b) : decode_any<8>(p, w, bias, y, a, b);
    } else {
      w.bits == 4 ? gemm_range<4>(p, w, bias, y, a, b) : gemm_range<8>(p, w, bias, y, a, b);
    }
  };
  parallel_rows(pool, w.N, 16, run);
}

}  // namespace hearth::cpu
