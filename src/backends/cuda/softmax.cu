// Row softmax (max-subtracted) and argmax (first maximum wins, like torch.argmax), one block
// per row of x: [R, V].
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/reduce.cuh"

namespace hearth::cuda {
namespace {

__global__ void softmax_kernel(float* x, int64_t V) {
  wait_for_previous(__func__);
  float* row = x + blockIdx.x * V;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += kRowThreads) mx = fmaxf(mx, row[i]);
  mx = row_reduce<true>(mx);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += kRowThreads) {
    const float e = expf(row[i] - mx);
    row[i] = e;
    sum += e;
  }
  const float inv = 1.0f / row_reduce<false>(sum);
  for (int64_t i = threadIdx.x; i < V; i += kRowThreads) row[i] *= inv;
}

// (value, index) pairs: the larger value wins, the smaller index on a tie; NaN never wins.
__device__ inline void better(float& v, int64_t& i, float ov, int64_t oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

// 1024 threads per row, four loads in flight each: a vocabulary of 128k is 32 rounds, not 500
// dependent ones.
constexpr int kArgmaxThreads = 1024, kArgmaxUnroll = 4;

__global__ void argmax_kernel(const float* x, int64_t V, int32_t* ids) {
  wait_for_previous(__func__);
  const float* row = x + blockIdx.x * V;
  float v = -INFINITY;
  int64_t idx = V;  // none yet: any real element beats it
  for (int64_t i0 = threadIdx.x; i0 < V; i0 += kArgmaxThreads * kArgmaxUnroll) {
    float vals[kArgmaxUnroll];
#pragma unroll
    for (int u = 0; u < kArgmaxUnroll; ++u) {
      const int64_t i = i0 + u * kArgmaxThreads;
      vals[u] = i < V ? row[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kArgmaxUnroll; ++u) {
      const int64_t i = i0 + u * kArgmaxThreads;
      if (i < V) better(v, idx, vals[u], i);
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, idx, o);
    better(v, idx, ov, oi);
  }
  __shared__ float vals[kArgmaxThreads / 32];
  __shared__ int64_t idxs[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) {
    vals[threadIdx.x / 32] = v;
    idxs[threadIdx.x / 32] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) better(v, idx, vals[w], idxs[w]);
    // A row of NaN or -inf only: index 0, as the CPU reference.
    ids[blockIdx.x] = static_cast<int32_t>(idx == V ? 0 : idx);
  }
}

}  // namespace

void softmax(cudaStream_t s, float* x, int64_t R, int64_t V) {
  if (R == 0) return;
  launch_kernel(softmax_kernel, static_cast<unsigned>(R), kRowThreads, 0, s, x, V);
}

void argmax(cudaStream_t s, const float* x, int64_t R, int64_t V, int32_t* ids) {
  if (R == 0) return;
  launch_kernel(argmax_kernel, static_cast<unsigned>(R), kArgmaxThreads, 0, s, x, V, ids);
}

}  // namespace hearth::cuda
