// Varlen paged attention with GQA, causal and sliding-window masks.
// q: [T, Hq, Dh] f32; K/V cache: [n_blocks, block_size, Hkv, Dh] f32|f16|bf16; out: [T, Hq, Dh] f32.
// Query row t of sequence s sits at cache index c = context_lens[s] + t - seq_starts[s];
// it attends to cache indices j in [lo, c], lo = max(0, c - window + 1) with a window.
// Exact two-pass softmax per (row, head): scores, max, exp, normalize, weighted sum of V.
// On AVX-512 with head dims 64 and 128, a decode row's positions split into spans (one per
// thread where the context allows), each walked block by block in memory order for every head
// and merged afterwards (run_span, merge_spans); prefill rows run in tiles of 16 rows of one
// sequence that share each block of 16 K/V rows, widened to f32 once (run_tile), a lone row
// left over from the tiles as a decode row.
#include <algorithm>
#include <array>
#include <cmath>
#include <new>
#include <type_traits>
#include <vector>

#include "backends/cpu/dot.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/page_prefetch.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kPrefetchRows = 8;  // K/V rows fetched ahead of the one in use (into L2)
constexpr int64_t kTileRows = 16;     // prefill query rows that share each K/V row read

// out += p * v over Dh; v of the cache's element type KT.
template <DType KT>
void axpy_scalar(float* out, float p, const void* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += p * load_scalar(v, KT, i);
}
template <DType KT>
HEARTH_AVX2 void axpy_avx2(float* out, float p, const void* v, int64_t n) {
  const __m256 vp = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_fmadd_ps(vp, simd::load8<KT>(v, i), _mm256_loadu_ps(out + i)));
  for (; i < n; ++i) out[i] += p * load_scalar(v, KT, i);
}
template <DType KT>
HEARTH_AVX512 void axpy_avx512(float* out, float p, const void* v, int64_t n) {
  const __m512 vp = _mm512_set1_ps(p);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(vp, simd::load16<KT>(v, i, m), simd::load16_f32(out + i, m)));
  }
}

// s[i] = exp(s[i] - mx) over n scores; returns their sum.
float exp_sum_scalar(float* s, int64_t n, float mx) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    sum += s[i];
  }
  return sum;
}
HEARTH_AVX512 float exp_sum_avx512(float* s, int64_t n, float mx) {
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = simd::tail_mask16(n - i);
    const __m512 e = simd::exp16(_mm512_sub_ps(simd::load16_f32(s + i, m), vmx));
    _mm512_mask_storeu_ps(s + i, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// Lane j of the result = the sum of the 16 lanes of v[j]. Pairs of vectors are interleaved and
// added (each 128-bit lane then holds four vectors' sums over its four floats), then the 128-bit
// lanes of four such vectors are transposed and added.
HEARTH_AVX512 inline __m512 sum16(const __m512 (&v)[16]) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i)
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // quads[i], 128-bit lane L: the sums over lane L of v[4i .. 4i + 3].
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The workers' buffers are read with 64-byte vector loads, so they start on a cache line: in a
// malloc'd buffer (16-byte aligned) every such load may split two lines, and where the buffers
// happened to fall moved the prefill attention by 5-7% (bench/RESULTS.md, 2026-12-05).
template <typename T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <typename U>
  explicit LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{64}); }
  bool operator==(const LineAligned&) const = default;
};
using LineFloats = std::vector<float, LineAligned<float>>;

// Buffers of one worker.
struct Scratch {
  LineFloats scores;    // [rows, heads, context]; a decode span's [context, Hq rounded up to 16]
  LineFloats rows;      // [16, Dh]: a block of 16 K or V rows widened to f32
  LineFloats out;       // [rows, heads, Dh]: a tile's output sums
  LineFloats head_max;  // [Hq rounded up to 16]: a span's running maximum score per head
  LineFloats head_sum;  // [Hq rounded up to 16]: a span's sum of e^(s - max) per head
};

// Heads rounded up to a whole vector of 16: the width of a decode span's position-major scores.
int64_t padded_heads(int64_t Hq) { return (Hq + 15) / 16 * 16; }

// Floats per head in a decode span's state: Dh sums, m, l, padded to whole 64-byte lines so that
// every head's sums start on a line (Dh is 64 or 128 there). The V pass loads and stores them
// around every two positions; at Dh + 2 most of those accesses split two lines:
// cpu_attention_bench 4096 read 31-34 GB/s of K and V with two threads, against 42-50 now
// (bench/RESULTS.md, stop 35).
constexpr int64_t state_width(int64_t Dh) { return Dh + 16; }

// The first key that cache index c attends to (0, or the start of its window).
int64_t first_key(const AttentionArgs& a, int64_t c) {
  return a.window > 0 ? std::max<int64_t>(0, c - a.window + 1) : 0;
}

