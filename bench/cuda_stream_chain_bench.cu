// Does a decode step's chain of matvecs read faster as one persistent kernel that keeps weights
// in flight across the matvecs' dependencies than as one kernel per matvec? The question behind a
// decode megakernel. On an H100 the answer was no (bench/RESULTS.md, stop 45); on an H200, with the
// weights fed by the TMA engine, no again (stop 47).
//
// The chain: the 128 bf16 matvecs of a Llama-3-8B decode step (32 layers of q+k+v [6144, 4096],
// o [4096, 4096], gate+up [28672, 4096], down [4096, 14336]; 13.96 GB), each matvec's x the
// first K outputs of the one before it. No attention, norms or LM head: only the weights'
// stream and the dependencies between matvecs.
//
//   graph:  one kernel per matvec, one warp per row, captured in a CUDA graph.
//   stream: one persistent kernel. Each warp owns fixed rows of every matvec and copies its
//           weights, 2 KiB at a time, into its own ring of shared memory (cp.async) S chunks
//           ahead of its arithmetic, across rows and matvecs. Only the arithmetic waits for x,
//           i.e. for every row of the previous matvec (release/acquire row counters), so a warp
//           that finished its rows of matvec m has m+1's first S chunks in flight meanwhile.
//           Variants: polls backing off; a grid of 1024 warps, which divide every matvec's rows
//           evenly; no waits at all (wrong outputs: the persistent stream's own rate).
//   tma:    one persistent kernel, one block an SM: a producer lane streams whole-row tiles by bulk
//           copies (the TMA engine) into a ring of shared memory; consumer warp w owns stage w.
//
// All compute each row's dot in the same order, so their outputs must be bit-identical (checked,
// except without waits). Prints the device-to-device copy rate (bytes read + written per second,
// as hearth bench) and each variant's step time and weight bytes per second.
// Usage: cuda_stream_chain_bench [REPS] [--quarter] [--gaps] [--graphs]
// --graphs: only the graphs of one kernel per matvec (hearth's form and its variants).
// --gaps: idle stretches between the matvecs, as a 4-bit step's small kernels leave (12 us before
// each o, 4 us before the others): a kernel that waits in the graph; in tma, the consumers of the
// next matvec idle that long after the previous one's last row while the producers keep loading.
// --quarter: every K a quarter as long (rounded up to a multiple of 1024: q+k+v, o and gate+up
// [N, 1024], down [4096, 4096]; 3.62 GB): a 4-bit model's bytes and rows per matvec, in bf16.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_stream_chain_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

constexpr int kChunkVecs = 128;  // 16-byte vectors per 2 KiB chunk: 32 lanes x 4
constexpr int kMaxMats = 160;

// One matvec: y[N] = w[N, K] x[K], w bf16 row-major (K a multiple of 1024).
struct Mat {
  const uint4* w;
  const float* x;
  float* y;
  int n, k;
};
struct Chain {
  Mat m[kMaxMats];
  int first_row_offset[kMaxMats];  // rows of the matvecs before m, modulo the warp count
  int gap_ns[kMaxMats];            // --gaps: idle time before matvec m (graph and tma only)
  int count;
};

__device__ inline float lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ inline float hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// acc += the 8 weights of one 16-byte vector v times x's values there, in a fixed order.
__device__ inline float dot_vec(const uint4& w, const float* x, int v, float acc) {
  const float4 a = reinterpret_cast<const float4*>(x)[2 * v];
  const float4 b = reinterpret_cast<const float4*>(x)[2 * v + 1];
  acc = fmaf(lo(w.x), a.x, acc);
  acc = fmaf(hi(w.x), a.y, acc);
  acc = fmaf(lo(w.y), a.z, acc);
  acc = fmaf(hi(w.y), a.w, acc);
  acc = fmaf(lo(w.z), b.x, acc);
  acc = fmaf(hi(w.z), b.y, acc);
  acc = fmaf(lo(w.w), b.z, acc);
  acc = fmaf(hi(w.w), b.w, acc);
  return acc;
}

