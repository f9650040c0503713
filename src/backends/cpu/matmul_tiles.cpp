// Dense prefill on AVX-512 and AVX2: y[t, n] = sum_k x[t, k] * w[n, k] + bias[n] for T > 4 rows of x.
// x: [T, K] f32; w: [N, K] f32|bf16|f16 as loaded (the HF Linear layout, no packing); y: [T, N].
//
// Both kernels take register tiles of 4 rows of x against 4 weight rows, each of the 16 outputs a
// vector of partial sums along k, added across its lanes at the end. A step loads 4 x vectors
// and 4 weight vectors for 16 multiply-add instructions; the row-at-a-time dots of matmul.cpp
// load one weight vector per multiply-add.
// - bf16 weights on a CPU with AVX512-BF16 (matmul_bf16_dots): x rounded once per call to bf16
//   (nearest even) into [T, Kp], Kp = K rounded up to 32 and zero-padded; vdpbf16ps takes the
//   bf16 pairs as they are, 32 products an instruction. The CUDA backend's tensor cores and every
//   peer's bf16 path round x the same way; products are exact in f32 and sums are f32
//   (docs/numerics.md). Unlike f32_to_bf16, the instructions flush subnormal inputs (|x| below
//   1.2e-38) to zero.
// - Otherwise (matmul_fma_tiles): x in f32, each weight vector widened exactly to f32 once per
//   4 rows of x, FMAs. On AVX2, with its 16 vector registers, tiles of 4 x 3 and panels of 12.
//
// Blocking: a thread takes panels of kPanelRows weight rows (16 rows of K <= 8192 are <= 256 KiB
// at 2 bytes, in L2) and runs every 4-row block of x over the panel, so a weight byte comes
// from memory once per call and an x tile (4 rows, in L1) serves 16 weight rows.
#include <immintrin.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "backends/cpu/dot.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"
#include "base/error.h"

#define HEARTH_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))

namespace hearth::cpu {
namespace {

int64_t padded_k(int64_t K) { return (K + 31) / 32 * 32; }

// xb: [T, Kp] bf16 from x: [T, K] f32, the pad zero.
HEARTH_BF16 void round_rows_to_bf16(const float* x, int64_t T, int64_t K, uint16_t* xb) {
  const int64_t Kp = padded_k(K);
  for (int64_t t = 0; t < T; ++t) {
    const float* src = x + t * K;
    uint16_t* dst = xb + t * Kp;
    for (int64_t k = 0; k < Kp; k += 16) {
      const __mmask16 m = k >= K ? 0 : K - k >= 16 ? 0xffff : static_cast<__mmask16>((1u << (K - k)) - 1u);
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), (__m256i)h);
    }
  }
}

// One step of 32 k of the bf16 kernel: acc[t][n] += the pair dots of x row t and weight row n.
// Full steps load plainly, the last partial one under a mask (see fma_step).
template <int kT, int kN, bool kMasked>
HEARTH_BF16 inline __attribute__((always_inline)) void tile_step(__m512 (&acc)[kT][kN], const uint16_t* xb, int64_t Kp,
                                                                 const uint16_t* w, int64_t K, int64_t k, __mmask32 m) {
  __m512bh wv[kN];
  for (int n = 0; n < kN; ++n) {
    wv[n] = (__m512bh)(kMasked ? _mm512_maskz_loadu_epi16(m, w + n * K + k) : _mm512_loadu_si512(w + n * K + k));
  }
  for (int t = 0; t < kT; ++t) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + t * Kp + k);
    for (int n = 0; n < kN; ++n) acc[t][n] = _mm512_dpbf16_ps(acc[t][n], xv, wv[n]);
  }
}

// out[t][n] = dot(xb row t, w row n) for a kT x kN tile of the bf16 kernel. xb rows are Kp apart and padded, so
// they load whole; the weight rows' last partial step loads under a mask (zeros past K).
template <int kT, int kN>
HEARTH_BF16 void tile_dots(const uint16_t* xb, int64_t Kp, const uint16_t* w, int64_t K, float out[kT][kN]) {
  __m512 acc[kT][kN];
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) acc[t][n] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) tile_step<kT, kN, false>(acc, xb, Kp, w, K, k, 0);
  if (k < K) tile_step<kT, kN, true>(acc, xb, Kp, w, K, k, static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1));
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) out[t][n] = _mm512_reduce_add_ps(acc[t][n]);
  }
}

