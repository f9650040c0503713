// Prefill with bf16 weights on AMX tiles: y[t, n] = sum_k xb[t, k] * w[n, k] + bias[n], the
// AVX512-BF16 path's arithmetic (x rounded to bf16 once per call, exact products, f32 sums) on
// the tile unit, which takes 16 x 16 x 32 products an instruction (tdpbf16ps) where vdpbf16ps
// takes 16 x 2.
//
// Tiles: C0..C3 (tmm0-3) the f32 sums of 2 x 2 blocks of [16 weight rows][16 x rows]; A0, A1
// (tmm4-5) 16 weight rows x 32 k each, from a panel of 32 rows copied chunk by chunk (or
// dequantized straight into that layout) so that each tile is 1 KiB in one run; B0, B1 (tmm6-7)
// x, packed once per call so that B row i holds the 16 x rows' bf16 pairs (k = 2i, 2i + 1) of a
// 32-k chunk. Panels go in groups that fit ~1 MiB, and each pair of x tiles meets the group's
// panels in turn, so both stay in L2 (one panel at a time, all of x came from L3 for each: 1.7x
// slower on one core of the device's Xeon, bench/RESULTS.md, stop 53); each C block is transposed
// on its way out into y's rows.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/amx.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"
#include "base/error.h"

#define HEARTH_AMX_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,amx-tile,amx-bf16")))

namespace hearth::cpu {
namespace {

constexpr int64_t kTileRows = 16, kChunk = 32;  // rows of a tile; k per tile step (64 bytes of bf16)

// r[i] = column i of the 16 x 16 matrix of 32-bit elements whose rows were r.
HEARTH_AVX512 inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8;
       ++i) {  // per 128-bit block: t[2i] = (r2i[0], r2i+1[0], r2i[1], r2i+1[1]), t[2i+1] the same of [2], [3]
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], block b: rows 4i .. 4i + 3, element 4b + j
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // column 4b + j: block b of r[j], r[4 + j], r[8 + j], r[12 + j]
    const __m512i s0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88), s1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
    const __m512i s2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88);
    const __m512i s3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
    t[j] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    t[4 + j] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(s0, s2, 0xdd);
    t[12 + j] = _mm512_shuffle_i32x4(s1, s3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// y rows t0 .. t0 + 16 (those below T), columns [0, cols) of a block C [16 weight rows][16 x
// rows] (c, 16 floats a row): C transposed, plus the bias.
HEARTH_AVX512 void store_block(const float* c, float* y, int64_t ldy, int64_t t0, int64_t T, int64_t cols,
                               const float* bias) {
  if (cols <= 0) return;
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(c + 16 * i);
  transpose16(r);
  const __mmask16 m = simd::tail_mask16(cols);
  const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
  for (int64_t t = 0; t < kTileRows && t0 + t < T; ++t) {
    _mm512_mask_storeu_ps(y + (t0 + t) * ldy, m, _mm512_add_ps(_mm512_castsi512_ps(r[t]), b));
  }
}

// Rows [0, rows) of w (K apart) into out [K / 32][kAmxPanelRows][32], the rest zero: the panel
// layout amx_bf16_rows takes, each tile of 16 rows 1 KiB in one run, and the last panel padded
// by the same code (as fast as loading the tiles from the rows as they lie: bench/RESULTS.md).
HEARTH_AVX512 void copy_panel(const uint16_t* w, int64_t K, int64_t rows, uint16_t* out) {
  for (int64_t c = 0; c < K / kChunk; ++c) {
    for (int64_t r = 0; r < kAmxPanelRows; ++r) {
      const __m512i v = r < rows ? _mm512_loadu_si512(w + r * K + c * kChunk) : _mm512_setzero_si512();
      _mm512_storeu_si512(out + (c * kAmxPanelRows + r) * kChunk, v);
    }
  }
  __asm__ volatile("" ::: "memory");  // GCC's tileloadd asm does not say it reads memory
}

HEARTH_AMX_BF16 void configure_tiles() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.shape(i, kTileRows, 64);
  cfg.load();
}

HEARTH_AMX_BF16 void release_tiles() { _tile_release(); }

HEARTH_AVX512 AmxX pack_x(const uint16_t* xb, int64_t T, int64_t Kp) {
  HEARTH_CHECK(Kp % kChunk == 0);
  AmxX out;
  out.T = T;
  out.chunks = Kp / kChunk;
  out.tiles = (T + 2 * kTileRows - 1) / (2 * kTileRows) * 2;  // x tiles go in pairs
  out.pack.resize(static_cast<size_t>(out.tiles * out.chunks * 256));
  for (int64_t j = 0; j < out.tiles; ++j) {
    for (int64_t c = 0; c < out.chunks; ++c) {
      __m512i r[16];  // x row 16j + i's 16 pairs of the chunk, then transposed: B's rows
      for (int64_t i = 0; i < kTileRows; ++i) {
        const int64_t t = j * kTileRows + i;
        r[i] = t < T ? _mm512_loadu_si512(xb + t * Kp + c * kChunk) : _mm512_setzero_si512();
      }
      transpose16(r);
      uint32_t* dst = out.pack.data() + (j * out.chunks + c) * 256;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + 16 * i, r[i]);
    }
  }
  return out;
}

