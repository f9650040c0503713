// ops::sample on the GPU: top-k, top-p, min-p and the draw as radix selections over the row's
// tokens in the op's order, without sorting it, so only the chosen ids cross to the host.
//
// Every token has a unique 64-bit key, order_key(t) << 32 | id (smaller = better), and a weight,
// floor(exp(t - t_best) * 2^40) (core/sample_row.h). Each truncation and the draw is "the
// smallest key whose cumulative weight (or count) over the keys <= it exceeds a target", found
// from the top one digit of 11 bits at a time: a histogram of the digit over the keys that share
// the digits found so far, scanned for the bin where the target falls. A bin of one key ends
// the search early (a 128k vocabulary takes about 3 passes, not 6). The sums are integers, so
// they do not depend on the order of the atomic adds: the same ids on every run.
//
// A row is a cluster of kClusterBlocks blocks of 1024 threads (one block where the GPU has no
// clusters), each over its slice of the vocabulary: each block writes its slice's order keys to
// scratch and builds its histograms in its own shared memory; after a cluster barrier every
// block reads all of them (distributed shared memory), so all reach the same digit without
// another barrier. A greedy row stops at the best key: the argmax.
#include <cooperative_groups.h>

#include <cstdint>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/reduce.cuh"

namespace hearth::cuda {
namespace {

using sampling::full_key;
using sampling::key_value;
using sampling::order_key;
using sampling::weight;
using u64 = unsigned long long;  // the type CUDA's 64-bit shuffles take

// Blocks per row: 16 (the H100/H200 maximum, a non-portable size) where the GPU runs them, else
// 8, the portable maximum.
constexpr unsigned kClusterBlocks = 16, kPortableClusterBlocks = 8;
// A slice's keys stay in shared memory up to this size (a 655k vocabulary in 16 blocks), else
// they go to scratch in device memory.
constexpr int64_t kMaxSharedKeyBytes = 160 << 10;
constexpr int kThreads = 1024, kUnroll = 4;
constexpr int kDigitBits = 11, kBins = 1 << kDigitBits;
static_assert(kBins == 2 * kThreads, "the scan gives each thread two bins");
constexpr u64 kNone = ~u64{0};

// The cluster, or the block alone on GPUs before 9.0 (launched without clusters there).
__device__ inline unsigned cluster_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().num_blocks();
#else
  return 1;
#endif
}
__device__ inline unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().block_rank();
#else
  return 0;
#endif
}
__device__ inline void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __syncthreads();
#endif
}
// `p` in the shared memory of the cluster's block `rank`.
template <typename T>
__device__ inline T* shared_of(T* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#else
  return p;
#endif
}

struct Min {
  static constexpr u64 kIdentity = kNone;
  __device__ u64 operator()(u64 a, u64 b) const { return a < b ? a : b; }
};
struct Max {
  static constexpr u64 kIdentity = 0;
  __device__ u64 operator()(u64 a, u64 b) const { return a > b ? a : b; }
};

// A block's share of the cluster's histogram: kBins / blocks bins (2 or more blocks).
constexpr int kMaxShare = kBins / 2;

struct Shared {
  // The digit histogram of this block's slice: weight as two 32-bit halves (native shared
  // atomics; the carry of the low half goes to the high one) and count per bin.
  uint32_t lo[kBins], hi[kBins], n[kBins];
  // The cluster's totals of this block's share of the bins, [rank * share, (rank + 1) * share).
  u64 share_w[kMaxShare];
  uint32_t share_n[kMaxShare];
  u64 warp_total[kThreads / 32], warp_part[kThreads / 32];
  u64 prefix, target, found, best, last;
  uint32_t count;
};

