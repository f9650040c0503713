// Dense bf16 prefill on AVX512-BF16: y[t, n] = sum_k bf16(x[t, k]) * w[n, k] + bias[n].
// x: [T, K] f32, rounded once per call to bf16 (nearest even) into [T, Kp], Kp = K rounded up
// to 32 and zero-padded; w: [N, K] bf16 as loaded (the HF Linear layout, no packing); y: [T, N].
//
// Why: the f32 path (matmul.cpp) widens every weight to f32 and does 16 multiply-adds per
// instruction, with as many loads as FMAs. vdpbf16ps takes bf16 pairs as they are and does 32
// per instruction, and a 4 x 4 register tile (4 rows of x against 4 weight rows) issues 8 loads
// for 16 of them. The cost is x rounded to bf16 (8 significant bits), as the CUDA backend's
// tensor cores and every peer's bf16 path round it; products are exact in f32 and sums are f32
// (docs/numerics.md).
//
// Blocking: a thread takes panels of kPanelRows weight rows (16 rows of K <= 8192 are <= 256 KiB,
// in L2) and runs every 4-row block of x over the panel, so a weight byte comes from memory once
// per call and an x tile (4 rows, in L1) serves 16 weight rows.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/kernels.h"

#define HEARTH_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))

namespace hearth::cpu {
namespace {

constexpr int64_t kTileRows = 4;    // rows of x in a register tile
constexpr int64_t kTileCols = 4;    // weight rows in a register tile
constexpr int64_t kPanelRows = 16;  // weight rows a thread claims at a time

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

// One step of 32 k: acc[t][n] += the pair dots of x row t and weight row n. Full steps load
// plainly, the last partial one under a mask. (Vector casts, not references: through a reference
// gcc keeps the accumulators in memory.)
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

// out[t][n] = dot(xb row t, w row n) for a kT x kN tile. xb rows are Kp apart and padded, so
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

template <int kT, int kN>
void run_tile(const uint16_t* xb, int64_t Kp, const uint16_t* w, int64_t K, int64_t t0, int64_t n0, int64_t N,
              const float* bias, float* y) {
  float out[kT][kN];
  tile_dots<kT, kN>(xb + t0 * Kp, Kp, w + n0 * K, K, out);
  for (int t = 0; t < kT; ++t) {
    for (int n = 0; n < kN; ++n) y[(t0 + t) * N + n0 + n] = out[t][n] + (bias ? bias[n0 + n] : 0.0f);
  }
}

// Tiles of any size up to 4 x 4, by template so the accumulators stay in registers.
template <int kT>
void run_tile_rows(int64_t cols, const uint16_t* xb, int64_t Kp, const uint16_t* w, int64_t K, int64_t t0, int64_t n0,
                   int64_t N, const float* bias, float* y) {
  switch (cols) {
    case 1: run_tile<kT, 1>(xb, Kp, w, K, t0, n0, N, bias, y); break;
    case 2: run_tile<kT, 2>(xb, Kp, w, K, t0, n0, N, bias, y); break;
    case 3: run_tile<kT, 3>(xb, Kp, w, K, t0, n0, N, bias, y); break;
    default: run_tile<kT, 4>(xb, Kp, w, K, t0, n0, N, bias, y); break;
  }
}

void run_any_tile(int64_t rows, int64_t cols, const uint16_t* xb, int64_t Kp, const uint16_t* w, int64_t K, int64_t t0,
                  int64_t n0, int64_t N, const float* bias, float* y) {
  switch (rows) {
    case 1: run_tile_rows<1>(cols, xb, Kp, w, K, t0, n0, N, bias, y); break;
    case 2: run_tile_rows<2>(cols, xb, Kp, w, K, t0, n0, N, bias, y); break;
    case 3: run_tile_rows<3>(cols, xb, Kp, w, K, t0, n0, N, bias, y); break;
    default: run_tile_rows<4>(cols, xb, Kp, w, K, t0, n0, N, bias, y); break;
  }
}

}  // namespace

void matmul_bf16_dots(ThreadPool* pool, const float* x, int64_t T, int64_t K, const uint16_t* w, int64_t N,
                      const float* bias, float* y) {
  const int64_t Kp = padded_k(K);
  std::vector<uint16_t> xb(static_cast<size_t>(T * Kp));
  round_rows_to_bf16(x, T, K, xb.data());
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t panel = begin; panel < end; ++panel) {
      const int64_t n_begin = panel * kPanelRows, n_end = std::min(N, n_begin + kPanelRows);
      for (int64_t t0 = 0; t0 < T; t0 += kTileRows) {
        const int64_t rows = std::min(kTileRows, T - t0);
        for (int64_t n0 = n_begin; n0 < n_end; n0 += kTileCols) {
          run_any_tile(rows, std::min(kTileCols, n_end - n0), xb.data(), Kp, w, K, t0, n0, N, bias, y);
        }
      }
    }
  };
  const int64_t panels = (N + kPanelRows - 1) / kPanelRows;
  if (pool != nullptr) {
    pool->parallel_for(panels, 1, run);
  } else {
    run(0, panels);
  }
}

}  // namespace hearth::cpu
