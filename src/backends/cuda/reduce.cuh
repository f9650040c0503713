// Warp- and block-wide reductions (sum, max, min, ...) for kernels that give one block to one row.
#pragma once

#include <cuda_runtime.h>

namespace hearth::cuda {

constexpr int kRowThreads = 256;  // threads of a row block (a multiple of 32)

// op over a warp's 32 lanes, returned to every lane: lane i takes op(its value, lane i ^ o's)
// for o = 16, 8, 4, 2, 1.
template <typename T, typename Op>
__device__ inline T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  return warp_reduce(v, [](float a, float b) { return a + b; });
}
__device__ inline float warp_max(float v) {
  return warp_reduce(v, [](float a, float b) { return fmaxf(a, b); });
}

// op over a block of kThreads threads, returned to every thread: each warp's reduction into
// part (kThreads / 32 slots of shared memory that no other reduction is reading), then the same
// tree over those, with `identity` in the lanes past the last warp. One order for a given
// kThreads, so a float sum has the same bits in every kernel that uses it.
template <int kThreads, typename T, typename Op>
__device__ inline T block_reduce(T v, Op op, T identity, T* part) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 32 of them");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // part may still be read by a previous reduction
  if (lane == 0) part[warp] = v;
  __syncthreads();
  return warp_reduce(lane < kThreads / 32 ? part[lane] : identity, op);
}

// The sum (or max) of v over a row block's kRowThreads threads, returned to every thread.
template <bool kMax>
__device__ inline float row_reduce(float v) {
  __shared__ float partial[kRowThreads / 32];
  if constexpr (kMax)
    return block_reduce<kRowThreads>(
        v, [](float a, float b) { return fmaxf(a, b); }, -INFINITY, partial);
  else
    return block_reduce<kRowThreads>(
        v, [](float a, float b) { return a + b; }, 0.0f, partial);
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
  return 1.0f / sqrtf(row_reduce<false>(ss) / static_cast<float>(d) + eps);
}

}  // namespace hearth::cuda