// op over the cluster: each block's value in its `slot`, read by every warp of every block (lane
// i reads block i's). The slot must not be written again before the next cluster barrier.
template <typename Op>
__device__ u64 cluster_reduce(u64 v, Op op, Shared& s, u64 Shared::*slot) {
  v = block_reduce<kThreads>(v, op, Op::kIdentity, s.warp_part);
  if (threadIdx.x == 0) s.*slot = v;
  cluster_sync();
  const unsigned lane = threadIdx.x % 32;
  if (lane < cluster_blocks()) v = shared_of(&s, lane)->*slot;
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The cluster's weight and count of bins b and b + 1 (b even), from every block's histogram:
// block q first adds up its share of the bins over the blocks (two blocks' bins per thread,
// kThreads / share threads per bin, summed by shuffles), then each reads the shares it needs.
// Two cluster barriers; a dozen loads from other blocks per thread whatever the cluster size.
__device__ void cluster_bins(Shared& s, bool weighted, int b, u64* w, uint32_t* n) {
  auto weight_of = [&](const Shared* o, int bin) {
    return weighted ? (u64{o->hi[bin]} << 32) + o->lo[bin] : u64{o->n[bin]};
  };
  const unsigned blocks = cluster_blocks();
  if (blocks == 1) {
    w[0] = weight_of(&s, b), w[1] = weight_of(&s, b + 1), n[0] = s.n[b], n[1] = s.n[b + 1];
    return;
  }
  const int share = kBins / static_cast<int>(blocks), per_bin = kThreads / share;  // per_bin = blocks / 2
  const int bin = static_cast<int>(cluster_rank()) * share + static_cast<int>(threadIdx.x) / per_bin;
  const unsigned q = threadIdx.x % per_bin;
  const Shared* first = shared_of(&s, q);
  const Shared* second = shared_of(&s, q + per_bin);
  u64 sum_w = weight_of(first, bin) + weight_of(second, bin);
  uint32_t sum_n = first->n[bin] + second->n[bin];
  for (int o = per_bin / 2; o > 0; o /= 2) {
    sum_w += __shfl_xor_sync(0xffffffffu, sum_w, o);
    sum_n += __shfl_xor_sync(0xffffffffu, sum_n, o);
  }
  if (q == 0) s.share_w[threadIdx.x / per_bin] = sum_w, s.share_n[threadIdx.x / per_bin] = sum_n;
  cluster_sync();
  const Shared* owner = shared_of(&s, static_cast<unsigned>(b / share));
  w[0] = owner->share_w[b % share], w[1] = owner->share_w[b % share + 1];
  n[0] = owner->share_n[b % share], n[1] = owner->share_n[b % share + 1];
}

// The block's slice of a row: tokens [begin, end), token i's order key at keys[i - base].
struct Slice {
  uint32_t* keys;
  int64_t base, begin, end;
  __device__ uint32_t& key(int64_t i) const { return keys[i - base]; }
};

// f(full key, order key) for each of the slice's tokens this thread takes, kUnroll loads in
// flight.
template <typename F>
__device__ inline void for_each_key(const Slice& sl, F&& f) {
  for (int64_t i0 = sl.begin + threadIdx.x; i0 < sl.end; i0 += int64_t{kThreads} * kUnroll) {
    uint32_t k[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = i0 + u * kThreads;
      k[u] = i < sl.end ? sl.key(i) : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = i0 + u * kThreads;
      if (i < sl.end) f(full_key(k[u], i), k[u]);
    }
  }
}

enum class Target { kCount, kTopP, kDraw };

// The smallest key K <= limit whose cumulative weight over the keys <= K (counts for kCount)
// exceeds the target: `count` for kCount; for kTopP, ceil(top_p * total) - 1; for kDraw,
// floor(u * total), total being the weight of the keys <= limit. False when no key does (total
// weight 0). The same answer in every block of the cluster.
__device__ bool select(const Slice& sl, float best_t, const SampleRow& row, Target mode, u64 count, u64 limit,
                       Shared& s, u64* out) {
  const bool weighted = mode != Target::kCount;
  u64 prefix = 0, target = count;
  for (int resolved = 0; resolved < 64;) {
    const int width = min(kDigitBits, 64 - resolved), shift = 64 - resolved - width;
    cluster_sync();  // no block still reads this block's bins
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.lo[b] = 0, s.hi[b] = 0, s.n[b] = 0;
    __syncthreads();
    // Adds run-length: neighbouring tokens often share a bin (the first digit of most tokens is
    // the same), and one atomic per run, not per token, keeps the bins from serializing.
    int run_bin = -1;
    u64 run_w = 0;
    uint32_t run_n = 0;
    auto flush = [&] {
      if (run_bin < 0) return;
      atomicAdd(&s.n[run_bin], run_n);
      if (!weighted) return;
      const auto lo = static_cast<uint32_t>(run_w), hi = static_cast<uint32_t>(run_w >> 32);
      const uint32_t before = atomicAdd(&s.lo[run_bin], lo);
      const uint32_t carry = before + lo < before ? 1 : 0;
      if (hi + carry != 0) atomicAdd(&s.hi[run_bin], hi + carry);
    };
    for_each_key(sl, [&](u64 k, uint32_t key) {
      if (k > limit || (resolved > 0 && (k >> (64 - resolved)) != prefix)) return;
      const int bin = static_cast<int>((k >> shift) & ((u64{1} << width) - 1));
      if (bin != run_bin) {
        flush();
        run_bin = bin, run_w = 0, run_n = 0;
      }
      if (weighted) run_w += weight(key_value(key), best_t);
      ++run_n;
    });
    flush();
    cluster_sync();  // every block's bins are complete
    // The cluster's bins 2i and 2i + 1 for thread i.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, b0 = 2 * threadIdx.x;
    u64 w[2];
    uint32_t n[2];
    cluster_bins(s, weighted, b0, w, n);
    const u64 w0 = w[0], w1 = w[1];
    const uint32_t n0 = n[0], n1 = n[1];
    u64 inclusive = w0 + w1;
    for (int o = 1; o < 32; o *= 2) {
      const u64 up = __shfl_up_sync(0xffffffffu, inclusive, o);
      if (lane >= o) inclusive += up;
    }
    if (lane == 31) s.warp_total[warp] = inclusive;
    __syncthreads();
    u64 total = 0, before = inclusive - w0 - w1;
    for (int w = 0; w < kThreads / 32; ++w) {
      total += s.warp_total[w];
      if (w < warp) before += s.warp_total[w];
    }
    if (resolved == 0 && mode == Target::kTopP) {
      const double reach = ceil(static_cast<double>(row.top_p) * static_cast<double>(total));
      target = reach >= 1.0 ? static_cast<u64>(reach) - 1 : 0;
    } else if (resolved == 0 && mode == Target::kDraw) {
      target = __umul64hi(row.u, total);
    }
    if (total <= target) return false;  // the same in every thread of the cluster
    if (before <= target && target < before + w0) {
      s.prefix = prefix << width | static_cast<u64>(b0), s.target = target - before, s.count = n0;
    } else if (before + w0 <= target && target < before + w0 + w1) {
      s.prefix = prefix << width | static_cast<u64>(b0 + 1), s.target = target - before - w0, s.count = n1;
    }
    __syncthreads();
    prefix = s.prefix, target = s.target, resolved += width;
    const uint32_t in_bin = s.count;
    __syncthreads();  // all have read s before it is written again
    if (in_bin == 1 && resolved < 64) {
      // One key has these digits: it is the answer, in one block's slice.
      u64 mine = 0;  // no key is 0
      for_each_key(sl, [&](u64 k, uint32_t) {
        if (k <= limit && (k >> (64 - resolved)) == prefix) mine = k;
      });
      *out = cluster_reduce(mine, Max(), s, &Shared::found);
      return true;
    }
  }
  *out = prefix;
  return true;
}

// logits [R, V], rows [R] -> ids [R]; keys: [R, V] scratch, unless the slice's keys fit the
// dynamic shared memory (shared_keys). Grid (cluster blocks, R).
__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int64_t V, const SampleRow* rows,
                                                          uint32_t* all_keys, bool shared_keys, int32_t* ids) {
  wait_for_previous(__func__);
  __shared__ Shared s;
  extern __shared__ uint32_t slice_keys[];
  const int64_t r = blockIdx.y;
  const SampleRow row = rows[r];
  const bool greedy = !(row.temperature > 0.0f);
  const int64_t chunk = (V + cluster_blocks() - 1) / cluster_blocks();
  const int64_t begin = min(V, cluster_rank() * chunk), end = min(V, begin + chunk);
  const Slice sl = shared_keys ? Slice{slice_keys, begin, begin, end} : Slice{all_keys + r * V, 0, begin, end};
  const float* x = logits + r * V;

  u64 best = kNone;
  for (int64_t i0 = sl.begin + threadIdx.x; i0 < sl.end; i0 += int64_t{kThreads} * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = i0 + u * kThreads;
      v[u] = i < sl.end ? x[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = i0 + u * kThreads;
      if (i >= sl.end) break;
      const uint32_t key = order_key(greedy ? v[u] : v[u] / row.temperature);
      if (!greedy) sl.key(i) = key;
      best = Min()(best, full_key(key, i));
    }
  }
  best = cluster_reduce(best, Min(), s, &Shared::best);  // its barrier also publishes the keys
  u64 chosen = best;
  if (!greedy) {
    const float best_t = key_value(static_cast<uint32_t>(best >> 32));
    u64 top_k = kNone;  // the last key of the top-k prefix
    if (row.top_k > 0 && row.top_k < V) select(sl, best_t, row, Target::kCount, row.top_k - 1, kNone, s, &top_k);
    u64 limit = top_k;
    if (row.log_min_p > -INFINITY) {
      u64 last = 0;  // the last survivor; no key is 0
      for_each_key(sl, [&](u64 k, uint32_t key) {
        if (key_value(key) - best_t >= row.log_min_p) last = Max()(last, k);
      });
      limit = Min()(limit, cluster_reduce(last, Max(), s, &Shared::last));
    }
    u64 top_p;
    if (row.top_p < 1.0f && select(sl, best_t, row, Target::kTopP, 0, top_k, s, &top_p)) limit = Min()(limit, top_p);
    limit = Max()(limit, best);  // the best token is always kept
    if (!select(sl, best_t, row, Target::kDraw, 0, limit, s, &chosen)) chosen = best;
  }
  if (cluster_rank() == 0 && threadIdx.x == 0) ids[r] = static_cast<int32_t>(chosen & 0xffffffffu);
  cluster_sync();  // no block leaves while another may read its shared memory
}

