// Varlen paged attention with GQA, causal and sliding-window masks.
// q: [T, Hq, Dh] f32; K/V cache: [n_blocks, block_size, Hkv, Dh] f32|f16|bf16, each block's elements
// in the CPU's order (KvOrder, kernels.h: K [Hkv, Dh, block_size], V [Hkv, block_size, Dh]);
// out: [T, Hq, Dh] f32.
// Query row t of sequence s sits at cache index c = context_lens[s] + t - seq_starts[s];
// it attends to cache indices j in [lo, c], lo = max(0, c - window + 1) with a window.
// Exact two-pass softmax per (row, head): scores, max, exp, normalize, weighted sum of V.
// On AVX-512 with head dims 64 and 128, a decode row's positions split into spans (one per
// thread where the context allows), each walked block by block in memory order, head by head,
// and merged afterwards (run_span, merge_spans); prefill rows run in tiles of 16 rows of one
// sequence that share each block of 16 keys and values, widened to f32 once (run_tile), a lone
// row left over from the tiles as a decode row.
#include <algorithm>
#include <array>
#include <cmath>
#include <new>
#include <type_traits>
#include <vector>

#include "backends/cpu/dot.h"
#include "backends/cpu/kernels.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kTileRows = 16;  // prefill query rows that share each K/V row read

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

// The scaled scores of 8 keys side by side (dim d of key r at k[d * stride + r], KvOrder) against
// q over Dh dims: out[r] = scale * sum_d q[d] k[d * stride + r].
template <DType KT>
HEARTH_AVX2 void scores8_avx2(const float* q, const void* k, int64_t Dh, int64_t stride, float scale, float* out) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < Dh; ++d) acc = _mm256_fmadd_ps(_mm256_set1_ps(q[d]), simd::load8<KT>(k, d * stride), acc);
  _mm256_storeu_ps(out, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
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
  LineFloats scores;    // [rows, heads, context]; a decode span's [Hq, context rounded up to 16]
  LineFloats rows;      // [16 * Dh]: 16 keys or values widened to f32 (a tile), or one key (run_one)
  LineFloats out;       // [rows, heads, Dh]: a tile's output sums
  LineFloats head_max;  // [Hq, 16]: a decode span's running maximum score per head, lane by lane
};

// Floats per head in a decode span's state: Dh sums, m, l, padded to whole 64-byte lines so that
// every head's sums start on a line (Dh is 64 or 128 there). The V pass loads and stores them
// around every run of positions; at Dh + 2 most of those accesses split two lines (bench/RESULTS.md,
// stop 35).
constexpr int64_t state_width(int64_t Dh) { return Dh + 16; }

// The first key that cache index c attends to (0, or the start of its window).
int64_t first_key(const AttentionArgs& a, int64_t c) {
  return a.window > 0 ? std::max<int64_t>(0, c - a.window + 1) : 0;
}

// One query row's heads against the cache, whose elements are KT (f32, f16 or bf16) in the CPU's
// order (KvOrder, kernels.h); scores and sums are f32.
template <DType KT>
struct RowHead {
  using Elem = std::conditional_t<KT == DType::kF32, float, uint16_t>;
  const AttentionArgs& a;
  Isa isa;
  Scratch& scratch;
  LineFloats& scores = scratch.scores;

  KvOrder order() const { return {a.block_size, a.Hkv, a.Dh}; }
  int64_t slot_of(int64_t seq, int64_t j) const {
    return static_cast<int64_t>(a.block_tables[seq * a.max_blocks + j / a.block_size]) * a.block_size +
           j % a.block_size;
  }
  // Key j of kv_head: dim d at key(...)[d * block_size].
  const Elem* key(int64_t seq, int64_t j, int64_t kv_head) const {
    return static_cast<const Elem*>(a.k_cache) + order().k_at(slot_of(seq, j), kv_head, 0);
  }
  // Value j of kv_head: Dh elements in a row.
  const Elem* value(int64_t seq, int64_t j, int64_t kv_head) const {
    return static_cast<const Elem*>(a.v_cache) + order().v_at(slot_of(seq, j), kv_head, 0);
  }