// One step of 16 k of the FMA kernel: acc[t][n] += x row t * w row n, lane by lane. Full steps
// load plainly and only the last partial one under a mask: a masked load is a builtin call to
// gcc, and one inside the loop keeps every accumulator stored to the stack each step.
template <DType BT, int kT, int kN, bool kMasked>
HEARTH_AVX512 inline __attribute__((always_inline)) void fma_step(__m512 (&acc)[kT][kN], const float* x, int64_t K,
                                                                  const uint8_t* w, int64_t k, __mmask16 m) {
  constexpr int64_t kElem = BT == DType::kF32 ? 4 : 2;
  __m512 wv[kN];
  for (int n = 0; n < kN; ++n) {
    const uint8_t* p = w + (n * K + k) * kElem;
    if constexpr (BT == DType::kF32) {
      wv[n] = kMasked ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
    } else {
      const __m256i h =
          kMasked ? _mm256_maskz_loadu_epi16(m, p) : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      wv[n] =
          BT == DType::kF16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
  for (int t = 0; t < kT; ++t) {
    const __m512 xv = kMasked ? _mm512_maskz_loadu_ps(m, x + t * K + k) : _mm512_loadu_ps(x + t * K + k);
    for (int n = 0; n < kN; ++n) acc[t][n] = _mm512_fmadd_ps(xv, wv[n], acc[t][n]);
  }
}

// out[t][n] = dot(x row t, w row n) for a kT x kN tile of the FMA kernel; x rows K apart.
template <DType BT, int kT, int kN>
HEARTH_AVX512 void fma_tile_dots(const float* x, int64_t K, const uint8_t* w, float out[kT][kN]) {
  __m512 acc[kT][kN];
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) acc[t][n] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) fma_step<BT, kT, kN, false>(acc, x, K, w, k, 0);
  if (k < K) fma_step<BT, kT, kN, true>(acc, x, K, w, k, simd::tail_mask16(K - k));
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) out[t][n] = _mm512_reduce_add_ps(acc[t][n]);
  }
}

// AVX2 (16 vector registers): 4 rows of x against 3 weight rows, 8 lanes a step; the last
// K % 8 products in scalar code, added after the lanes.
template <DType BT, int kT, int kN>
HEARTH_AVX2 inline __attribute__((always_inline)) void avx2_step(__m256 (&acc)[kT][kN], const float* x, int64_t K,
                                                                 const uint8_t* w, int64_t k) {
  constexpr int64_t kElem = BT == DType::kF32 ? 4 : 2;
  __m256 wv[kN];
  for (int n = 0; n < kN; ++n) wv[n] = simd::load8<BT>(w + n * K * kElem, k);
  for (int t = 0; t < kT; ++t) {
    const __m256 xv = _mm256_loadu_ps(x + t * K + k);
    for (int n = 0; n < kN; ++n) acc[t][n] = _mm256_fmadd_ps(xv, wv[n], acc[t][n]);
  }
}

template <DType BT, int kT, int kN>
HEARTH_AVX2 void avx2_tile_dots(const float* x, int64_t K, const uint8_t* w, float out[kT][kN]) {
  constexpr int64_t kElem = BT == DType::kF32 ? 4 : 2;
  __m256 acc[kT][kN];
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) acc[t][n] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) avx2_step<BT, kT, kN>(acc, x, K, w, k);
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) {
      float sum = simd::hsum8(acc[t][n]);
      for (int64_t j = k; j < K; ++j) sum += x[t * K + j] * load_scalar(w + n * K * kElem, BT, j);
      out[t][n] = sum;
    }
  }
}

// The kernels as tile sources: dots<kT, kN>(t0, n0, out) fills out with the tile whose
// corner is (t0, n0).
struct Bf16Dots {
  static constexpr int kRows = 4, kCols = 4, kPanel = 16;  // tile rows (x), tile and panel columns (w)
  const uint16_t* xb;                                      // [T, Kp]
  int64_t Kp;
  const uint16_t* w;
  int64_t K;
  template <int kT, int kN>
  void dots(int64_t t0, int64_t n0, float out[kT][kN]) const {
    tile_dots<kT, kN>(xb + t0 * Kp, Kp, w + n0 * K, K, out);
  }
};

// f32 x against float weights: AVX-512 tiles of 4 x 4, or AVX2 tiles of 4 x 3 (16 registers).
template <DType BT, Isa kIsa>
struct FmaDots {
  static constexpr int kRows = 4, kCols = kIsa == Isa::kAvx512 ? 4 : 3, kPanel = 4 * kCols;
  const float* x;  // [T, K]
  const uint8_t* w;
  int64_t K;
  template <int kT, int kN>
  void dots(int64_t t0, int64_t n0, float out[kT][kN]) const {
    constexpr int64_t kElem = BT == DType::kF32 ? 4 : 2;
    if constexpr (kIsa == Isa::kAvx512) {
      fma_tile_dots<BT, kT, kN>(x + t0 * K, K, w + n0 * K * kElem, out);
    } else {
      avx2_tile_dots<BT, kT, kN>(x + t0 * K, K, w + n0 * K * kElem, out);
    }
  }
};

