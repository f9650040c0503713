// Block-wide reductions for kernels that give one block to one row.
#pragma once

#include <cuda_runtime.h>

namespace hearth::cuda {

constexpr int kRowThreads = 256;  // threads of a row block (a multiple of 32)

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sum (or max) of v over the block's kRowThreads threads, returned to every thread.
template <bool kMax>
__device__ inline float block_reduce(float v) {
  __shared__ float partial[kRowThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // partial may still be read by a previous reduction
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < kRowThreads / 32 ? partial[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(v) : warp_sum(v);
}

}  // namespace hearth::cuda