// y for rows [0, rows) of panels laid back to back in w, each kAmxPanelRows rows in the layout
// [K / 32][kAmxPanelRows][32]: every x tile pair meets each panel in turn, so that the pair (32 x
// rows) and the panels stay in L2 between their uses. (One panel at a time, all of x went by
// between a pair's uses, 2 MiB for 512 rows at K = 2048.)
HEARTH_AMX_BF16 void bf16_rows(const AmxX& x, const uint16_t* w, int64_t rows, float* y, int64_t ldy,
                               const float* bias) {
  alignas(64) float c[4][256];
  constexpr int64_t kRunBytes = kChunk * 2;                // a weight row's chunk: a tile row
  constexpr int64_t kChunkElems = kAmxPanelRows * kChunk;  // a chunk of the panel's rows
  const int64_t panel_elems = x.chunks * kChunkElems;
  for (int64_t j = 0; j < x.tiles; j += 2) {
    const uint32_t* b0 = x.pack.data() + j * x.chunks * 256;
    const uint32_t* b1 = b0 + x.chunks * 256;
    const int64_t t0 = j * kTileRows, t1 = t0 + kTileRows;
    for (int64_t p0 = 0; p0 < rows; p0 += kAmxPanelRows) {
      const uint16_t* w0 = w + p0 / kAmxPanelRows * panel_elems;
      const uint16_t* w1 = w0 + kTileRows * kChunk;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t k = 0; k < x.chunks; ++k) {
        _tile_loadd(4, w0 + k * kChunkElems, kRunBytes);
        _tile_loadd(5, w1 + k * kChunkElems, kRunBytes);
        _tile_loadd(6, b0 + k * 256, 64);
        _tile_loadd(7, b1 + k * 256, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c[0], 64);
      _tile_stored(1, c[1], 64);
      _tile_stored(2, c[2], 64);
      _tile_stored(3, c[3], 64);
      const int64_t left = rows - p0;
      float* yp = y + p0;
      const float* b_lo = bias != nullptr ? bias + p0 : nullptr;
      const float* b_hi = bias != nullptr ? b_lo + kTileRows : nullptr;
      store_block(c[0], yp, ldy, t0, x.T, std::min(left, kTileRows), b_lo);
      store_block(c[1], yp, ldy, t1, x.T, std::min(left, kTileRows), b_lo);
      store_block(c[2], yp + kTileRows, ldy, t0, x.T, std::min(left, kAmxPanelRows) - kTileRows, b_hi);
      store_block(c[3], yp + kTileRows, ldy, t1, x.T, std::min(left, kAmxPanelRows) - kTileRows, b_hi);
    }
  }
}

}  // namespace

AmxX amx_pack_x(const uint16_t* xb, int64_t T, int64_t Kp) { return pack_x(xb, T, Kp); }

void amx_bf16_rows(const AmxX& x, const uint16_t* w, int64_t rows, float* y, int64_t ldy, const float* bias) {
  bf16_rows(x, w, rows, y, ldy, bias);
}

void amx_configure_bf16_tiles() { configure_tiles(); }
void amx_release_tiles() { release_tiles(); }

int64_t amx_group_rows(int64_t K, int64_t N, int64_t threads) {
  constexpr int64_t kGroupBytes = int64_t{1} << 20;
  const int64_t by_bytes = kGroupBytes / (kAmxPanelRows * K * 2);
  const int64_t panels = (N + kAmxPanelRows - 1) / kAmxPanelRows;
  const int64_t by_threads = threads > 1 ? (panels + 2 * threads - 1) / (2 * threads) : panels;
  return std::clamp<int64_t>(std::min(by_bytes, by_threads), 1, 8) * kAmxPanelRows;
}

void amx_bf16_matmul(ThreadPool* pool, const AmxX& x, int64_t K, const uint16_t* w, int64_t N, const float* bias,
                     float* y) {
  HEARTH_CHECK(K == x.chunks * kChunk);
  const int64_t group = amx_group_rows(K, N, pool != nullptr ? pool->size() : 1), groups = (N + group - 1) / group;
  auto run = [&](int64_t begin, int64_t end) {
    configure_tiles();
    std::vector<uint16_t> panels(static_cast<size_t>(group * K));  // panels of [K / 32][32 rows][32]
    for (int64_t g = begin; g < end; ++g) {
      const int64_t n0 = g * group, rows = std::min(group, N - n0);
      for (int64_t p = 0; p < rows; p += kAmxPanelRows)
        copy_panel(w + (n0 + p) * K, K, std::min(kAmxPanelRows, rows - p), panels.data() + p * K);
      bf16_rows(x, panels.data(), rows, y + n0, N, bias != nullptr ? bias + n0 : nullptr);
    }
    release_tiles();
  };
  if (pool != nullptr) {
    pool->parallel_for(groups, 1, run);
  } else {
    run(0, groups);
  }
}

}  // namespace hearth::cpu