struct Output {
  float* y;  // [T, ldy], columns 0 .. N written
  int64_t N;
  const float* bias;
  int64_t ldy = 0;  // 0: N
  int64_t stride() const { return ldy != 0 ? ldy : N; }
};

template <class Tiles, int kT, int kN>
void run_tile(const Tiles& tiles, int64_t t0, int64_t n0, const Output& o) {
  float out[kT][kN];
  tiles.template dots<kT, kN>(t0, n0, out);
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) o.y[(t0 + t) * o.stride() + n0 + n] = out[t][n] + (o.bias ? o.bias[n0 + n] : 0.0f);
  }
}

// Tiles of any size up to Tiles::kRows x Tiles::kCols, by template so the accumulators stay
// in registers.
template <class Tiles, int kT>
void run_tile_rows(const Tiles& tiles, int64_t cols, int64_t t0, int64_t n0, const Output& o) {
  if (cols == 1) return run_tile<Tiles, kT, 1>(tiles, t0, n0, o);
  if (cols == 2) return run_tile<Tiles, kT, 2>(tiles, t0, n0, o);
  if constexpr (Tiles::kCols >= 4) {
    if (cols == 4) return run_tile<Tiles, kT, 4>(tiles, t0, n0, o);
  }
  run_tile<Tiles, kT, 3>(tiles, t0, n0, o);
}

template <class Tiles>
void run_panels(ThreadPool* pool, const Tiles& tiles, int64_t T, const Output& o) {
  static_assert(Tiles::kRows == 4 && (Tiles::kCols == 3 || Tiles::kCols == 4) && Tiles::kPanel % Tiles::kCols == 0);
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t panel = begin; panel < end; ++panel) {
      const int64_t n_begin = panel * Tiles::kPanel, n_end = std::min<int64_t>(o.N, n_begin + Tiles::kPanel);
      for (int64_t t0 = 0; t0 < T; t0 += Tiles::kRows) {
        for (int64_t n0 = n_begin; n0 < n_end; n0 += Tiles::kCols) {
          const int64_t cols = std::min<int64_t>(Tiles::kCols, n_end - n0);
          switch (std::min<int64_t>(Tiles::kRows, T - t0)) {
            case 1: run_tile_rows<Tiles, 1>(tiles, cols, t0, n0, o); break;
            case 2: run_tile_rows<Tiles, 2>(tiles, cols, t0, n0, o); break;
            case 3: run_tile_rows<Tiles, 3>(tiles, cols, t0, n0, o); break;
            default: run_tile_rows<Tiles, 4>(tiles, cols, t0, n0, o); break;
          }
        }
      }
    }
  };
  const int64_t panels = (o.N + Tiles::kPanel - 1) / Tiles::kPanel;
  if (pool != nullptr) {
    pool->parallel_for(panels, 1, run);
  } else {
    run(0, panels);
  }
}

// dequantized_tiles_matmul on AMX: each tile's rows go to bf16 chunk by chunk, a chunk's 32 rows
// side by side (64 bytes apart), so a tile load reads 1 KiB in one run; a few tiles at a time
// (amx_group_rows), so that each x tile pair meets them in turn while they sit in L2.
void dequantized_amx_tiles(Isa isa, const TileX& x, int64_t K, int64_t N,
                           const std::function<void(int64_t, float*)>& dequantize_row, const float* bias, float* y,
                           int64_t n0, int64_t n1) {
  static_assert(kDequantTileRows == kAmxPanelRows);
  constexpr int64_t kRows = kAmxPanelRows;
  // The caller splits the rows between threads: [n0, n1) is one thread's (so at most its rows).
  const int64_t group = amx_group_rows(K, n1 - n0, 1);
  std::vector<float> row(static_cast<size_t>(K));
  std::vector<uint16_t> tiles(static_cast<size_t>(group * K), 0);  // tiles of [K / 32][kRows][32]
  amx_configure_bf16_tiles();
  for (int64_t g0 = n0; g0 < n1; g0 += group) {
    const int64_t rows = std::min(group, n1 - g0);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(g0 + r, row.data());
      uint16_t* tile = tiles.data() + r / kRows * kRows * K;
      for (int64_t k = 0; k < K; k += 32)
        store_f32_as(isa, row.data() + k, DType::kBF16, tile + (k * kRows + r % kRows * 32), 32);
    }
    // The last tile's rows past `rows` keep an earlier tile's values: finite, and dropped.
    amx_bf16_rows(x.amx, tiles.data(), rows, y + g0, N, bias != nullptr ? bias + g0 : nullptr);
  }
  amx_release_tiles();
}

}  // namespace