// acc += the lane's 4 x 8 weights of chunk c times x, in a fixed order (every variant's order).
__device__ inline float dot_chunk(const uint4 (&w)[4], const float* x, int c, int lane, float acc) {
#pragma unroll
  for (int i = 0; i < 4; ++i) acc = dot_vec(w[i], x, c * kChunkVecs + i * 32 + lane, acc);
  return acc;
}

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// --- graph: one kernel per matvec ---

__global__ void matvec_kernel(Mat m) {
  const int r = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= m.n) return;
  const uint4* row = m.w + static_cast<int64_t>(r) * (m.k / 8);
  float acc = 0;
  for (int c = 0; c < m.k / 1024; ++c) {
    uint4 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = load_stream(row + c * kChunkVecs + i * 32 + lane);
    acc = dot_chunk(w, m.x, c, lane, acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) m.y[r] = acc;
}

// The same in hearth's form (matmul.cu's matvec16): launched early (programmatic dependent
// launch) when the variant asks, each warp asking L2 for the first kHeadBytes of its row before it
// waits for the previous kernel; kLoads 16-byte loads a lane in flight (4: 2 KiB a warp a round);
// kSplit warps a row, each summing a contiguous 1/kSplit of it, the parts added in a fixed order
// through shared memory (a different order of sums from `graph`: not checked bit for bit).
template <int kLoads, int kSplit, int kHeadBytes>
__global__ void matvec_early_kernel(Mat m) {
  constexpr int kRowsPerBlock = 8 / kSplit;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = blockIdx.x * kRowsPerBlock + warp % kRowsPerBlock, part = warp / kRowsPerBlock;
  const bool valid = r < m.n;
  const int vecs = m.k / 8 / kSplit;  // 16-byte vectors of this warp's part of the row
  const uint4* row = m.w + static_cast<int64_t>(valid ? r : 0) * (m.k / 8) + part * vecs;
  if (valid) {
    const uintptr_t line = reinterpret_cast<uintptr_t>(row) + lane * 128;
    for (int b = 0; b < kHeadBytes && b < vecs * 16; b += 32 * 128)
      if (b + lane * 128 < vecs * 16) asm volatile("prefetch.global.L2 [%0];" ::"l"(line + b));
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  float acc = 0;
  if (valid) {
    const float* xp = m.x + 8 * part * vecs;  // x's values for this warp's part
    for (int v0 = lane; v0 < vecs; v0 += 32 * kLoads) {
      uint4 w[kLoads];
#pragma unroll
      for (int i = 0; i < kLoads; ++i) w[i] = v0 + 32 * i < vecs ? load_stream(row + v0 + 32 * i) : uint4{};
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int v = v0 + 32 * i;
        if (v >= vecs) break;
        acc = dot_vec(w[i], xp, v, acc);
      }
    }
    acc = warp_sum(acc);
  }
  if constexpr (kSplit == 1) {
    if (valid && lane == 0) m.y[r] = acc;
  } else {
    __shared__ float parts[8];
    if (lane == 0) parts[warp] = acc;
    __syncthreads();
    if (valid && part == 0 && lane == 0) {
      float sum = parts[warp];
      for (int p = 1; p < kSplit; ++p) sum += parts[warp + p * kRowsPerBlock];
      m.y[r] = sum;
    }
  }
}

__device__ inline unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// --gaps: stands for the latency-bound kernels between two matvecs (norms, rope, attention).
__global__ void gap_kernel(int ns) {
  const unsigned long long start = now_ns();
  while (now_ns() - start < static_cast<unsigned long long>(ns)) {
  }
}

// --- stream: one persistent kernel ---

