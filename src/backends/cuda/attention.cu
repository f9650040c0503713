// Varlen paged attention with GQA, causal and sliding-window masks (semantics as the CPU
// reference, backends/cpu/attention.cpp). q: [T, Hq, Dh] f32; K/V cache: [n_blocks,
// block_size, Hkv, Dh] f32|f16|bf16; out: [T, Hq, Dh] f32.
//
// A block of warps takes one (query row, head) and a range of the row's positions. Warp w takes
// positions begin + 2w, begin + 2w + 1, begin + 2w + 2 kWarps, ... two at a time (both
// positions' K and V loads in flight before either score is reduced: a decode row is
// latency-bound, not bandwidth-bound) and keeps an online softmax over them (running max m, sum l, and the weighted
// V sum in registers, lane i holding dims i, i + 32, ...); the warps' states are merged at the
// end. K and V rows are read whole by a warp, so each load is coalesced.
//
// Prefill rows (T > kMatvecRows) take tensor cores where the cache is 16-bit and the head dim
// 64 or 128 (attention_mma.cu); else tiles of 16 rows on CUDA cores (below) for head dims up to
// 128, else all their positions in one block of 16 warps. Decode rows split them
// (flash-decoding): kSplits (64) blocks per (row, head) or, for 16-bit caches and head dims 64
// and 128, per (row, KV head), each over its part of the row's positions, sized on the device
// from the row's context (so a recorded graph serves any context), write their unnormalized
// state to scratch; a second kernel merges them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/attention.cuh"
#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/prepared_x.cuh"
#include "backends/cuda/reduce.cuh"
#include "base/error.h"

namespace hearth::cuda {
namespace {

constexpr int kPrefillWarps = 16;
constexpr int kSplitWarps = 4;
constexpr int kSplits = 64;
constexpr int kMaxDimsPerLane = 8;  // Dh <= 256

// One block's online softmax over positions [begin, end) of row t, head h: the block's max M and
// sum L, and in acc_out[d] (shared) the V sum weighted by e^(s - M). M is -inf for an empty range.
template <typename T, int kWarps>
__device__ void attend(const AttentionArgs& a, int64_t t, int64_t h, const RowPlace& p, int64_t begin, int64_t end,
                       float* acc_out, float* m_out, float* l_out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t kv_head = h / (a.Hq / a.Hkv);
  const float* q = a.q + (t * a.Hq + h) * a.Dh;
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);

  float qr[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  const int dims = static_cast<int>((a.Dh - lane + 31) / 32);  // this lane's dims: lane + 32 i
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    qr[i] = i < dims ? q[lane + 32 * i] * a.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = begin + 2 * warp; j < end; j += 2 * kWarps) {
    const bool two = j + 1 < end;
    const int64_t r0 = cache_row(a, p.seq, j, kv_head, a.Dh), r1 = two ? cache_row(a, p.seq, j + 1, kv_head, a.Dh) : r0;
    // K and V of both positions loaded before any reduction: one round trip to memory, not two.
    T kr0[kMaxDimsPerLane], kr1[kMaxDimsPerLane], vr0[kMaxDimsPerLane], vr1[kMaxDimsPerLane];
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      if (i < dims) {
        kr0[i] = k_cache[r0 + lane + 32 * i];
        kr1[i] = k_cache[r1 + lane + 32 * i];
        vr0[i] = v_cache[r0 + lane + 32 * i];
        vr1[i] = v_cache[r1 + lane + 32 * i];
      }
    }
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      if (i < dims) {
        s0 += qr[i] * widen(kr0[i]);
        s1 += qr[i] * widen(kr1[i]);
      }
    }
    s0 = warp_sum(s0);
    s1 = two ? warp_sum(s1) : -INFINITY;
    const float m_new = fmaxf(m, fmaxf(s0, s1));
    const float keep = expf(m - m_new), p0 = expf(s0 - m_new), p1 = two ? expf(s1 - m_new) : 0.0f;
    l = l * keep + p0 + p1;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      if (i < dims) acc[i] = acc[i] * keep + p0 * widen(vr0[i]) + p1 * widen(vr1[i]);
    }
    m = m_new;
  }
  // Merge the warps: acc = sum_w acc_w e^(m_w - M), L = sum_w l_w e^(m_w - M).
  __shared__ float ms[kWarps], ls[kWarps];
  __shared__ float accs[kWarps][32 * kMaxDimsPerLane];
  if (lane == 0) {
    ms[warp] = m;
    ls[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    if (i < dims) accs[warp][lane + 32 * i] = acc[i];
  }
  __syncthreads();
  float big = -INFINITY;
  for (int w = 0; w < kWarps; ++w) big = fmaxf(big, ms[w]);
  float total = 0.0f, weight[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = ms[w] == -INFINITY ? 0.0f : expf(ms[w] - big);  // a warp that saw no position
    total += ls[w] * weight[w];
  }
  for (int64_t d = threadIdx.x; d < a.Dh; d += kWarps * 32) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += accs[w][d] * weight[w];
    acc_out[d] = o;
  }
  *m_out = big;
  *l_out = total;
}