void matmul_bf16_dots(ThreadPool* pool, const float* x, int64_t T, int64_t K, const uint16_t* w, int64_t N,
                      const float* bias, float* y) {
  const TileX xb = prepare_tile_x(Isa::kAvx512, x, T, K);
  if (!xb.amx.pack.empty()) return amx_bf16_matmul(pool, xb.amx, K, w, N, bias, y);
  run_panels(pool, Bf16Dots{xb.bf16.data(), xb.Kp, w, K}, T, Output{y, N, bias});
}

TileX prepare_tile_x(Isa isa, const float* x, int64_t T, int64_t K) {
  TileX out{x, {}, padded_k(K), {}};
  if (matmul_rounds_x_to_bf16(isa, DType::kBF16, T)) {
    out.bf16.resize(static_cast<size_t>(T * out.Kp));
    round_rows_to_bf16(x, T, K, out.bf16.data());
    if (amx_active(isa) && K % 32 == 0) out.amx = amx_pack_x(out.bf16.data(), T, out.Kp);
  }
  return out;
}

void matmul_fma_tiles(Isa isa, ThreadPool* pool, const float* x, int64_t T, int64_t K, const void* w, DType w_type,
                      int64_t N, const float* bias, float* y) {
  HEARTH_CHECK(isa == Isa::kAvx512 || isa == Isa::kAvx2);
  const auto* wb = static_cast<const uint8_t*>(w);
  dispatch_float(w_type, [&]<DType BT>() {
    if (isa == Isa::kAvx512) {
      run_panels(pool, FmaDots<BT, Isa::kAvx512>{x, wb, K}, T, Output{y, N, bias});
    } else {
      run_panels(pool, FmaDots<BT, Isa::kAvx2>{x, wb, K}, T, Output{y, N, bias});
    }
  });
}

void dequantized_tiles_matmul(Isa isa, const TileX& x, int64_t T, int64_t K, int64_t N,
                              const std::function<void(int64_t, float*)>& dequantize_row, const float* bias, float* y,
                              int64_t n0, int64_t n1) {
  HEARTH_CHECK(isa == Isa::kAvx512 || isa == Isa::kAvx2);
  constexpr int64_t kRows = kDequantTileRows;
  // Where x was rounded to bf16, the tile goes in bf16 to the bf16 dots: twice the products a
  // cycle, for one more rounding of each weight (docs/numerics.md).
  const bool in_bf16 = !x.bf16.empty();
  if (!x.amx.pack.empty()) return dequantized_amx_tiles(isa, x, K, N, dequantize_row, bias, y, n0, n1);
  std::vector<float> row(static_cast<size_t>(K)), tile(in_bf16 ? 0 : static_cast<size_t>(kRows * K));
  std::vector<uint16_t> tile16(in_bf16 ? static_cast<size_t>(kRows * K) : 0);
  for (int64_t r0 = n0; r0 < n1; r0 += kRows) {
    const int64_t rows = std::min(kRows, n1 - r0);
    for (int64_t r = 0; r < rows; ++r) {
      if (in_bf16) {
        dequantize_row(r0 + r, row.data());
        store_f32_as(isa, row.data(), DType::kBF16, tile16.data() + r * K, K);
      } else {
        dequantize_row(r0 + r, tile.data() + r * K);
      }
    }
    // Straight into y's columns r0 .. r0 + rows (row stride N).
    const Output out{y + r0, rows, bias != nullptr ? bias + r0 : nullptr, N};
    if (in_bf16) {
      run_panels(nullptr, Bf16Dots{x.bf16.data(), x.Kp, tile16.data(), K}, T, out);
    } else {
      const auto* w = reinterpret_cast<const uint8_t*>(tile.data());
      if (isa == Isa::kAvx512) {
        run_panels(nullptr, FmaDots<DType::kF32, Isa::kAvx512>{x.x, w, K}, T, out);
      } else {
        run_panels(nullptr, FmaDots<DType::kF32, Isa::kAvx2>{x.x, w, K}, T, out);
      }
    }
  }
}

}  // namespace hearth::cpu