// Walks one warp's share of the chain chunk by chunk: matvec m's row r belongs to warp
// (r + first_row_offset[m]) mod warps, so the warps' rows stay balanced over the whole chain.
struct Cursor {
  int m, row, chunk;
  __device__ void start(const Chain& ch, int warp, int warps) {
    m = 0;
    chunk = 0;
    row = warp;
    settle(ch, warp, warps);
  }
  // Moves past matvecs in which this warp has no row left.
  __device__ void settle(const Chain& ch, int warp, int warps) {
    while (m < ch.count && row >= ch.m[m].n) {
      ++m;
      if (m < ch.count) row = ((warp - ch.first_row_offset[m]) % warps + warps) % warps;
    }
  }
  __device__ bool done(const Chain& ch) const { return m >= ch.count; }
  __device__ void advance(const Chain& ch, int warp, int warps) {
    if (++chunk < ch.m[m].k / 1024) return;
    chunk = 0;
    row += warps;
    settle(ch, warp, warps);
  }
};

__device__ inline void copy16(uint32_t to, const void* from) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(from));
}
__device__ inline void commit() { asm volatile("cp.async.commit_group;"); }
template <int kPending>
__device__ inline void wait_pending() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
__device__ inline unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline unsigned load_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline void add_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ inline unsigned fetch_add_release(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ inline unsigned long long load_acquire64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline void store_release64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// rows_done[m]: rows of matvec m written (zeroed before each launch).
template <int S>
__global__ void stream_kernel(const Chain* __restrict__ chain_in, unsigned* rows_done, int wait_mode) {
  extern __shared__ uint4 ring[];
  const Chain& ch = *chain_in;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const int warps = gridDim.x * (blockDim.x / 32), warp = blockIdx.x * (blockDim.x / 32) + wib;
  uint4* mine = ring + static_cast<size_t>(wib) * S * kChunkVecs;
  const uint32_t mine_s = static_cast<uint32_t>(__cvta_generic_to_shared(mine));

  Cursor ahead, at;
  ahead.start(ch, warp, warps);
  at = ahead;
  auto issue = [&](int slot) {
    if (!ahead.done(ch)) {
      const Mat& m = ch.m[ahead.m];
      const uint4* src = m.w + static_cast<int64_t>(ahead.row) * (m.k / 8) + ahead.chunk * kChunkVecs + lane;
#pragma unroll
      for (int i = 0; i < 4; ++i) copy16(mine_s + (slot * kChunkVecs + i * 32 + lane) * 16, src + i * 32);
      ahead.advance(ch, warp, warps);
    }
    commit();  // empty groups past the end keep the count uniform
  };
#pragma unroll
  for (int s = 0; s < S; ++s) issue(s);

  int ready_m = -1;   // the matvec whose x this warp has seen complete
  int rows_mine = 0;  // rows of at.m this warp has written
  float acc = 0;
  for (int step = 0; !at.done(ch); ++step) {
    const int slot = step % S;
    wait_pending<S - 1>();
    if (at.m != ready_m) {
      if (at.m > 0 && !(wait_mode & 4)) {  // 4: no waits at all (wrong results; the stream's own rate)
        const unsigned need = static_cast<unsigned>(ch.m[at.m - 1].n);
        if (lane == 0) {
          // wait_mode 1: back off between polls; 2: poll relaxed, then one acquire fence.
          unsigned pause = 32;
          if (wait_mode & 2) {
            while (load_relaxed(&rows_done[at.m - 1]) < need)
              if (wait_mode & 1) __nanosleep(pause = min(pause * 2, 512u));
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
          } else {
            while (load_acquire(&rows_done[at.m - 1]) < need)
              if (wait_mode & 1) __nanosleep(pause = min(pause * 2, 512u));
          }
        }
        __syncwarp();
      }
      ready_m = at.m;
    }
    uint4 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = mine[slot * kChunkVecs + i * 32 + lane];
    const Mat& m = ch.m[at.m];
    acc = dot_chunk(w, m.x, at.chunk, lane, acc);
    const int m_now = at.m, row_now = at.row;
    const bool row_ends = at.chunk + 1 == m.k / 1024;
    issue(slot);  // after the slot's vectors were used
    at.advance(ch, warp, warps);
    if (row_ends) {
      acc = warp_sum(acc);
      if (lane == 0) m.y[row_now] = acc;
      acc = 0;
      ++rows_mine;
      if (at.done(ch) || at.m != m_now) {  // this warp's last row of m_now
        if (lane == 0) add_release(&rows_done[m_now], static_cast<unsigned>(rows_mine));
        rows_mine = 0;
      }
    }
  }
  wait_pending<0>();
}

// --- tma: one persistent kernel, a producer warp per SM streaming whole tiles by bulk copies ---
//
// Stop 45's stream kernel issued 16-byte cp.async copies from every warp and read slower than the
// graph even without waits. Here one lane of a producer warp per block (one block an SM) issues
// one bulk copy (the TMA engine's cp.async.bulk, completing on an mbarrier) per tile of whole rows,
// up to kTileBytes, into a ring of S stages: ~S x 28 KiB in flight per SM regardless of the
// consumers. Consumer warp w owns stage w (S consumer warps): it waits for the stage's bytes, for x
// (the previous matvec's rows_done, as in `stream`), computes its tile's rows in graph's order,
// releases the stage to the producer, and counts its rows done. Tiles of the chain in order, tile
// g to block g mod blocks; every block walks its tiles in chain order, so a wait only ever needs
// tiles that come earlier in every block's walk (no deadlock with all blocks resident).
constexpr int kTileBytes = 28 * 1024;  // one 14336-wide bf16 row; 3 rows of 4096, 14 of 1024

__host__ __device__ inline int tile_rows(const Mat& m) {
  const int rows = kTileBytes / (m.k * 2);
  return rows > 0 ? rows : 1;
}

struct TileCursor {
  int m = 0, tile = 0;  // matvec, tile within it
  long long base = 0;   // global index of matvec m's first tile
  // Moves to global tile g (g never decreases); false past the chain's end.
  __device__ bool seek(const Chain& ch, long long g) {
    while (m < ch.count) {
      const Mat& mat = ch.m[m];
      const long long tiles = (mat.n + tile_rows(mat) - 1) / tile_rows(mat);
      if (g < base + tiles) {
        tile = static_cast<int>(g - base);
        return true;
      }
      base += tiles;
      ++m;
    }
    return false;
  }
};

__device__ inline uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ inline void bar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ inline void bar_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ inline void bar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ inline void bar_wait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(smem_addr(bar)), "r"(parity)
                 : "memory");
  }
}
__device__ inline void bulk_copy(void* to, const void* from, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(to)),
      "l"(from), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// rows_done: [count] row counters, then [count] u64 times at which each matvec's last row was