template <typename T>
__global__ void attention_kernel(AttentionArgs a) {
  wait_for_previous(__func__);
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const RowPlace p = place_of(a, t);
  __shared__ float acc[32 * kMaxDimsPerLane];
  float m, l;
  attend<T, kPrefillWarps>(a, t, h, p, p.lo, p.c + 1, acc, &m, &l);
  __syncthreads();
  float* out = a.out + (t * a.Hq + h) * a.Dh;
  for (int64_t d = threadIdx.x; d < a.Dh; d += kPrefillWarps * 32) out[d] = acc[d] / l;
}

// Prefill rows in tiles (flash attention on CUDA cores): a block of kTileWarps warps takes
// kTileRows consecutive query rows and one head, and walks their keys in chunks of 32 staged in
// shared memory (widened to f32), so each K/V row is read from memory once per tile instead of
// once per query row. Lane j of a warp scores key j of the chunk against the warp's rows (K's
// shared rows padded by one float, so the lanes' reads fall in different banks); each row keeps
// an online softmax (m, l replicated over the lanes) and its weighted V sum with lane i holding
// dims i, i + 32, ... The rows of a tile may belong to several sequences (a flat batch): the
// tile is taken one sequence's run of rows at a time.
constexpr int kTileWarps = 4, kRowsPerWarp = 4, kTileRows = kTileWarps * kRowsPerWarp, kChunk = 32;
constexpr int kTileMaxDh = 128;