// One query row's heads against the cache, whose elements are KT (f32, f16 or bf16); scores
// and sums are f32.
template <DType KT>
struct RowHead {
  using Elem = std::conditional_t<KT == DType::kF32, float, uint16_t>;
  const AttentionArgs& a;
  Isa isa;
  Scratch& scratch;
  LineFloats& scores = scratch.scores;

  // Calls visit(j, row) for cache indices j = lo .. c in order, row = that position's
  // [Dh] vector of kv_head. Positions run contiguously within a block (rows Hkv * Dh apart),
  // so the block table is read, and the position divided, once per block, not per row.
  // Always inlined, so that the AVX-512 callers' visitors inline into their loops.
  template <typename Visit>
  __attribute__((always_inline)) void for_each_row(const void* cache, int64_t seq, int64_t lo, int64_t c,
                                                   int64_t kv_head, const Visit& visit) const {
    const int64_t stride = a.Hkv * a.Dh;
    const int64_t row_bytes = a.Dh * static_cast<int64_t>(sizeof(Elem));
    for (int64_t j = lo; j <= c;) {
      const int64_t b = j / a.block_size, end = std::min(c + 1, (b + 1) * a.block_size);
      const int64_t slot =
          static_cast<int64_t>(a.block_tables[seq * a.max_blocks + b]) * a.block_size + j % a.block_size;
      const Elem* row = static_cast<const Elem*>(cache) + slot * stride + kv_head * a.Dh;
      for (; j < end; ++j, row += stride) {
        // Rows of one head are Hkv * Dh elements apart (2-4 KiB for 8 heads of 128): too far
        // apart for the hardware prefetchers, so the rows a few positions on are fetched by hand,
        // into L2 (T1): L1's few miss buffers capped the stream (4 rows into L1: 9-11 GB/s of
        // K and V on the 2-core EPYC; 8 rows into L2: 11-13; cpu_attention_bench).
        if (j + kPrefetchRows < end) {
          const char* ahead = reinterpret_cast<const char*>(row + kPrefetchRows * stride);
          for (int64_t byte = 0; byte < row_bytes; byte += 64) _mm_prefetch(ahead + byte, _MM_HINT_T1);
        }
        visit(j, row);
      }
    }
  }