// The blocks per row on the current device, the kernel's attributes set at the first call.
unsigned cluster_size() {
  if (!block_clusters()) return 1;
  static const unsigned size = [] {
    check(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
          "sample: non-portable clusters");
    check(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSharedKeyBytes),
          "sample: shared memory");
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(kClusterBlocks, 1);
    config.blockDim = kThreads;
    config.dynamicSmemBytes = kMaxSharedKeyBytes;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim = {kClusterBlocks, 1, 1};
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, sample_kernel, &config);
    if (e != cudaSuccess) cudaGetLastError();  // not that size: clear the error, take the portable one
    return e == cudaSuccess && clusters > 0 ? kClusterBlocks : kPortableClusterBlocks;
  }();
  return size;
}

}  // namespace

void sample(cudaStream_t s, const float* logits, int64_t R, int64_t V, const SampleRow* rows, uint32_t* keys,
            int32_t* ids) {
  if (R == 0) return;
  const unsigned cluster = cluster_size();
  const int64_t slice_bytes = (V + cluster - 1) / cluster * 4;
  const bool shared_keys = cluster > 1 && slice_bytes <= kMaxSharedKeyBytes;
  launch_cluster_kernel(sample_kernel, dim3(cluster, static_cast<unsigned>(R)), kThreads, cluster,
                        shared_keys ? static_cast<size_t>(slice_bytes) : 0, s, logits, V, rows, keys, shared_keys, ids);
}

}  // namespace hearth::cuda
