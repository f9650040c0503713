// x rounded to int8 per group for the integer matvec kernels (quant_matmul.cu for MLX affine,
// ggml_matmul.cu for Q4_K): xq = rint(x / dx), dx = max|x| / 127 per group, exactly as the
// CPU's VNNI kernels round it, with each group's exact sum of x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/reduce.cuh"
#include "base/error.h"

namespace hearth::cuda {

// x as the integer kernel reads it (scratch): dx and sum per (row t, group) [T, G] f32, then xq
// [T, K] i8 from the next 16 bytes.
struct PreparedX {
  float* dx;
  float* sum;
  int8_t* q;
};
inline PreparedX prepared_x(void* scratch, int64_t T, int64_t K, int group_size) {
  float* f = static_cast<float*>(scratch);
  const int64_t TG = T * (K / group_size);
  return {f, f + TG, reinterpret_cast<int8_t*>(f + (2 * TG + 3) / 4 * 4)};  // xq 16-byte aligned
}

namespace {

constexpr int kPrepareWarps = 8;     // per block of prepare_x_kernel
constexpr int kMaxGroupPerLane = 4;  // groups of up to 128 values, a warp's lanes taking 4 each

// Where element k of a row goes in xq: 4-bit words take each 8 codes' even then odd ones.
template <int kBits>
__device__ inline int64_t xq_index(int64_t k) {
  if constexpr (kBits == 4) {
    const int e = static_cast<int>(k % 8);
    return k - e + (e % 2 == 0 ? e / 2 : 4 + e / 2);
  } else {
    return k;
  }
}

// Warp-wide: group g of row t (lane's values v[i] = x[t, g * group_size + lane + 32 i], i <
// group_size / 32) rounded into out: xq, and the group's dx and exact sum.
template <int kBits>
__device__ inline void round_group(const float (&v)[kMaxGroupPerLane], int64_t t, int64_t K, int64_t g, int group_size,
                                   const PreparedX& out) {
  const int lane = threadIdx.x % 32, per_lane = group_size / 32;
  float m = 0.0f, sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxGroupPerLane; ++i) {
    if (i >= per_lane) break;
    m = fmaxf(m, fabsf(v[i]));
    sum += v[i];
  }
  m = warp_max(m);
  sum = warp_sum(sum);
  const float scale = m > 0.0f ? 127.0f / m : 0.0f;
  int8_t* q = out.q + t * K + g * group_size;
#pragma unroll
  for (int i = 0; i < kMaxGroupPerLane; ++i) {
    if (i >= per_lane) break;
    // Round to nearest even, as the CPU's conversion does (no fused multiply-add before it).
    q[xq_index<kBits>(lane + 32 * i)] = static_cast<int8_t>(__float2int_rn(__fmul_rn(v[i], scale)));
  }
  if (lane == 0) {
    const int64_t G = K / group_size;
    out.dx[t * G + g] = m / 127.0f;
    out.sum[t * G + g] = sum;
  }
}

// Grid (ceil(G / kPrepareWarps), T): warp w of block (b, t) takes group b * kPrepareWarps + w of
// row t of x: [T, K]. 4-bit codes take each 8 values' even then odd ones (xq_index), others
// natural order. With a norm, every block first sums the squares of its whole row, as the
// norm's own kernel does (the same threads, kRowThreads, in the same tree), so each group is
// normalized with the same factor.
template <int kBits>
__global__ void prepare_x_kernel(XSource src, int64_t K, int group_size, PreparedX out) {
  const int64_t G = K / group_size, t = blockIdx.y,
                g = blockIdx.x * static_cast<int64_t>(kPrepareWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, per_lane = group_size / 32;
  const int64_t first = g * group_size;
  // The norm's weights before the wait: no kernel writes them.
  float w[kMaxGroupPerLane];
#pragma unroll
  for (int i = 0; i < kMaxGroupPerLane; ++i) {
    w[i] = src.norm_w != nullptr && g < G && i < per_lane ? src.norm_w[first + lane + 32 * i] : 1.0f;
  }
  wait_for_previous(__func__);
  const float* xr = src.x + t * K;
  // The lane's values of its group (and of up), asked for before the norm's reduction, so that
  // they and the row's loads for the sum of squares are in flight together.
  float v[kMaxGroupPerLane], u[kMaxGroupPerLane];
#pragma unroll
  for (int i = 0; i < kMaxGroupPerLane; ++i) {
    const bool mine = g < G && i < per_lane;
    v[i] = mine ? xr[first + lane + 32 * i] : 0.0f;
    u[i] = mine && src.up != nullptr ? src.up[t * K + first + lane + 32 * i] : 0.0f;
  }
  // rms_norm.cu reads float4s where x, the weight and y are aligned; here there is no y.
  const bool vec4 =
      K % 4 == 0 && (reinterpret_cast<uintptr_t>(src.x) | reinterpret_cast<uintptr_t>(src.norm_w)) % 16 == 0;
  const float inv = src.norm_w != nullptr ? inverse_rms(xr, K, src.eps, vec4) : 1.0f;
  if (g >= G) return;
#pragma unroll
  for (int i = 0; i < kMaxGroupPerLane; ++i) {
    if (src.up != nullptr) {
      v[i] = v[i] / (1.0f + expf(-v[i])) * u[i];
    } else if (src.norm_w != nullptr) {
      v[i] = w[i] * (v[i] * inv);
    }
  }
  round_group<kBits>(v, t, K, g, group_size, out);
}

static_assert(kPrepareWarps * 32 == kRowThreads, "a block sums a row's squares as the norm kernel does");

// Queues prepare_x_kernel for src ([T, K] values) into scratch; returns where it lands.
template <int kBits>
PreparedX prepare_x(cudaStream_t s, const XSource& src, int64_t T, int64_t K, int group_size, void* scratch) {
  HEARTH_CHECK(group_size % 32 == 0 && group_size <= 128);  // prepare_x_kernel's kMaxGroupPerLane
  const PreparedX px = prepared_x(scratch, T, K, group_size);
  const int64_t G = K / group_size;
  const dim3 grid(static_cast<unsigned>((G + kPrepareWarps - 1) / kPrepareWarps), static_cast<unsigned>(T));
  launch_kernel(prepare_x_kernel<kBits>, grid, kPrepareWarps * 32, 0, s, src, K, group_size, px);
  return px;
}

}  // namespace
}  // namespace hearth::cuda