template <typename T>
__global__ void attention_tile_kernel(AttentionArgs a) {
  wait_for_previous(__func__);
  const int64_t h = blockIdx.y, t0 = blockIdx.x * static_cast<int64_t>(kTileRows);
  const int64_t t_end = min(a.T, t0 + kTileRows);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t kv_head = h / (a.Hq / a.Hkv), Dh = a.Dh;
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  __shared__ float qs[kTileRows][kTileMaxDh];
  __shared__ float ks[kChunk][kTileMaxDh + 1];
  __shared__ float vs[kChunk][kTileMaxDh];
  __shared__ float ps[kTileWarps][kRowsPerWarp][kChunk];
  for (int64_t e = threadIdx.x; e < (t_end - t0) * Dh; e += blockDim.x) {
    const int64_t r = e / Dh, d = e % Dh;
    qs[r][d] = a.q[((t0 + r) * a.Hq + h) * Dh + d] * a.scale;
  }
  const int dims = static_cast<int>((Dh - lane + 31) / 32);  // this lane's dims: lane + 32 i
  for (int64_t seg = t0; seg < t_end;) {
    const RowPlace first = place_of(a, seg);
    const int64_t seg_end = min(t_end, static_cast<int64_t>(a.seq_starts[first.seq + 1]));
    // The warp's rows r = warp * kRowsPerWarp + i of the tile, those in this run; row r's cache
    // index is first.c + (t0 + r - seg).
    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kMaxDimsPerLane / 2];
    int64_t c[kRowsPerWarp], lo[kRowsPerWarp];
    bool live[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t t = t0 + warp * kRowsPerWarp + i;
      live[i] = t >= seg && t < seg_end;
      c[i] = first.c + (t - seg);
      lo[i] = a.window > 0 ? max(int64_t{0}, c[i] - a.window + 1) : 0;
      m[i] = -INFINITY;
      l[i] = 0.0f;
#pragma unroll
      for (int d = 0; d < kMaxDimsPerLane / 2; ++d) acc[i][d] = 0.0f;
    }
    const int64_t last_c = first.c + (seg_end - 1 - seg);  // the run's last row sees the most
    constexpr int kKeysPerWarp = kChunk / kTileWarps;
    for (int64_t j0 = first.lo; j0 <= last_c; j0 += kChunk) {
      // Warp w stages keys j0 + 8w ... j0 + 8w + 7, lane i their dims i, i + 32, ...: the block
      // table reads first, then every K and V load of the warp in flight together.
      int64_t rows[kKeysPerWarp];
#pragma unroll
      for (int u = 0; u < kKeysPerWarp; ++u) {
        const int64_t j = j0 + warp * kKeysPerWarp + u;
        rows[u] = j <= last_c ? cache_row(a, first.seq, j, kv_head, Dh) : -1;
      }
      float kr[kKeysPerWarp][kTileMaxDh / 32], vr[kKeysPerWarp][kTileMaxDh / 32];
#pragma unroll
      for (int u = 0; u < kKeysPerWarp; ++u) {
#pragma unroll
        for (int d = 0; d < kTileMaxDh / 32; ++d) {
          const bool there = rows[u] >= 0 && d < dims;
          kr[u][d] = there ? widen(k_cache[rows[u] + lane + 32 * d]) : 0.0f;
          vr[u][d] = there ? widen(v_cache[rows[u] + lane + 32 * d]) : 0.0f;
        }
      }
      __syncthreads();  // the previous chunk's K/V are no longer read
#pragma unroll
      for (int u = 0; u < kKeysPerWarp; ++u) {
#pragma unroll
        for (int d = 0; d < kTileMaxDh / 32; ++d) {
          if (d < dims) {
            ks[warp * kKeysPerWarp + u][lane + 32 * d] = kr[u][d];
            vs[warp * kKeysPerWarp + u][lane + 32 * d] = vr[u][d];
          }
        }
      }
      __syncthreads();
      // Lane j scores key j0 + j against the warp's rows, the rows' sums interleaved.
      const int64_t j = j0 + lane;
      float dot[kRowsPerWarp] = {};
      for (int64_t d = 0; d < Dh; ++d) {
        const float kd = ks[lane][d];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) dot[i] += qs[warp * kRowsPerWarp + i][d] * kd;
      }
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const bool valid = live[i] && j >= lo[i] && j <= c[i];
        const float s = valid ? dot[i] : -INFINITY;
        const float m_new = fmaxf(m[i], warp_max(s));
        const float keep = m_new == -INFINITY ? 1.0f : expf(m[i] - m_new);
        const float p = valid ? expf(s - m_new) : 0.0f;
        l[i] = l[i] * keep + warp_sum(p);
#pragma unroll
        for (int d = 0; d < kMaxDimsPerLane / 2; ++d) acc[i][d] *= keep;
        m[i] = m_new;
        ps[warp][i][lane] = p;
      }
      __syncwarp();
      for (int key = 0; key < kChunk; ++key) {
#pragma unroll
        for (int d = 0; d < kMaxDimsPerLane / 2; ++d) {
          if (d < dims) {
            const float v = vs[key][lane + 32 * d];
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) acc[i][d] += ps[warp][i][key] * v;
          }
        }
      }
      __syncwarp();  // ps is rewritten by the next chunk
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (!live[i]) continue;
      float* out = a.out + ((t0 + warp * kRowsPerWarp + i) * a.Hq + h) * Dh;
#pragma unroll
      for (int d = 0; d < kMaxDimsPerLane / 2; ++d) {
        if (d < dims) out[lane + 32 * d] = acc[i][d] / l[i];
      }
    }
    seg = seg_end;
  }
}

// Split z of row t, head h: positions [lo + z * chunk, lo + (z + 1) * chunk) of the row's n =
// c - lo + 1, chunk = ceil(n / kSplits) rounded up to whole rounds of the block's warps.
// partial: [T, Hq, kSplits, Dh] unnormalized sums; stats: [T, Hq, kSplits] (M, L).
template <typename T>
__global__ void attention_split_kernel(AttentionArgs a, float* partial, float2* stats) {
  wait_for_previous(__func__);
  const int64_t t = blockIdx.x, h = blockIdx.y, z = blockIdx.z;
  const RowPlace p = place_of(a, t);
  const int64_t n = p.c - p.lo + 1, round = 2 * kSplitWarps;
  const int64_t chunk = ((n + kSplits - 1) / kSplits + round - 1) / round * round;
  const int64_t begin = p.lo + z * chunk, end = min(p.c + 1, begin + chunk);
  const int64_t at = (t * a.Hq + h) * kSplits + z;
  if (begin >= end) {
    if (threadIdx.x == 0) stats[at] = make_float2(-INFINITY, 0.0f);
    return;
  }
  float m, l;
  attend<T, kSplitWarps>(a, t, h, p, begin, end, partial + at * a.Dh, &m, &l);
  if (threadIdx.x == 0) stats[at] = make_float2(m, l);
}