  // Prefill tiles on AVX-512 with Dh = 16 * kD: `rows` consecutive query rows t0 .. of one
  // sequence (cache indices c0, c0 + 1, ...) and the kG query heads h0 .. of one KV head. Keys go
  // 16 at a time: their K (then V) rows are widened into scratch.rows once and serve every row
  // and head of the tile, where the per-row kernel reads and widens each of them once per
  // query row. Scores come from the 16 partial dots through sum16, as in run_span; each
  // row keeps only its own keys [lo_r, c_r] (causal, window), so its scores, softmax and sums
  // are those of the per-row kernel.
  template <int kD, int kG>
  HEARTH_AVX512 __attribute__((flatten)) void run_tile(int64_t t0, int64_t rows, int64_t seq, int64_t h0,
                                                       int64_t kv_head) const {
    const int64_t Dh = a.Dh, c0 = a.context_lens[seq] + t0 - a.seq_starts[seq];
    auto lo_of = [&](int64_t r) { return first_key(a, c0 + r); };

    const int64_t first = lo_of(0), last = c0 + rows - 1, n = last - first + 1;  // the tile's keys
    float* block = scratch.rows.data();
    // scores of (row r, head g) at key j: scores[(r * kG + g) * n + j - first].
    std::array<float, kTileRows * kG> row_max, inv;
    row_max.fill(-INFINITY);
    auto widen_block = [&](const void* cache, int64_t j0, int64_t count) HEARTH_AVX512 {
      int64_t jj = 0;
      for_each_row(cache, seq, j0, j0 + count - 1, kv_head, [&](int64_t, const Elem* src) HEARTH_AVX512 {
        for (int i = 0; i < kD; ++i) _mm512_storeu_ps(block + jj * Dh + 16 * i, simd::load16<KT>(src, 16 * i, 0xffff));
        ++jj;
      });
      for (; jj < 16; ++jj) std::fill(block + jj * Dh, block + (jj + 1) * Dh, 0.0f);
    };
    // For each block of 16 keys from j0 (widened from `cache` into block), visit(r, j0, from, to)
    // for each row r with keys in it: lanes from .. to of the block.
    auto for_each_block = [&](const void* cache, const auto& visit) HEARTH_AVX512 {
      for (int64_t j0 = first; j0 <= last; j0 += 16) {
        const int64_t count = std::min<int64_t>(16, last + 1 - j0);
        widen_block(cache, j0, count);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t from = std::max<int64_t>(0, lo_of(r) - j0), to = std::min<int64_t>(count - 1, c0 + r - j0);
          if (from <= to) visit(r, j0, from, to);
        }
      }
    };
    for_each_block(a.k_cache, [&](int64_t r, int64_t j0, int64_t from, int64_t to) HEARTH_AVX512 {
      const int64_t lo = lo_of(r);
      const __mmask16 keep = static_cast<__mmask16>(((1u << (to + 1)) - 1) & ~((1u << from) - 1));
      for (int g = 0; g < kG; ++g) {
        const float* q = a.q + ((t0 + r) * a.Hq + h0 + g) * Dh;
        __m512 qv[kD];
        for (int i = 0; i < kD; ++i) qv[i] = _mm512_loadu_ps(q + 16 * i);
        __m512 partial[16];
        for (int jj = 0; jj < 16; ++jj) {
          const float* k = block + jj * Dh;
          __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));
          for (int i = 1; i < kD; ++i) acc = _mm512_fmadd_ps(qv[i], _mm512_loadu_ps(k + 16 * i), acc);
          partial[jj] = acc;
        }
        const __m512 sc = _mm512_mul_ps(sum16(partial), _mm512_set1_ps(a.scale));
        // Lanes from .. to, moved down to lane 0, land at key j0 + from of the row's scores.
        float* dst = scores.data() + (r * kG + g) * n + (j0 + from - lo);
        _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << (to - from + 1)) - 1),
                              _mm512_maskz_compress_ps(keep, sc));
        float& m = row_max[static_cast<size_t>(r * kG + g)];
        m = std::max(m, _mm512_mask_reduce_max_ps(keep, sc));
      }
    });
    // Softmax per (row, head) over its own keys.
    for (int64_t r = 0; r < rows; ++r) {
      for (int g = 0; g < kG; ++g) {
        const size_t rg = static_cast<size_t>(r * kG + g);
        inv[rg] = 1.0f / exp_sum_avx512(scores.data() + rg * n, c0 + r - lo_of(r) + 1, row_max[rg]);
      }
    }
    float* out = scratch.out.data();
    std::fill(out, out + rows * kG * Dh, 0.0f);
    for_each_block(a.v_cache, [&](int64_t r, int64_t j0, int64_t from, int64_t to) HEARTH_AVX512 {
      const int64_t lo = lo_of(r);
      for (int g = 0; g < kG; ++g) {
        const size_t rg = static_cast<size_t>(r * kG + g);
        float* o_row = out + rg * Dh;
        __m512 o[kD];
        for (int i = 0; i < kD; ++i) o[i] = _mm512_loadu_ps(o_row + 16 * i);
        const float* p = scores.data() + rg * n;  // key j at p[j - lo]
        for (int64_t jj = from; jj <= to; ++jj) {
          const __m512 pv = _mm512_set1_ps(p[j0 + jj - lo] * inv[rg]);
          for (int i = 0; i < kD; ++i) o[i] = _mm512_fmadd_ps(pv, _mm512_loadu_ps(block + jj * Dh + 16 * i), o[i]);
        }
        for (int i = 0; i < kD; ++i) _mm512_storeu_ps(o_row + 16 * i, o[i]);
      }
    });
    for (int64_t r = 0; r < rows; ++r) {
      for (int g = 0; g < kG; ++g) {
        std::copy_n(out + (r * kG + g) * Dh, Dh, a.out + ((t0 + r) * a.Hq + h0 + g) * Dh);
      }
    }
  }

  // The pages kPagePrefetchAhead past the position row at `position` (row_bytes: all heads), in a
  // run of rows ending at run_end, followed into the next run (`next`, where the block table goes
  // on; null at the span's end). Both decode passes read each run in ascending order.
  static void prefetch_rows_ahead(const Elem* position, int64_t row_bytes, const char* run_end, const Elem* next,
                                  uintptr_t& last_page) {
    for (int64_t byte = 0; byte < row_bytes; byte += 4096) {
      const char* ahead = reinterpret_cast<const char*>(position) + byte + kPagePrefetchAhead;
      if (ahead >= run_end) {
        if (next == nullptr) return;
        ahead = reinterpret_cast<const char*>(next) + (ahead - run_end);
      }
      prefetch_page(ahead, last_page);
    }
  }

  // The decode K pass when Hq % 16 == 0 and kGroup (<= 8) query heads share each KV head:
  // positions in memory order, and at each position every KV head's K row widened once and
  // multiplied with its kGroup query heads (q read from L1), 8 heads of two positions' partial
  // dots at a time, summed by one sum16 into their scores. A block is read as one ascending run.
  template <int kD, int kGroup, typename ForEachBlock>
  HEARTH_AVX512 __attribute__((always_inline)) void k_pass_by_position(int64_t t, int64_t j0,
                                                                       const ForEachBlock& for_each_block,
                                                                       float* scores_of, float* head_max) const {
    const int64_t stride = a.Hkv * a.Dh, Dh = a.Dh, width = padded_heads(a.Hq);
    const float* q = a.q + t * a.Hq * Dh;
    const __m512 scale = _mm512_set1_ps(a.scale);
    uintptr_t last_page = 0;
    const int64_t row_bytes = stride * static_cast<int64_t>(sizeof(Elem));
    for_each_block(a.k_cache, [&](int64_t j, int64_t rows, const Elem* base, const Elem* next) HEARTH_AVX512 {
      // The K pass reads each run of rows in ascending order: the pages kPagePrefetchAhead on,
      // as the panel decode does, followed into the next run (`next`, where the block table
      // goes on) past this one's end. A prefetch of the next run's whole row at each row, as
      // before, read 10-20% slower (cpu_attention_bench; bench/RESULTS.md, 2026-12-05).
      const char* run_end = reinterpret_cast<const char*>(base) + rows * row_bytes;
      for (int64_t r = 0; r < rows; r += 2) {
        // Two positions at a time (the second the first again at an odd end), 8 heads of each:
        // each q vector loaded from L1 serves both, half the loads of q per position.
        const bool pair = r + 1 < rows;
        const Elem* position = base + r * stride;
        const Elem* second = pair ? position + stride : position;
        prefetch_rows_ahead(position, row_bytes, run_end, next, last_page);
        if (pair) prefetch_rows_ahead(second, row_bytes, run_end, next, last_page);
        float* dst = scores_of + (j - j0 + r) * width;
        for (int64_t h0 = 0; h0 < a.Hq; h0 += 8) {
          __m512 partial[16];  // [0, 8): the first position's heads h0 .., [8, 16): the second's
          for (int i = 0; i < 16; ++i) partial[i] = _mm512_setzero_ps();
          for (int kv = 0; kv < 8 / kGroup; ++kv) {
            const int64_t at = (h0 / kGroup + kv) * Dh;
            for (int i = 0; i < kD; ++i) {
              const __m512 k0 = simd::load16<KT>(position + at, 16 * i, 0xffff);
              const __m512 k1 = simd::load16<KT>(second + at, 16 * i, 0xffff);
              for (int g = 0; g < kGroup; ++g) {
                const int head = kv * kGroup + g;
                const __m512 qv = _mm512_loadu_ps(q + (h0 + head) * Dh + 16 * i);
                partial[head] = _mm512_fmadd_ps(qv, k0, partial[head]);
                partial[8 + head] = _mm512_fmadd_ps(qv, k1, partial[8 + head]);
              }
            }
          }
          const __m512 sc = _mm512_mul_ps(sum16(partial), scale);
          const __m256 first_sc = _mm512_castps512_ps256(sc), second_sc = _mm512_extractf32x8_ps(sc, 1);
          _mm256_storeu_ps(dst + h0, first_sc);
          if (pair) _mm256_storeu_ps(dst + width + h0, second_sc);
          _mm256_storeu_ps(head_max + h0,
                           _mm256_max_ps(_mm256_loadu_ps(head_max + h0), _mm256_max_ps(first_sc, second_sc)));
        }
      }
    });
  }

  // The decode K pass for other head counts: one query head at a time over a block's 16
  // positions (its 16 partial dots, q and a K row fit the 32 registers), the 16 scores written
  // to their positions' rows; the padding heads' lanes are zero.
  template <int kD, typename ForEachBlock, typename PrefetchShare>
  HEARTH_AVX512 __attribute__((always_inline)) void k_pass_by_head(int64_t t, int64_t j0,
                                                                   const ForEachBlock& for_each_block,
                                                                   const PrefetchShare& prefetch_share,
                                                                   int64_t head_share, float* scores_of,
                                                                   float* head_max) const {
    const int64_t stride = a.Hkv * a.Dh, Dh = a.Dh, width = padded_heads(a.Hq), group = a.Hq / a.Hkv;
    for_each_block(a.k_cache, [&](int64_t j, int64_t rows, const Elem* base, const Elem* next) HEARTH_AVX512 {
      const __mmask16 m = simd::tail_mask16(rows);
      for (int64_t h = 0; h < a.Hq; ++h) {
        prefetch_share(next, h, head_share);
        __m512 qv[kD];
        for (int i = 0; i < kD; ++i) qv[i] = _mm512_loadu_ps(a.q + (t * a.Hq + h) * Dh + 16 * i);
        __m512 partial[16];
        const Elem* k = base + h / group * Dh;
        for (int64_t r = 0; r < 16; ++r, k += stride) {
          if (r >= rows) {
            partial[r] = _mm512_setzero_ps();
            continue;
          }
          __m512 acc = _mm512_mul_ps(qv[0], simd::load16<KT>(k, 0, 0xffff));
          for (int i = 1; i < kD; ++i) acc = _mm512_fmadd_ps(qv[i], simd::load16<KT>(k, 16 * i, 0xffff), acc);
          partial[r] = acc;
        }
        const __m512 sc = _mm512_mul_ps(sum16(partial), _mm512_set1_ps(a.scale));
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, sc);
        for (int64_t r = 0; r < rows; ++r) scores_of[(j - j0 + r) * width + h] = lanes[r];
        head_max[h] = std::max(head_max[h], _mm512_mask_reduce_max_ps(m, sc));
      }
      for (int64_t r = 0; r < rows; ++r)
        std::fill(scores_of + (j - j0 + r) * width + a.Hq, scores_of + (j - j0 + r + 1) * width, 0.0f);
    });
    for (int64_t h = a.Hq; h < width; ++h) head_max[h] = 0.0f;
  }

  // Decode on AVX-512 with Dh = 16 * kD: positions [j0, j1] of row t for every head. The walk goes
  // block by block in memory order: all heads' rows of a block (block_size * Hkv * Dh elements,
  // contiguous) before the next block, whose bytes are prefetched in order meanwhile. A walk of
  // one head across the whole context reads Dh elements every Hkv * Dh: each DRAM page is opened
  // once per head and the hardware prefetchers do not follow (7-8 GB/s of K and V on one core of
  // the EPYC, against 15 in block order; cpu_attention_bench). The K pass goes two positions at
  // a time where the heads come in vectors of 16, at most 8 to a KV head (k_pass_by_position),
  // else head by head (k_pass_by_head); either leaves the scores position-major. The V pass goes
  // in memory order too, two positions at a time, kG heads that share a KV head (16 sums for two)
  // at a time. Writes the span's unnormalized state to `state` [Hq, state_width(Dh)]: per head sum_j e^(s_j - m) v_j,
  // then m, then sum_j e^(s_j - m); merge_spans combines spans.
  template <int kD, int kG>
  HEARTH_AVX512 __attribute__((flatten)) void run_span(int64_t t, int64_t seq, int64_t j0, int64_t j1,
                                                       float* state) const {
    const int64_t n = j1 - j0 + 1, stride = a.Hkv * a.Dh, group = a.Hq / a.Hkv, Dh = a.Dh;
    float* head_max = scratch.head_max.data();
    // visit(j, rows, base, next): rows (<= 16) positions j .. j + rows - 1 of one block at
    // `base` (all heads; position r's head h at base + r * stride + h * Dh), `next` the row of
    // position j + rows or null.
    const int32_t* table = a.block_tables + seq * a.max_blocks;
    auto row_of = [&](const void* cache, int64_t j) {
      return static_cast<const Elem*>(cache) +
             (static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size) * stride;
    };
    auto for_each_block = [&](const void* cache, const auto& visit) HEARTH_AVX512 {
      for (int64_t j = j0; j <= j1;) {
        const int64_t end = std::min({j1 + 1, (j / a.block_size + 1) * a.block_size, j + 16});
        visit(j, end - j, row_of(cache, j), end <= j1 ? row_of(cache, end) : nullptr);
        j = end;
      }
    };
    // The next rows' bytes (up to 16 positions of every head), in order, a share per query head
    // (k_pass_by_head). The share is computed once: a division per call cost the walk a quarter
    // of its speed.
    const int64_t pairs = a.Hq / kG, row_bytes = stride * static_cast<int64_t>(sizeof(Elem)),
                  block_bytes = std::min<int64_t>(a.block_size, 16) * row_bytes;
    const int64_t head_share = (block_bytes / a.Hq + 63) / 64 * 64;
    auto prefetch_share = [&](const Elem* next, int64_t i, int64_t share) {
      if (next == nullptr) return;
      const char* from = reinterpret_cast<const char*>(next);
      for (int64_t byte = i * share; byte < std::min(block_bytes, (i + 1) * share); byte += 64) {
        _mm_prefetch(from + byte, _MM_HINT_T1);
      }
    };
    // Scores position-major, [n, Hq rounded up to 16]: each position's heads come out of one sum16.
    const int64_t width = padded_heads(a.Hq);
    float* scores_of = scores.data();
    std::fill_n(head_max, width, -INFINITY);
    switch (a.Hq % 16 == 0 ? group : 0) {
      case 1: k_pass_by_position<kD, 1>(t, j0, for_each_block, scores_of, head_max); break;
      case 2: k_pass_by_position<kD, 2>(t, j0, for_each_block, scores_of, head_max); break;
      case 4: k_pass_by_position<kD, 4>(t, j0, for_each_block, scores_of, head_max); break;
      case 8: k_pass_by_position<kD, 8>(t, j0, for_each_block, scores_of, head_max); break;
      default: k_pass_by_head<kD>(t, j0, for_each_block, prefetch_share, head_share, scores_of, head_max); break;
    }
    // e^(s - m) in place and their sums, 16 heads at a time.
    float* sums = scratch.head_sum.data();
    for (int64_t h0 = 0; h0 < width; h0 += 16) {
      const __m512 mx = _mm512_loadu_ps(head_max + h0);
      __m512 sum = _mm512_setzero_ps();
      for (int64_t i = 0; i < n; ++i) {
        float* row = scores_of + i * width + h0;
        const __m512 e = simd::exp16(_mm512_sub_ps(_mm512_loadu_ps(row), mx));
        _mm512_storeu_ps(row, e);
        sum = _mm512_add_ps(sum, e);
      }
      _mm512_storeu_ps(sums + h0, sum);
    }
    for (int64_t h = 0; h < a.Hq; ++h) {
      float* st = state + h * state_width(Dh);
      std::fill_n(st, Dh, 0.0f);
      st[Dh] = head_max[h];
      st[Dh + 1] = sums[h];
    }
    // The V pass in memory order, two positions at a time: at each, every KV head's rows, and for
    // each kG query heads that share it (counted up rather than divided out), their sums loaded
    // from the state (L1), the rows added in with their probabilities, and stored back. Each
    // block is read once, in order. Walking head pairs over a block instead, their sums held in
    // registers, reads each block once per pair, 2 KiB apart: it was faster at short spans only
    // while the state's heads split cache lines (bench/RESULTS.md, stop 35).
    uintptr_t last_v_page = 0;
    // Running pointers (the state's sums, the probabilities, the KV head's rows), advanced per
    // head pair: indices recomputed at each pair spilled general registers to the stack.
    auto v_rows = [&]<int kR>(int64_t j, const Elem* rowp) HEARTH_AVX512 {
      const float* probs = scores_of + (j - j0) * width;  // position r's head h at probs[r * width + h]
      float* sums_of = state;
      const Elem* v = rowp;
      for (int64_t pair = 0, left = group; pair < pairs; ++pair, sums_of += kG * state_width(Dh), probs += kG) {
        __m512 o[kG][kD], p[kR][kG];
        for (int g = 0; g < kG; ++g) {
          for (int i = 0; i < kD; ++i) o[g][i] = _mm512_load_ps(sums_of + g * state_width(Dh) + 16 * i);
        }
        for (int r = 0; r < kR; ++r)
          for (int g = 0; g < kG; ++g) p[r][g] = _mm512_set1_ps(probs[r * width + g]);
        for (int i = 0; i < kD; ++i) {
          for (int r = 0; r < kR; ++r) {
            const __m512 vr = simd::load16<KT>(v + r * stride, 16 * i, 0xffff);
            for (int g = 0; g < kG; ++g) o[g][i] = _mm512_fmadd_ps(p[r][g], vr, o[g][i]);
          }
        }
        for (int g = 0; g < kG; ++g) {
          for (int i = 0; i < kD; ++i) _mm512_store_ps(sums_of + g * state_width(Dh) + 16 * i, o[g][i]);
        }
        left -= kG;
        if (left == 0) {
          v += Dh;
          left = group;
        }
      }
    };
    for_each_block(a.v_cache, [&](int64_t j, int64_t rows, const Elem* base, const Elem* next) HEARTH_AVX512 {
      const char* run_end = reinterpret_cast<const char*>(base) + rows * row_bytes;
      int64_t r = 0;
      for (; r + 2 <= rows; r += 2) {
        prefetch_rows_ahead(base + r * stride, row_bytes, run_end, next, last_v_page);
        prefetch_rows_ahead(base + (r + 1) * stride, row_bytes, run_end, next, last_v_page);
        v_rows.template operator()<2>(j + r, base + r * stride);
      }
      for (; r < rows; ++r) {
        prefetch_rows_ahead(base + r * stride, row_bytes, run_end, next, last_v_page);
        v_rows.template operator()<1>(j + r, base + r * stride);
      }
    });
  }

  // Positions [j0, j1] of decode row t, every head (AVX-512, Dh 64 or 128): see run_span.
  void span(int64_t t, int64_t seq, int64_t j0, int64_t j1, float* state) const {
    const bool pairs = (a.Hq / a.Hkv) % 2 == 0;
    if (a.Dh == 128) return pairs ? run_span<8, 2>(t, seq, j0, j1, state) : run_span<8, 1>(t, seq, j0, j1, state);
    return pairs ? run_span<4, 2>(t, seq, j0, j1, state) : run_span<4, 1>(t, seq, j0, j1, state);
  }

  // A prefill tile on AVX-512 (Dh 64 or 128), heads h0 .. h0 + heads (1 or 2).
  void tile(int64_t t0, int64_t rows, int64_t seq, int64_t h0, int64_t heads) const {
    const int64_t kv_head = h0 / (a.Hq / a.Hkv);
    if (a.Dh == 128)
      return heads == 2 ? run_tile<8, 2>(t0, rows, seq, h0, kv_head) : run_tile<8, 1>(t0, rows, seq, h0, kv_head);
    return heads == 2 ? run_tile<4, 2>(t0, rows, seq, h0, kv_head) : run_tile<4, 1>(t0, rows, seq, h0, kv_head);
  }

  // Query heads h0 .. h0 + heads (1 or 2, sharing a KV head) of row t.
  void run(int64_t t, int64_t seq, int64_t h0, int64_t heads) const {
    const int64_t c = a.context_lens[seq] + t - a.seq_starts[seq];
    const int64_t lo = first_key(a, c);
    const int64_t kv_head = h0 / (a.Hq / a.Hkv);
    for (int64_t h = h0; h < h0 + heads; ++h) run_one(t, seq, h, lo, c, kv_head);
  }

  void run_one(int64_t t, int64_t seq, int64_t h, int64_t lo, int64_t c, int64_t kv_head) const {
    const float* q = a.q + (t * a.Hq + h) * a.Dh;
    float* out = a.out + (t * a.Hq + h) * a.Dh;
    const int64_t n = c - lo + 1;
    float mx = -INFINITY;
    for_each_row(a.k_cache, seq, lo, c, kv_head, [&](int64_t j, const Elem* k) {
      float s;
      switch (isa) {
        case Isa::kAvx512: s = dot_avx512<KT>(q, k, a.Dh); break;
        case Isa::kAvx2: s = dot_avx2<KT>(q, k, a.Dh); break;
        default: s = dot_scalar<KT>(q, k, a.Dh); break;
      }
      s *= a.scale;
      scores[static_cast<size_t>(j - lo)] = s;
      mx = std::max(mx, s);
    });
    const float sum = isa == Isa::kAvx512 ? exp_sum_avx512(scores.data(), n, mx) : exp_sum_scalar(scores.data(), n, mx);
    const float inv = 1.0f / sum;
    std::fill(out, out + a.Dh, 0.0f);
    for_each_row(a.v_cache, seq, lo, c, kv_head, [&](int64_t j, const Elem* v) {
      const float p = scores[static_cast<size_t>(j - lo)] * inv;
      switch (isa) {
        case Isa::kAvx512: axpy_avx512<KT>(out, p, v, a.Dh); break;
        case Isa::kAvx2: axpy_avx2<KT>(out, p, v, a.Dh); break;
        default: axpy_scalar<KT>(out, p, v, a.Dh); break;
      }
    });
  }
};