// counted (for --gaps; zeroed before each launch, as the counters).
template <int S>
__global__ void tma_kernel(const Chain* __restrict__ chain_in, unsigned* rows_done, int wait_mode) {
  unsigned long long* done_at = reinterpret_cast<unsigned long long*>(rows_done + chain_in->count);
  extern __shared__ __align__(128) unsigned char smem[];
  uint4* ring = reinterpret_cast<uint4*>(smem);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + static_cast<size_t>(S) * kTileBytes);
  uint64_t* empty = full + S;
  const Chain& ch = *chain_in;
  const int lane = threadIdx.x % 32, wib = threadIdx.x / 32;
  const long long blocks = gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      bar_init(&full[s], 1);
      bar_init(&empty[s], 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wib == S) {  // the producer warp
    if (lane != 0) return;
    TileCursor cur;
    for (long long j = 0; cur.seek(ch, blockIdx.x + j * blocks); ++j) {
      const int s = static_cast<int>(j % S);
      if (j >= S) bar_wait(&empty[s], static_cast<unsigned>((j / S - 1) & 1));
      const Mat& m = ch.m[cur.m];
      const int rows = tile_rows(m), r0 = cur.tile * rows, n = min(rows, m.n - r0);
      const unsigned bytes = static_cast<unsigned>(n) * m.k * 2;
      bar_expect(&full[s], bytes);
      bulk_copy(ring + static_cast<size_t>(s) * (kTileBytes / 16), m.w + static_cast<int64_t>(r0) * (m.k / 8), bytes,
                &full[s]);
    }
    return;
  }

  // Consumer warp wib: local tiles wib, wib + S, ... of this block, all in stage wib.
  const uint4* stage = ring + static_cast<size_t>(wib) * (kTileBytes / 16);
  TileCursor cur;
  int ready_m = 0;  // matvecs before this one have their x complete (matvec 0's x is given)
  for (long long n_own = 0;; ++n_own) {
    const long long j = wib + n_own * S;
    if (!cur.seek(ch, blockIdx.x + j * blocks)) break;
    const Mat& m = ch.m[cur.m];
    if (cur.m > ready_m) {
      if (!(wait_mode & 4)) {
        const unsigned need = static_cast<unsigned>(ch.m[cur.m - 1].n);
        if (lane == 0) {
          while (load_acquire(&rows_done[cur.m - 1]) < need) {
          }
          // A gap before this matvec: idle until gap_ns after the previous one's last row.
          if (ch.gap_ns[cur.m] > 0) {
            unsigned long long at = 0;
            while ((at = load_acquire64(&done_at[cur.m - 1])) == 0) {
            }
            while (now_ns() < at + ch.gap_ns[cur.m]) {
            }
          }
        }
        __syncwarp();
      }
      ready_m = cur.m;
    }
    bar_wait(&full[wib], static_cast<unsigned>(n_own & 1));
    const int rows = tile_rows(m), r0 = cur.tile * rows, n = min(rows, m.n - r0);
    const int row_vecs = m.k / 8;
    for (int r = 0; r < n; ++r) {
      float acc = 0;
      for (int c = 0; c < m.k / 1024; ++c) {
        uint4 w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = stage[r * row_vecs + c * kChunkVecs + i * 32 + lane];
        acc = dot_chunk(w, m.x, c, lane, acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) m.y[r0 + r] = acc;
    }
    __syncwarp();
    if (lane == 0) {
      bar_arrive(&empty[wib]);
      const unsigned before = fetch_add_release(&rows_done[cur.m], static_cast<unsigned>(n));
      if (before + n == static_cast<unsigned>(m.n) && cur.m + 1 < ch.count && ch.gap_ns[cur.m + 1] > 0)
        store_release64(&done_at[cur.m], now_ns());
    }
  }
}