// The same split for 16-bit caches with head dims 64 and 128, one block per (row, KV head, split)
// for all the query heads that share the KV head (up to 8 at a time), so each K and V row is
// read once for the group instead of once per query head. Lane j of a warp takes key j of the
// warp's round of 32: its K row comes whole into registers (all its loads in flight together)
// and is scored against the group's q rows in shared memory, while its V row is copied to
// shared memory asynchronously; then lane i sums dims [i * Dh / 32, (i + 1) * Dh / 32) of the
// round's V rows weighted by the probabilities. The block's 4 warps take rounds 128 keys apart
// and merge their states at the end. A split is a multiple of 128 keys: at a short context the
// row's keys go to fewer splits (the merge kernel reads only those that saw keys).
constexpr int kDecodeWarps = 4, kDecodeKeys = 32 * kDecodeWarps, kMaxGroup = 8;

// Split z of row p's positions: [begin, end), empty past the row's end.
struct SplitRange {
  int64_t begin, end;
};
__device__ inline SplitRange split_range(const RowPlace& p, int64_t z) {
  const int64_t n = p.c - p.lo + 1;
  const int64_t chunk = ((n + kSplits - 1) / kSplits + kDecodeKeys - 1) / kDecodeKeys * kDecodeKeys;
  const int64_t begin = p.lo + z * chunk;
  return {begin, min(p.c + 1, begin + chunk)};
}

// Asks L2 for the K and V rows of the block's first round (key begin + i for thread i, up to
// end) before the wait, so that the cache rows of earlier steps stream in while the previous
// kernel finishes (a row this step writes is only fetched early; it is read after the wait).
// On the H200 this took Llama-3-8B's 4-bit decode from 393 to 398 tok/s (bench/RESULTS.md).
template <typename T, int kDh>
__device__ inline void prefetch_first_round(const AttentionArgs& a, const RowPlace& p, int64_t kv_head,
                                            const SplitRange& r) {
  const int64_t j = r.begin + threadIdx.x;
  if (j >= r.end) return;
  const int64_t row = cache_row(a, p.seq, j, kv_head, kDh);
  const auto k = reinterpret_cast<uintptr_t>(static_cast<const T*>(a.k_cache) + row);
  const auto v = reinterpret_cast<uintptr_t>(static_cast<const T*>(a.v_cache) + row);
#pragma unroll
  for (int at = 0; at < kDh * static_cast<int>(sizeof(T)); at += 128) {
    prefetch_line(k + at);
    prefetch_line(v + at);
  }
}