// Combines the states of one row's spans (run_span) into out [Hq, Dh]: per head,
// sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s, M the largest m_s. On AVX-512 only (spans are).
HEARTH_AVX512 void merge_spans(const float* states, int64_t n_spans, int64_t Hq, int64_t Dh, float* out) {
  const int64_t width = state_width(Dh);
  for (int64_t h = 0; h < Hq; ++h) {
    float M = -INFINITY;
    for (int64_t i = 0; i < n_spans; ++i) M = std::max(M, states[(i * Hq + h) * width + Dh]);
    float* o = out + h * Dh;
    float total = 0.0f;
    for (int64_t i = 0; i < n_spans; ++i) {
      const float* st = states + (i * Hq + h) * width;
      const float w = std::exp(st[Dh] - M);
      total += w * st[Dh + 1];
      const __m512 vw = _mm512_set1_ps(w);
      for (int64_t d = 0; d < Dh; d += 16) {
        const __mmask16 m = simd::tail_mask16(Dh - d);
        const __m512 sum = i == 0 ? _mm512_setzero_ps() : simd::load16_f32(o + d, m);
        _mm512_mask_storeu_ps(o + d, m, _mm512_fmadd_ps(vw, simd::load16_f32(st + d, m), sum));
      }
    }
    const __m512 inv = _mm512_set1_ps(1.0f / total);
    for (int64_t d = 0; d < Dh; d += 16) {
      const __mmask16 m = simd::tail_mask16(Dh - d);
      _mm512_mask_storeu_ps(o + d, m, _mm512_mul_ps(simd::load16_f32(o + d, m), inv));
    }
  }
}

