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

// 1 / sqrt(mean(x^2) + eps) of row x: [d], to every thread of a block of kRowThreads: the
// RMSNorm factor, summed in the same order by every kernel that normalizes (rms_norm.cu, and
// the int8 rounding of x in prepared_x.cuh), so they agree to the bit. vec4: x 16-byte aligned
// and d % 4 == 0, read as float4s with a thread's loads in flight together.
__device__ inline float inverse_rms(const float* x, int64_t d, float eps, bool vec4) {
  float ss = 0.0f;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < d / 4; i += kRowThreads) {
      const float4 v = x4[i];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += kRowThreads) ss += x[i] * x[i];
  }
  return 1.0f / sqrtf(block_reduce<false>(ss) / static_cast<float>(d) + eps);
}

}  // namespace hearth::cuda