template <typename T, int kDh, int kGroup>
__global__ void attention_decode_kernel(AttentionArgs a, float* partial, float2* stats) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte piece
  constexpr int kPieces = kDh / kPer;                     // of a K or V row
  constexpr int kLaneDims = kDh / 32;
  const int64_t t = blockIdx.x, z = blockIdx.z, G = a.Hq / a.Hkv, chunks = (G + kGroup - 1) / kGroup;
  const int64_t kv_head = blockIdx.y / chunks, h0 = kv_head * G + (blockIdx.y % chunks) * kGroup;
  const int gn = static_cast<int>(min(static_cast<int64_t>(kGroup), kv_head * G + G - h0));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  // The lane's key of the warp's first round: its K row into kr before the wait, where the key
  // precedes the step (its row was written by an earlier step, not by a kernel still running).
  // Before the wait the batch's metadata may be stale (launch.cuh): the row is kept only where
  // the metadata read after the wait gives the same row for a key before the step.
  uint4 kr[kPieces];
  int64_t early_row = -1;
  {
    const RowPlace early = place_of(a, t);
    const SplitRange r = split_range(early, z);
    prefetch_first_round<T, kDh>(a, early, kv_head, r);
    const int64_t j = r.begin + 32 * warp + lane;
    if (j < r.end && j < a.context_lens[early.seq]) {
      early_row = cache_row(a, early.seq, j, kv_head, kDh);
#pragma unroll
      for (int i = 0; i < kPieces; ++i) kr[i] = *reinterpret_cast<const uint4*>(k_cache + early_row + i * kPer);
    }
  }
  wait_for_previous(__func__);
  const RowPlace p = place_of(a, t);
  const int64_t settled = a.context_lens[p.seq];  // keys before it precede the step
  const SplitRange range = split_range(p, z);
  const int64_t begin = range.begin, end = range.end;
  if (begin >= end) {
    if (threadIdx.x < gn) stats[(t * a.Hq + h0 + threadIdx.x) * kSplits + z] = make_float2(-INFINITY, 0.0f);
    return;
  }
  __shared__ __align__(16) float qs[kGroup][kDh];
  __shared__ float ps[kDecodeWarps][kGroup][32];
  // The warps' V rows, later their states for the merge.
  constexpr int kVBytes = kDecodeWarps * 32 * kDh * static_cast<int>(sizeof(T));
  constexpr int kMergeBytes = kDecodeWarps * kGroup * kDh * 4;
  __shared__ __align__(16) unsigned char shared[kVBytes > kMergeBytes ? kVBytes : kMergeBytes];
  __shared__ float ms[kDecodeWarps][kGroup], ls[kDecodeWarps][kGroup];
  T(*vs)[32][kDh] = reinterpret_cast<T(*)[32][kDh]>(shared);
  // Starts the warp's round of keys [j0, j0 + 32): the K rows into kr (in the first round, those
  // not loaded before the wait), the V rows on their way to shared memory. Returns how many of
  // them the split has (a prefix of the lanes).
  auto start_round = [&](int64_t j0, bool first) {
    const int valid = static_cast<int>(max(static_cast<int64_t>(0), min(static_cast<int64_t>(32), end - j0)));
    const bool mine = lane < valid;
    const int64_t j = j0 + lane;
    int64_t row = -2;
    if (mine) {
      row = cache_row(a, p.seq, j, kv_head, kDh);
#pragma unroll
      for (int i = 0; i < kPieces; ++i) copy16_async(&vs[warp][lane][i * kPer], v_cache + row + i * kPer);
    }
    commit_copies();
    if (!(first && row == early_row && j < settled)) {
#pragma unroll
      for (int i = 0; i < kPieces; ++i)
        kr[i] = mine ? *reinterpret_cast<const uint4*>(k_cache + row + i * kPer) : make_uint4(0, 0, 0, 0);
    }
    return valid;
  };
  int64_t j0 = begin + 32 * warp;
  int valid = start_round(j0, true);  // in flight while q is staged
  for (int e = threadIdx.x; e < kGroup * kDh; e += kDecodeWarps * 32) {
    const int h = e / kDh, d = e % kDh;
    qs[h][d] = h < gn ? a.q[(t * a.Hq + h0 + h) * kDh + d] * a.scale : 0.0f;
  }
  __syncthreads();
  float m[kGroup], l[kGroup], acc[kGroup][kLaneDims];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int d = 0; d < kLaneDims; ++d) acc[h][d] = 0.0f;
  }
  while (valid > 0) {
    const bool mine = lane < valid;
    float s[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h) s[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPieces; ++i) {
      const T* e = reinterpret_cast<const T*>(&kr[i]);
      float kv[kPer];
#pragma unroll
      for (int c = 0; c < kPer; ++c) kv[c] = widen(e[c]);
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        // q's 8 dims of this piece as two 16-byte loads (the same address in every lane).
        const float4* q4 = reinterpret_cast<const float4*>(&qs[h][i * kPer]);
#pragma unroll
        for (int c4 = 0; c4 < kPer / 4; ++c4) {
          const float4 qv = q4[c4];
          s[h] += qv.x * kv[4 * c4] + qv.y * kv[4 * c4 + 1] + qv.z * kv[4 * c4 + 2] + qv.w * kv[4 * c4 + 3];
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      const float m_new = fmaxf(m[h], warp_max(mine ? s[h] : -INFINITY));  // finite: lane 0 has a key
      const float keep = expf(m[h] - m_new), pj = mine ? expf(s[h] - m_new) : 0.0f;
      l[h] = l[h] * keep + warp_sum(pj);
#pragma unroll
      for (int d = 0; d < kLaneDims; ++d) acc[h][d] *= keep;
      m[h] = m_new;
      ps[warp][h][lane] = pj;
    }
    wait_copies<0>();
    __syncwarp();
    for (int key = 0; key < valid; ++key) {
      float v[kLaneDims];
#pragma unroll
      for (int d = 0; d < kLaneDims; ++d) v[d] = widen(vs[warp][key][lane * kLaneDims + d]);
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float pj = ps[warp][h][key];
#pragma unroll
        for (int d = 0; d < kLaneDims; ++d) acc[h][d] += pj * v[d];
      }
    }
    __syncwarp();  // vs and ps are rewritten by the next round
    j0 += kDecodeKeys;
    valid = start_round(j0, false);
  }
  // Merge the warps (a warp past the split's end has m = -inf and weight 0).
  __syncthreads();
  float(*accs)[kGroup][kDh] = reinterpret_cast<float(*)[kGroup][kDh]>(shared);
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
#pragma unroll
    for (int d = 0; d < kLaneDims; ++d) accs[warp][h][lane * kLaneDims + d] = acc[h][d];
    if (lane == 0) {
      ms[warp][h] = m[h];
      ls[warp][h] = l[h];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < gn * kDh; e += kDecodeWarps * 32) {
    const int h = e / kDh, d = e % kDh;
    float big = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) big = fmaxf(big, ms[w][h]);
    float o = 0.0f, total = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float weight = ms[w][h] == -INFINITY ? 0.0f : expf(ms[w][h] - big);
      o += accs[w][h][d] * weight;
      total += ls[w][h] * weight;
    }
    const int64_t at = (t * a.Hq + h0 + h) * kSplits + z;
    partial[at * kDh + d] = o;
    if (d == 0) stats[at] = make_float2(big, total);
  }
}