// A decode row's span of positions for run_span; span i's state sits at states[i * Hq * state_width(Dh)].
struct Span {
  int64_t t, seq, j0, j1;
};

// Spans of no fewer positions than this (two blocks of 16): the merge costs little, and a second
// thread pays from short contexts on (2 threads, 384 positions: 18.5 GB/s of K and V against
// 14.1 as one span; cpu_attention_bench).
constexpr int64_t kMinSpanPositions = 32;

}  // namespace

void attention(Isa isa, ThreadPool* pool, const AttentionArgs& a) {
  const bool tiled = isa == Isa::kAvx512 && (a.Dh == 128 || a.Dh == 64);
  // Tiles of up to kTileRows consecutive rows of one sequence, and the longest context. On
  // AVX-512 a tile of one row (a decode row, or the last of a prompt) goes as spans of
  // positions instead (run_span), enough of them to give every thread work.
  struct Tile {
    int64_t t0, rows, seq;
  };
  std::vector<Tile> tiles;
  struct DecodeRow {
    int64_t t, seq, lo, c;
  };
  std::vector<DecodeRow> decode_rows;
  int64_t max_ctx = 1, max_rows = 1;
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    for (int64_t t = a.seq_starts[s]; t < a.seq_starts[s + 1]; t += kTileRows) {
      const int64_t rows = std::min(kTileRows, a.seq_starts[s + 1] - t);
      if (tiled && rows == 1) {
        const int64_t c = a.context_lens[s] + t - a.seq_starts[s];
        decode_rows.push_back({t, s, first_key(a, c), c});
        continue;
      }
      tiles.push_back({t, rows, s});
      max_rows = std::max(max_rows, tiles.back().rows);
    }
    max_ctx = std::max<int64_t>(max_ctx, a.context_lens[s] + a.seq_starts[s + 1] - a.seq_starts[s]);
  }
  std::vector<Span> spans;
  std::vector<int64_t> first_span;  // per decode row, then the total
  int64_t max_span = 0;
  const int64_t threads = pool != nullptr ? pool->size() : 1;
  for (const DecodeRow& r : decode_rows) {
    const int64_t n = r.c - r.lo + 1;
    const int64_t wanted =
        (threads + static_cast<int64_t>(decode_rows.size()) - 1) / static_cast<int64_t>(decode_rows.size());
    const int64_t count = std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, n / kMinSpanPositions));
    const int64_t len = (n + count - 1) / count;
    first_span.push_back(static_cast<int64_t>(spans.size()));
    for (int64_t j0 = r.lo; j0 <= r.c; j0 += len) {
      spans.push_back({r.t, r.seq, j0, std::min(r.c, j0 + len - 1)});
    }
    max_span = std::max(max_span, len);
  }
  first_span.push_back(static_cast<int64_t>(spans.size()));
  LineFloats states(spans.size() * static_cast<size_t>(a.Hq * state_width(a.Dh)));

  // Work items: (tile, pair of query heads that share a KV head; single heads without GQA),
  // then the spans.
  const int64_t pair = (a.Hq / a.Hkv) % 2 == 0 ? 2 : 1, per_tile = a.Hq / pair;
  const int64_t tile_items = static_cast<int64_t>(tiles.size()) * per_tile;
  auto run = [&](int64_t begin, int64_t end) {
    // Sized by the batch's largest tile or span: a decode step's buffers are those of one row.
    // Kept by each thread from call to call and only grown: allocating and zeroing them cost a
    // decode call ~2 us of its ~20-80 (bench/RESULTS.md, 2026-12-05, stop 33). Every element
    // read is written first in the call.
    thread_local Scratch scratch;
    auto at_least = [](LineFloats& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    };
    const int64_t tile_scores = tile_items > 0 ? max_rows * pair * max_ctx : 0;
    at_least(scratch.scores, std::max(tile_scores, padded_heads(a.Hq) * max_span));
    at_least(scratch.head_max, padded_heads(a.Hq));
    at_least(scratch.head_sum, padded_heads(a.Hq));
    if (tiled && max_rows > 1) {
      at_least(scratch.rows, 16 * a.Dh);
      at_least(scratch.out, max_rows * pair * a.Dh);
    }
    dispatch_float(a.kv_dtype, [&]<DType KT>() {
      const RowHead<KT> rh{a, isa, scratch};
      for (int64_t i = begin; i < end; ++i) {
        if (i >= tile_items) {
          const int64_t k = i - tile_items;
          const Span& sp = spans[static_cast<size_t>(k)];
          rh.span(sp.t, sp.seq, sp.j0, sp.j1, states.data() + k * a.Hq * state_width(a.Dh));
          continue;
        }
        const Tile& tile = tiles[static_cast<size_t>(i / per_tile)];
        const int64_t h0 = i % per_tile * pair;
        if (tiled) {
          rh.tile(tile.t0, tile.rows, tile.seq, h0, pair);
        } else {
          for (int64_t t = tile.t0; t < tile.t0 + tile.rows; ++t) rh.run(t, tile.seq, h0, pair);
        }
      }
    });
  };
  const int64_t items = tile_items + static_cast<int64_t>(spans.size());
  if (pool != nullptr) {
    pool->parallel_for(items, 1, run);
  } else {
    run(0, items);
  }
  for (size_t r = 0; r < decode_rows.size(); ++r) {
    merge_spans(states.data() + first_span[r] * a.Hq * state_width(a.Dh), first_span[r + 1] - first_span[r], a.Hq, a.Dh,
                a.out + decode_rows[r].t * a.Hq * a.Dh);
  }
}

}  // namespace hearth::cpu