  // Calls visit(j, key, value) for cache indices j = lo .. c in order (key and value as above).
  // Within a block the next position's key is one element on and its value Dh on, so the block
  // table is read, and the position divided, once per block.
  template <typename Visit>
  __attribute__((always_inline)) void for_each_position(int64_t seq, int64_t lo, int64_t c, int64_t kv_head,
                                                        const Visit& visit) const {
    for (int64_t j = lo; j <= c;) {
      const int64_t end = std::min(c + 1, (j / a.block_size + 1) * a.block_size);
      const Elem* k = key(seq, j, kv_head);
      const Elem* v = value(seq, j, kv_head);
      for (; j < end; ++j, ++k, v += a.Dh) visit(j, k, v);
    }
  }

  // Prefill tiles on AVX-512 with Dh = 16 * kD: `rows` consecutive query rows t0 .. of one
  // sequence (cache indices c0, c0 + 1, ...) and the kG query heads h0 .. of one KV head. Keys go
  // 16 at a time, widened to f32 once into scratch.rows for every row and head of the tile: K as
  // [Dh, 16] (a dim's 16 keys side by side, as the cache keeps them), so that four rows' scores
  // of 16 keys build up lane by lane with no horizontal sums; V as [16, Dh]. Each row keeps only
  // its own keys [lo_r, c_r] (causal, window), so its scores, softmax and sums are those of the
  // per-row kernel.
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
    auto widen_keys = [&](int64_t j0, int64_t count) HEARTH_AVX512 {
      if (j0 % a.block_size + count <= a.block_size) {  // one block's run: vector loads
        const Elem* k = key(seq, j0, kv_head);
        const __mmask16 m = simd::tail_mask16(count);
        for (int64_t d = 0; d < Dh; ++d) _mm512_storeu_ps(block + d * 16, simd::load16<KT>(k, d * a.block_size, m));
        return;
      }
      std::fill(block, block + Dh * 16, 0.0f);
      int64_t jj = 0;
      for_each_position(seq, j0, j0 + count - 1, kv_head, [&](int64_t, const Elem* k, const Elem*) {
        for (int64_t d = 0; d < Dh; ++d) block[d * 16 + jj] = load_scalar(k, KT, d * a.block_size);
        ++jj;
      });
    };
    auto widen_values = [&](int64_t j0, int64_t count) HEARTH_AVX512 {
      int64_t jj = 0;
      for_each_position(seq, j0, j0 + count - 1, kv_head, [&](int64_t, const Elem*, const Elem* v) HEARTH_AVX512 {
        for (int i = 0; i < kD; ++i) _mm512_storeu_ps(block + jj * Dh + 16 * i, simd::load16<KT>(v, 16 * i, 0xffff));
        ++jj;
      });
      for (; jj < 16; ++jj) std::fill(block + jj * Dh, block + (jj + 1) * Dh, 0.0f);
    };
    // Row r's keys in the block of 16 from j0 (count of them): lanes from .. to, or from > to.
    auto lanes_of = [&](int64_t r, int64_t j0, int64_t count) {
      return std::pair{std::max<int64_t>(0, lo_of(r) - j0), std::min<int64_t>(count - 1, c0 + r - j0)};
    };
    const __m512 scale = _mm512_set1_ps(a.scale);
    for (int64_t j0 = first; j0 <= last; j0 += 16) {
      const int64_t count = std::min<int64_t>(16, last + 1 - j0);
      widen_keys(j0, count);
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        // Rows r0 .. r0 + 3 (past the tile's last row: that row again, its sums unused).
        const float* q[4];
        for (int i = 0; i < 4; ++i) q[i] = a.q + ((t0 + std::min<int64_t>(r0 + i, rows - 1)) * a.Hq + h0) * Dh;
        __m512 acc[4][kG];
        for (auto& row : acc)
          for (__m512& x : row) x = _mm512_setzero_ps();
        for (int64_t d = 0; d < Dh; ++d) {
          const __m512 keys = _mm512_loadu_ps(block + d * 16);
          for (int i = 0; i < 4; ++i)
            for (int g = 0; g < kG; ++g) acc[i][g] = _mm512_fmadd_ps(_mm512_set1_ps(q[i][g * Dh + d]), keys, acc[i][g]);
        }
        for (int64_t r = r0; r < std::min<int64_t>(rows, r0 + 4); ++r) {
          const auto [from, to] = lanes_of(r, j0, count);
          if (from > to) continue;
          const __mmask16 keep = static_cast<__mmask16>(((1u << (to + 1)) - 1) & ~((1u << from) - 1));
          for (int g = 0; g < kG; ++g) {
            const __m512 sc = _mm512_mul_ps(acc[r - r0][g], scale);
            // Lanes from .. to, moved down to lane 0, land at key j0 + from of the row's scores.
            float* dst = scores.data() + (r * kG + g) * n + (j0 + from - lo_of(r));
            _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << (to - from + 1)) - 1),
                                  _mm512_maskz_compress_ps(keep, sc));
            float& m = row_max[static_cast<size_t>(r * kG + g)];
            m = std::max(m, _mm512_mask_reduce_max_ps(keep, sc));
          }
        }
      }
    }
    // Softmax per (row, head) over its own keys.
    for (int64_t r = 0; r < rows; ++r) {
      for (int g = 0; g < kG; ++g) {
        const size_t rg = static_cast<size_t>(r * kG + g);
        inv[rg] = 1.0f / exp_sum_avx512(scores.data() + rg * n, c0 + r - lo_of(r) + 1, row_max[rg]);
      }
    }
    float* out = scratch.out.data();
    std::fill(out, out + rows * kG * Dh, 0.0f);
    for (int64_t j0 = first; j0 <= last; j0 += 16) {
      const int64_t count = std::min<int64_t>(16, last + 1 - j0);
      widen_values(j0, count);
      for (int64_t r = 0; r < rows; ++r) {
        const auto [from, to] = lanes_of(r, j0, count);
        if (from > to) continue;
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
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int g = 0; g < kG; ++g) {
        std::copy_n(out + (r * kG + g) * Dh, Dh, a.out + ((t0 + r) * a.Hq + h0 + g) * Dh);
      }
    }
  }

  // A decode span's positions j .. j + rows - 1 (rows <= 16) in one block: keys of KV head 0 at
  // k (head h at k + h * Dh * block_size, dim d of position j + r at [d * block_size + r]) and
  // values at v (head h at v + h * block_size * Dh, position j + r at [r * Dh]).
  struct Run {
    int64_t j, rows;
    const Elem* k;
    const Elem* v;
  };

  // Scores of query heads h .. h + kH (one KV head's, kvh) at the positions of four runs: for each
  // dim, its 16 positions' keys (one vector load per run) times the heads' q at that dim, so each
  // head's scores of a run build up in one vector, no horizontal sums. Stores them scaled at
  // sc[head * ns + position - j0] and raises the heads' running maxima hmax[head * 16 ..] lane by
  // lane. A run of no rows loads and stores nothing.
  template <int kD, int kH, bool kFull>
  HEARTH_AVX512 __attribute__((always_inline)) void key_scores_(int64_t t, int64_t kvh, int64_t h, const Run (&runs)[4],
                                                                int64_t j0, int64_t ns, float* sc, float* hmax) const {
    constexpr int kSplit = kH <= 2 ? 2 : 1;  // even and odd dims in sums of their own: 8 or more FMA chains
    constexpr int64_t Dh = 16 * kD;
    const int64_t bs = a.block_size;
    const float* q = a.q + (t * a.Hq + h) * Dh;  // head h + i at q + i * Dh
    const Elem* k[4];
    __mmask16 m[4];
    for (int c = 0; c < 4; ++c) {
      k[c] = runs[c].k + kvh * Dh * bs;
      m[c] = simd::tail_mask16(runs[c].rows);
      _mm_prefetch(reinterpret_cast<const char*>(k[c] + Dh * bs), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k[c] + Dh * bs) + 64, _MM_HINT_T0);
    }
    __m512 acc[kSplit][4][kH];
    for (auto& split : acc)
      for (auto& run : split)
        for (__m512& x : run) x = _mm512_setzero_ps();
    for (int64_t d = 0; d < Dh; d += kSplit) {
      for (int s = 0; s < kSplit; ++s) {
        __m512 qd[kH];
        for (int i = 0; i < kH; ++i) qd[i] = _mm512_set1_ps(q[i * Dh + d + s]);
        for (int c = 0; c < 4; ++c) {
          // The same line of the run's next head (or of the next block), one head's keys ahead,
          // besides that head's first two lines above: each head's keys in a block fill a 4 KiB
          // page for f16 at Dh 128, where the hardware stream restarts (page_prefetch.h); with
          // the first lines alone the passes read ~10% slower (cpu_attention_bench, stop 42).
          if (s == 0) _mm_prefetch(reinterpret_cast<const char*>(k[c] + (Dh + d) * bs), _MM_HINT_T0);
          const __m512 keys = simd::load16<KT>(k[c], (d + s) * bs, kFull ? static_cast<__mmask16>(0xffff) : m[c]);
          for (int i = 0; i < kH; ++i) acc[s][c][i] = _mm512_fmadd_ps(qd[i], keys, acc[s][c][i]);
        }
      }
    }
    const __m512 scale = _mm512_set1_ps(a.scale);
    for (int c = 0; c < 4; ++c) {
      if (runs[c].rows == 0) continue;
      for (int i = 0; i < kH; ++i) {
        __m512 s = acc[0][c][i];
        if constexpr (kSplit == 2) s = _mm512_add_ps(s, acc[1][c][i]);
        s = _mm512_mul_ps(s, scale);
        _mm512_mask_storeu_ps(sc + (h + i) * ns + runs[c].j - j0, m[c], s);
        float* hm = hmax + (h + i) * 16;
        const __m512 old = _mm512_loadu_ps(hm);
        _mm512_storeu_ps(hm, _mm512_mask_max_ps(old, m[c], old, s));
      }
    }
  }

  template <int kD, int kH>
  HEARTH_AVX512 __attribute__((always_inline)) void key_scores(int64_t t, int64_t kvh, int64_t h, const Run (&runs)[4],
                                                               int64_t j0, int64_t ns, float* sc, float* hmax) const {
    if (runs[0].rows == 16 && runs[1].rows == 16 && runs[2].rows == 16 && runs[3].rows == 16)
      return key_scores_<kD, kH, true>(t, kvh, h, runs, j0, ns, sc, hmax);
    return key_scores_<kD, kH, false>(t, kvh, h, runs, j0, ns, sc, hmax);
  }

  // The V sums of query heads h .. h + kV (KV head kvh's) over one run: state[head] += e_j v_j,
  // e_j = p[head * ns + j - j0]. The heads' sums stay in registers over the run's positions.
  template <int kD, int kV>
  HEARTH_AVX512 __attribute__((always_inline)) void value_sums(const Run& run, int64_t kvh, int64_t h, int64_t j0,
                                                               int64_t ns, const float* p, float* state) const {
    constexpr int64_t Dh = 16 * kD;
    const Elem* v = run.v + kvh * a.block_size * Dh;
    _mm_prefetch(reinterpret_cast<const char*>(v + a.block_size * Dh), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + a.block_size * Dh) + 64, _MM_HINT_T0);
    float* st = state + h * state_width(Dh);  // head h + i's sums at st + i * state_width
    __m512 o[kV][kD];
    for (int i = 0; i < kV; ++i)
      for (int d = 0; d < kD; ++d) o[i][d] = _mm512_load_ps(st + i * state_width(Dh) + 16 * d);
    const float* e = p + h * ns + run.j - j0;  // head h + i's position run.j + r at e[i * ns + r]
    for (int64_t r = 0; r < run.rows; ++r, v += Dh) {
      // The row's lines in the next head's values, as the K pass does.
      for (int d = 0; d < kD; d += 2)
        _mm_prefetch(reinterpret_cast<const char*>(v + a.block_size * Dh + 16 * d), _MM_HINT_T0);
      __m512 er[kV];
      for (int i = 0; i < kV; ++i) er[i] = _mm512_set1_ps(e[i * ns + r]);
      for (int d = 0; d < kD; ++d) {
        const __m512 x = simd::load16<KT>(v, 16 * d, 0xffff);
        for (int i = 0; i < kV; ++i) o[i][d] = _mm512_fmadd_ps(er[i], x, o[i][d]);
      }
    }
    for (int i = 0; i < kV; ++i)
      for (int d = 0; d < kD; ++d) _mm512_store_ps(st + i * state_width(Dh) + 16 * d, o[i][d]);
  }

  // Decode on AVX-512 with Dh = 16 * kD: positions [j0, j1] of row t for every head. Both passes
  // go block by block in memory order: in each block a KV head's keys are one run of
  // Dh * block_size elements, then the next head's, and the same for values (KvOrder). The K pass
  // takes four runs at a time (up to 64 positions; each query head's value of a dim serves all
  // four) and leaves the scores head-major; the V pass takes one run at a time, each head's sums
  // in registers over its positions. Writes the span's unnormalized state to `state`
  // [Hq, state_width(Dh)]: per head sum_j e^(s_j - m) v_j, then m, then sum_j e^(s_j - m);
  // merge_spans combines spans. Against the position-major cache with horizontal sums before it:
  // bench/RESULTS.md, stop 42.
  template <int kD>
  HEARTH_AVX512 __attribute__((flatten)) void run_span(int64_t t, int64_t seq, int64_t j0, int64_t j1,
                                                       float* state) const {
    const int64_t n = j1 - j0 + 1, ns = (n + 15) / 16 * 16, Dh = 16 * kD, G = a.Hq / a.Hkv;
    auto run_at = [&](int64_t j) {
      const int64_t end = std::min({j1 + 1, (j / a.block_size + 1) * a.block_size, j + 16});
      return Run{j, end - j, key(seq, j, 0), value(seq, j, 0)};
    };
    float* sc = scores.data();
    float* hmax = scratch.head_max.data();
    std::fill_n(hmax, a.Hq * 16, -INFINITY);
    for (int64_t j = j0; j <= j1;) {
      Run runs[4];
      int count = 0;
      while (count < 4 && j <= j1) {
        runs[count] = run_at(j);
        j += runs[count++].rows;
      }
      for (int c = count; c < 4; ++c) runs[c] = Run{runs[0].j, 0, runs[0].k, runs[0].v};
      for (int64_t kvh = 0; kvh < a.Hkv; ++kvh) {
        int64_t g = 0;
        for (; g + 4 <= G; g += 4) key_scores<kD, 4>(t, kvh, kvh * G + g, runs, j0, ns, sc, hmax);
        for (; g + 2 <= G; g += 2) key_scores<kD, 2>(t, kvh, kvh * G + g, runs, j0, ns, sc, hmax);
        for (; g < G; ++g) key_scores<kD, 1>(t, kvh, kvh * G + g, runs, j0, ns, sc, hmax);
      }
    }
    // e^(s - m) in place and their sums, a head at a time.
    for (int64_t h = 0; h < a.Hq; ++h) {
      const float m = _mm512_reduce_max_ps(_mm512_loadu_ps(hmax + h * 16));
      const float sum = exp_sum_avx512(sc + h * ns, n, m);
      float* st = state + h * state_width(Dh);
      std::fill_n(st, Dh, 0.0f);
      st[Dh] = m;
      st[Dh + 1] = sum;
    }
    for (int64_t j = j0; j <= j1;) {
      const Run run = run_at(j);
      for (int64_t kvh = 0; kvh < a.Hkv; ++kvh) {
        int64_t g = 0;
        if constexpr (kD <= 4) {
          for (; g + 4 <= G; g += 4) value_sums<kD, 4>(run, kvh, kvh * G + g, j0, ns, sc, state);
        }
        for (; g + 2 <= G; g += 2) value_sums<kD, 2>(run, kvh, kvh * G + g, j0, ns, sc, state);
        for (; g < G; ++g) value_sums<kD, 1>(run, kvh, kvh * G + g, j0, ns, sc, state);
      }
      j += run.rows;
    }
  }

  // Positions [j0, j1] of decode row t, every head (AVX-512, Dh 64 or 128): see run_span.
  void span(int64_t t, int64_t seq, int64_t j0, int64_t j1, float* state) const {
    if (a.Dh == 128) return run_span<8>(t, seq, j0, j1, state);
    return run_span<4>(t, seq, j0, j1, state);
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
    // A block's keys lie side by side per dim (KvOrder): with AVX2, 8 keys' scores at a time;
    // the rest (and the scalar reference) key by key, its dims gathered from their stride.
    float* k_row = scratch.rows.data();
    for (int64_t j = lo; j <= c;) {
      const int64_t end = std::min(c + 1, (j / a.block_size + 1) * a.block_size);
      const Elem* k = key(seq, j, kv_head);
      if (isa != Isa::kScalar) {
        for (; j + 8 <= end; j += 8, k += 8) scores8_avx2<KT>(q, k, a.Dh, a.block_size, a.scale, &scores[j - lo]);
      }
      for (; j < end; ++j, ++k) {
        for (int64_t d = 0; d < a.Dh; ++d) k_row[d] = load_scalar(k, KT, d * a.block_size);
        float s;
        switch (isa) {
          case Isa::kAvx512: s = dot_avx512<DType::kF32>(q, k_row, a.Dh); break;
          case Isa::kAvx2: s = dot_avx2<DType::kF32>(q, k_row, a.Dh); break;
          default: s = dot_scalar<DType::kF32>(q, k_row, a.Dh); break;
        }
        scores[static_cast<size_t>(j - lo)] = s * a.scale;
      }
    }
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, scores[static_cast<size_t>(i)]);
    const float sum = isa == Isa::kAvx512 ? exp_sum_avx512(scores.data(), n, mx) : exp_sum_scalar(scores.data(), n, mx);
    const float inv = 1.0f / sum;
    std::fill(out, out + a.Dh, 0.0f);
    for_each_position(seq, lo, c, kv_head, [&](int64_t j, const Elem*, const Elem* v) {
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
    // Each span but the last ends on a block boundary, so that no block is read in two partial
    // runs; the last span, which also holds the newest (partial) block, gets the fewer positions.
    for (int64_t i = 1, j0 = r.lo; j0 <= r.c; ++i) {
      const int64_t end = std::min(r.c + 1, (r.lo + i * len + a.block_size - 1) / a.block_size * a.block_size);
      spans.push_back({r.t, r.seq, j0, end - 1});
      max_span = std::max(max_span, end - j0);
      j0 = end;
    }
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
    at_least(scratch.scores, std::max(tile_scores, a.Hq * ((max_span + 15) / 16 * 16)));
    at_least(scratch.head_max, a.Hq * 16);
    at_least(scratch.rows, 16 * a.Dh);
    if (tiled && max_rows > 1) at_least(scratch.out, max_rows * pair * a.Dh);
    dispatch_float(a.kv_dtype, [&]<DType KT>() {
      const RowHead<KT> rh{a, isa, scratch};
      for (int64_t i = begin; i < end; ++i) {
        if (i >= tile_items) {
          // Last span first: the calling thread runs the first item (its share's front), and it has
          // just written the newest position's keys and values (64 lines a head in the transposed
          // K), which the last span reads. Another core would fetch them line by line from this
          // one's cache.
          const int64_t k = static_cast<int64_t>(spans.size()) - 1 - (i - tile_items);
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