template <typename T, int kDh>
void launch_decode(cudaStream_t s, const AttentionArgs& a, float* partial, float2* stats) {
  const int64_t G = a.Hq / a.Hkv;
  auto grid = [&](int group) {
    return dim3(static_cast<unsigned>(a.T), static_cast<unsigned>(a.Hkv * ((G + group - 1) / group)), kSplits);
  };
  const unsigned threads = kDecodeWarps * 32;
  if (G == 1) {
    launch_kernel(attention_decode_kernel<T, kDh, 1>, grid(1), threads, 0, s, a, partial, stats);
  } else if (G == 2) {
    launch_kernel(attention_decode_kernel<T, kDh, 2>, grid(2), threads, 0, s, a, partial, stats);
  } else if (G <= 4) {
    launch_kernel(attention_decode_kernel<T, kDh, 4>, grid(4), threads, 0, s, a, partial, stats);
  } else {
    launch_kernel(attention_decode_kernel<T, kDh, kMaxGroup>, grid(kMaxGroup), threads, 0, s, a, partial, stats);
  }
}

// out[t, h] = sum_z partial_z e^(M_z - M) / sum_z L_z e^(M_z - M), one block per (row, head).
// The splits that saw positions are a prefix (the empty ones are past the row's end); their
// weights go to shared memory first, then each thread sums its dims over them with the loads
// unrolled, so that they are in flight together. kBits (4 or 8; 0: none): the head's groups of
// out also rounded into px as prepare_x_kernel rounds them (round_group), a warp a group, so
// that the o projection's integer matvec needs no launch to round its x.
template <int kBits>
__global__ void attention_merge_kernel(const float* partial, const float2* stats, int64_t Hq, int64_t Dh, float* out,
                                       PreparedX px, int group_size) {
  wait_for_previous(__func__);
  const int64_t th = blockIdx.x * Hq + blockIdx.y;
  __shared__ float weight[kSplits];
  __shared__ float total;
  __shared__ int active;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float big = -INFINITY;
    for (int z = lane; z < kSplits; z += 32) big = fmaxf(big, stats[th * kSplits + z].x);
    big = warp_max(big);
    float sum = 0.0f;
    int n = 0;
    for (int z = lane; z < kSplits; z += 32) {
      const float2 st = stats[th * kSplits + z];
      const bool seen = st.x != -INFINITY;
      weight[z] = seen ? expf(st.x - big) : 0.0f;
      sum += seen ? st.y * weight[z] : 0.0f;
      n += seen ? 1 : 0;
    }
    sum = warp_sum(sum);
    n = __reduce_add_sync(0xffffffffu, n);
    if (lane == 0) {
      total = sum;
      active = n;
    }
  }
  __syncthreads();
  const float* part = partial + th * kSplits * Dh;
  __shared__ float head[kMaxDimsPerLane * 32];
  for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll 8
    for (int z = 0; z < active; ++z) o += part[z * Dh + d] * weight[z];
    const float y = o / total;
    out[th * Dh + d] = y;
    if constexpr (kBits != 0) head[d] = y;
  }
  if constexpr (kBits != 0) {
    __syncthreads();
    const int lane = threadIdx.x % 32, per_lane = group_size / 32;
    for (int64_t g = threadIdx.x / 32; g < Dh / group_size; g += blockDim.x / 32) {
      float v[kMaxGroupPerLane];
#pragma unroll
      for (int i = 0; i < kMaxGroupPerLane; ++i) v[i] = i < per_lane ? head[g * group_size + lane + 32 * i] : 0.0f;
      round_group<kBits>(v, blockIdx.x, Hq * Dh, (blockIdx.y * Dh) / group_size + g, group_size, px);
    }
  }
}