__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32) * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = (static_cast<float>(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * scale;
    p[i] = static_cast<uint16_t>(__float_as_uint(u) >> 16);
  }
}

float time_graph(cudaGraphExec_t g, cudaStream_t s) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  check(cudaEventRecord(a, s), "record");
  check(cudaGraphLaunch(g, s), "graph launch");
  check(cudaEventRecord(b, s), "record");
  check(cudaEventSynchronize(b), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

struct Variant {
  const char* name;
  cudaGraphExec_t exec;
  std::vector<float> ms;
  bool exact = true;  // must reproduce the graph's outputs
};

using PersistentKernel = void (*)(const Chain*, unsigned*, int);

// How many blocks of `threads` with `shared` bytes of shared memory an SM holds (exits if none).
int blocks_per_sm(PersistentKernel kernel, const char* name, int threads, size_t shared) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
        "smem attribute");
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared), "occupancy");
  if (per_sm < 1) {
    std::fprintf(stderr, "%s: does not fit an SM\n", name);
    std::exit(1);
  }
  return per_sm;
}

// A graph of one persistent kernel over its own device copy of `chain`, its counters zeroed first.
Variant capture(const char* name, PersistentKernel kernel, int blocks, int threads, size_t shared, const Chain& chain,
                unsigned* rows_done, int wait_mode, cudaStream_t s) {
  Chain* d_own = nullptr;
  check(cudaMalloc(&d_own, sizeof(Chain)), "chain");
  check(cudaMemcpy(d_own, &chain, sizeof(Chain), cudaMemcpyHostToDevice), "chain up");
  cudaGraph_t g;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  check(cudaMemsetAsync(rows_done, 0, 3 * sizeof(unsigned) * chain.count, s), "memset");
  kernel<<<blocks, threads, shared, s>>>(d_own, rows_done, wait_mode);
  check(cudaGetLastError(), "persistent launch");
  check(cudaStreamEndCapture(s, &g), "capture end");
  Variant v{name, nullptr, {}, (wait_mode & 4) == 0};
  check(cudaGraphInstantiate(&v.exec, g, 0), "instantiate");
  return v;
}

