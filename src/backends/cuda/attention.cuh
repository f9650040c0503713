// What the attention kernels (attention.cu, attention_mma.cu) share.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernels.h"
#include "backends/cuda/mma.cuh"

namespace hearth::cuda {

// Where query row t of the batch sits: its sequence, cache index c, and first visible index.
struct RowPlace {
  int64_t seq, c, lo;
};
__device__ inline RowPlace place_of(const AttentionArgs& a, int64_t t) {
  // The sequence of row t: the last s with seq_starts[s] <= t.
  int64_t lo_s = 0, hi_s = a.n_seqs - 1;
  while (lo_s < hi_s) {
    const int64_t mid = (lo_s + hi_s + 1) / 2;
    if (a.seq_starts[mid] <= t) {
      lo_s = mid;
    } else {
      hi_s = mid - 1;
    }
  }
  const int64_t c = a.context_lens[lo_s] + t - a.seq_starts[lo_s];
  return {lo_s, c, a.window > 0 ? max(int64_t{0}, c - a.window + 1) : 0};
}

// Offset in elements of the cache row of position j of sequence seq, KV head kv_head, in a
// cache [n_blocks, block_size, Hkv, Dh] (Dh passed by kernels that know it at compile time).
__device__ inline int64_t cache_row(const AttentionArgs& a, int64_t seq, int64_t j, int64_t kv_head, int64_t Dh) {
  const int64_t b = a.block_tables[seq * a.max_blocks + j / a.block_size];
  return ((b * a.block_size + j % a.block_size) * a.Hkv + kv_head) * Dh;
}

// Prefill rows (T > kMatvecRows) on tensor cores where the cache is 16-bit and the head dim is
// 64 or 128 (attention_mma.cu); false, launching nothing, otherwise.
bool attention_prefill_mma(cudaStream_t s, const AttentionArgs& a);

}  // namespace hearth::cuda