// Whether it wrote `rounding` (decode rows only).
template <typename T>
bool launch(cudaStream_t s, const AttentionArgs& a, void* scratch, const XRounding* rounding) {
  if (attention_prefill_mma(s, a)) return false;
  if (a.T > kMatvecRows && a.Dh <= kTileMaxDh) {
    const dim3 grid(static_cast<unsigned>((a.T + kTileRows - 1) / kTileRows), static_cast<unsigned>(a.Hq));
    launch_kernel(attention_tile_kernel<T>, grid, kTileWarps * 32, 0, s, a);
    return false;
  }
  if (a.T > kMatvecRows) {
    launch_kernel(attention_kernel<T>, dim3(static_cast<unsigned>(a.T), static_cast<unsigned>(a.Hq)),
                  kPrefillWarps * 32, 0, s, a);
    return false;
  }
  auto* partial = static_cast<float*>(scratch);
  auto* stats = reinterpret_cast<float2*>(partial + a.T * a.Hq * kSplits * a.Dh);
  bool grouped = false;  // the KV-head kernel, for 16-bit caches and head dims 64 and 128
  if constexpr (sizeof(T) == 2) {
    grouped = a.Dh == 128 || a.Dh == 64;
    if (a.Dh == 128) launch_decode<T, 128>(s, a, partial, stats);
    if (a.Dh == 64) launch_decode<T, 64>(s, a, partial, stats);
  }
  if (!grouped) {
    const dim3 grid(static_cast<unsigned>(a.T), static_cast<unsigned>(a.Hq), kSplits);
    launch_kernel(attention_split_kernel<T>, grid, kSplitWarps * 32, 0, s, a, partial, stats);
  }
  const dim3 merge_grid(static_cast<unsigned>(a.T), static_cast<unsigned>(a.Hq));
  if (rounding == nullptr) {
    launch_kernel(attention_merge_kernel<0>, merge_grid, 128, 0, s, partial, stats, a.Hq, a.Dh, a.out, PreparedX{}, 0);
    return false;
  }
  HEARTH_CHECK(rounding->group_size % 32 == 0 && rounding->group_size <= 32 * kMaxGroupPerLane &&
               a.Dh % rounding->group_size == 0 && (rounding->bits == 4 || rounding->bits == 8));
  const PreparedX px = prepared_x(rounding->scratch, a.T, a.Hq * a.Dh, rounding->group_size);
  launch_kernel(rounding->bits == 4 ? attention_merge_kernel<4> : attention_merge_kernel<8>, merge_grid, 128, 0, s,
                partial, stats, a.Hq, a.Dh, a.out, px, rounding->group_size);
  return true;
}

}  // namespace

int64_t attention_scratch_bytes(int64_t T, int64_t Hq, int64_t Dh) {
  return T > kMatvecRows ? 0 : T * Hq * kSplits * (Dh + 2) * static_cast<int64_t>(sizeof(float));
}

bool attention(cudaStream_t s, const AttentionArgs& a, void* scratch, const XRounding* rounding) {
  if (a.T == 0 || a.Hq == 0) return false;
  HEARTH_CHECK(a.Dh <= 32 * kMaxDimsPerLane);
  switch (a.kv_dtype) {
    case DType::kF16: return launch<__half>(s, a, scratch, rounding);
    case DType::kBF16: return launch<__nv_bfloat16>(s, a, scratch, rounding);
    default: return launch<float>(s, a, scratch, rounding);
  }
}

}  // namespace hearth::cuda