template <int S>
Variant make_stream(const char* name, int warps_per_block, int wait_mode, int block_count, const Chain& chain,
                    unsigned* rows_done, cudaStream_t s, int sms) {
  const size_t shared = static_cast<size_t>(warps_per_block) * S * kChunkVecs * 16;
  const int per_sm = blocks_per_sm(stream_kernel<S>, name, warps_per_block * 32, shared);
  // block_count: a fixed grid (at most what fits), e.g. 1024 warps, which divide every matvec's
  // rows evenly; 0: every SM full.
  const int blocks = block_count > 0 ? std::min(block_count, sms * per_sm) : sms * per_sm;
  std::printf(
      "%s: %d warps a block, %d chunks of 2 KiB a warp, %d blocks (%d an SM), %zu KiB shared a block, wait %d\n", name,
      warps_per_block, S, blocks, per_sm, shared / 1024, wait_mode);
  // The rows' offsets depend on the warp count: this variant's own copy of the chain.
  Chain host = chain;
  const int warps = blocks * warps_per_block;
  int64_t before = 0;
  for (int i = 0; i < host.count; ++i) {
    host.first_row_offset[i] = static_cast<int>(before % warps);
    before += host.m[i].n;
  }
  return capture(name, stream_kernel<S>, blocks, warps_per_block * 32, shared, host, rows_done, wait_mode, s);
}

template <int S>
Variant make_tma(const char* name, int wait_mode, const Chain& chain, unsigned* rows_done, cudaStream_t s, int sms) {
  const size_t shared = size_t{S} * kTileBytes + 2 * S * sizeof(uint64_t);
  blocks_per_sm(tma_kernel<S>, name, (S + 1) * 32, shared);
  std::printf("%s: one block an SM, %d consumer warps, a ring of %d x %d KiB, wait %d\n", name, S, S, kTileBytes / 1024,
              wait_mode);
  return capture(name, tma_kernel<S>, sms, (S + 1) * 32, shared, chain, rows_done, wait_mode, s);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  bool quarter = false, gaps = false, graphs_only = false;
  for (int i = 2; i < argc; ++i) {
    quarter = quarter || std::strcmp(argv[i], "--quarter") == 0;
    gaps = gaps || std::strcmp(argv[i], "--gaps") == 0;
    graphs_only = graphs_only || std::strcmp(argv[i], "--graphs") == 0;
  }
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sm count");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "stream");

  const int full[4][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  const int quartered[4][2] = {{6144, 1024}, {4096, 1024}, {28672, 1024}, {4096, 4096}};
  const auto& shapes = quarter ? quartered : full;
  const int layers = 32, count = layers * 4;
  Chain host{};
  host.count = count;
  size_t weight_bytes = 0;
  std::vector<float*> xs(count + 1);
  check(cudaMalloc(&xs[0], 4096 * sizeof(float)), "x");
  for (int i = 0; i < count; ++i) {
    const int n = shapes[i % 4][0], k = shapes[i % 4][1];
    uint16_t* w = nullptr;
    check(cudaMalloc(&w, size_t{2} * n * k), "weights");
    fill_bf16<<<4096, 256, 0, s>>>(w, size_t{1} * n * k, 1234u + i, 1.7f / std::sqrt(static_cast<float>(k)));
    check(cudaMalloc(&xs[i + 1], sizeof(float) * n), "y");
    host.m[i] = {reinterpret_cast<const uint4*>(w), xs[i], xs[i + 1], n, k};
    // --gaps: a 4-bit layer's latency-bound stretches on an H100 (bench/RESULTS.md, stop 46), roughly:
    // rope, attention and merge before o; a norm and x's rounding before the other three.
    if (gaps && i > 0) host.gap_ns[i] = i % 4 == 1 ? 12000 : 4000;
    weight_bytes += size_t{2} * n * k;
  }
  // x0: a fixed vector of unit-ish values.
  std::vector<float> x0(4096);
  for (int i = 0; i < 4096; ++i) x0[i] = std::sin(0.37f * i) + 0.1f;
  check(cudaMemcpy(xs[0], x0.data(), sizeof(float) * 4096, cudaMemcpyHostToDevice), "x0");
  unsigned* rows_done = nullptr;
  check(cudaMalloc(&rows_done, 3 * sizeof(unsigned) * count), "counters");
  check(cudaStreamSynchronize(s), "fill");

  // d2d copy rate, as hearth bench measures it.
  {
    const size_t bytes = size_t{2} << 30;
    void *a, *b;
    check(cudaMalloc(&a, bytes), "copy src");
    check(cudaMalloc(&b, bytes), "copy dst");
    check(cudaMemsetAsync(a, 0, bytes, s), "memset");
    float best = 1e30f;
    for (int i = 0; i < 6; ++i) {
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0, s);
      check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s), "copy");
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (i > 0) best = std::min(best, ms);
    }
    std::printf("%s, %d SMs: d2d copy %.1f GB/s; chain of %d matvecs, %.3f GB of bf16 weights\n", prop.name, sms,
                2.0 * bytes / (best * 1e-3) / 1e9, count, weight_bytes / 1e9);
    long long gap_total = 0;
    for (int i = 0; i < count; ++i) gap_total += host.gap_ns[i];
    if (gaps) std::printf("gaps: %.3f ms in all\n", gap_total * 1e-6);
    cudaFree(a);
    cudaFree(b);
  }

  std::vector<Variant> variants;
  {
    cudaGraph_t g;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
    for (int i = 0; i < count; ++i) {
      if (host.gap_ns[i] > 0) gap_kernel<<<1, 32, 0, s>>>(host.gap_ns[i]);
      matvec_kernel<<<(host.m[i].n + 7) / 8, 256, 0, s>>>(host.m[i]);
    }
    check(cudaStreamEndCapture(s, &g), "capture end");
    Variant v{"graph", nullptr, {}};
    check(cudaGraphInstantiate(&v.exec, g, 0), "instantiate");
    variants.push_back(v);
  }
  // hearth's form and variants of it: early launch, more loads in flight, rows split across warps.
  auto graph_of = [&](const char* name, auto kernel, int rows_per_block, bool early, bool exact) {
    cudaGraph_t g;
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
    for (int i = 0; i < count; ++i) {
      if (host.gap_ns[i] > 0) gap_kernel<<<1, 32, 0, s>>>(host.gap_ns[i]);
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t config{};
      config.gridDim = dim3((host.m[i].n + rows_per_block - 1) / rows_per_block);
      config.blockDim = dim3(256);
      config.stream = s;
      config.attrs = &attr;
      config.numAttrs = early ? 1 : 0;
      check(cudaLaunchKernelEx(&config, kernel, host.m[i]), "early launch");
    }
    check(cudaStreamEndCapture(s, &g), "capture end");
    Variant v{name, nullptr, {}, exact};
    check(cudaGraphInstantiate(&v.exec, g, 0), "instantiate");
    variants.push_back(v);
  };
  graph_of("plain 4", matvec_early_kernel<4, 1, 0>, 8, false, true);
  graph_of("early 4", matvec_early_kernel<4, 1, 2048>, 8, true, true);
  graph_of("early 4 h0", matvec_early_kernel<4, 1, 0>, 8, true, true);
  graph_of("early 4 h4k", matvec_early_kernel<4, 1, 4096>, 8, true, true);
  graph_of("early 8", matvec_early_kernel<8, 1, 4096>, 8, true, true);
  graph_of("early 16", matvec_early_kernel<16, 1, 8192>, 8, true, true);
  graph_of("early 4 split2", matvec_early_kernel<4, 2, 2048>, 4, true, false);
  graph_of("early 8 split2", matvec_early_kernel<8, 2, 4096>, 4, true, false);
  graph_of("plain 8 split2", matvec_early_kernel<8, 2, 0>, 4, false, false);
  // Ring depth and grid: 8 warps of 8 chunks an SM was the best of 8x3 to 16x6 (bench/RESULTS.md);
  // "even": 1024 warps, which divide every matvec's rows evenly. --graphs: none of these.
  if (!gaps && !graphs_only) {  // the stream kernel has no gaps
    variants.push_back(make_stream<8>("stream", 8, 0, 0, host, rows_done, s, sms));
    variants.push_back(make_stream<8>("backoff", 8, 3, 0, host, rows_done, s, sms));
    variants.push_back(make_stream<8>("even", 8, 0, 128, host, rows_done, s, sms));
    variants.push_back(make_stream<4>("even 8x4", 8, 0, 256, host, rows_done, s, sms));
    variants.push_back(make_stream<8>("no wait", 8, 4, 0, host, rows_done, s, sms));
    variants.push_back(make_stream<8>("even no wait", 8, 4, 128, host, rows_done, s, sms));
  }
  if (!graphs_only) {
    variants.push_back(make_tma<7>("tma 7", 0, host, rows_done, s, sms));
    variants.push_back(make_tma<4>("tma 4", 0, host, rows_done, s, sms));
    variants.push_back(make_tma<7>("tma no wait", 4, host, rows_done, s, sms));
  }

  // Reference outputs from the graph, then every variant must reproduce them bit for bit.
  std::vector<std::vector<float>> want(count);
  check(cudaGraphLaunch(variants[0].exec, s), "graph");
  check(cudaStreamSynchronize(s), "graph run");
  for (int i = 0; i < count; ++i) {
    want[i].resize(host.m[i].n);
    check(cudaMemcpy(want[i].data(), xs[i + 1], sizeof(float) * host.m[i].n, cudaMemcpyDeviceToHost), "y down");
  }
  float last_abs = 0;
  for (float v : want[count - 1]) last_abs = std::max(last_abs, std::fabs(v));
  std::printf("last output max |y| %.3g\n", last_abs);
  for (size_t v = 1; v < variants.size(); ++v) {
    if (!variants[v].exact) continue;
    for (int i = 1; i <= count; ++i) check(cudaMemsetAsync(xs[i], 0xff, sizeof(float) * host.m[i - 1].n, s), "poison");
    check(cudaGraphLaunch(variants[v].exec, s), "stream");
    check(cudaStreamSynchronize(s), "stream run");
    size_t bad = 0;
    std::vector<float> got;
    for (int i = 0; i < count; ++i) {
      got.resize(host.m[i].n);
      check(cudaMemcpy(got.data(), xs[i + 1], sizeof(float) * host.m[i].n, cudaMemcpyDeviceToHost), "y down");
      bad += std::memcmp(got.data(), want[i].data(), sizeof(float) * got.size()) != 0;
    }
    std::printf("%s: %s\n", variants[v].name, bad == 0 ? "bit-identical to graph" : "DIFFERS from graph");
    if (bad != 0) return 1;
  }

  for (int r = 0; r < reps; ++r)
    for (auto& v : variants) v.ms.push_back(time_graph(v.exec, s));
  for (auto& v : variants) {
    std::sort(v.ms.begin(), v.ms.end());
    const float med = v.ms[v.ms.size() / 2];
    std::printf("%-12s median %.3f ms (min %.3f)  %.1f GB/s of weights\n", v.name, med, v.ms.front(),
                weight_bytes / (med * 1e-3) / 1e9);
  }
  return 0;
}
