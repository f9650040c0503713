// RMSNorm, one block per row: x: [rows, d] -> y = w * (x / sqrt(mean(x^2) + eps)), as the
// CPU reference computes it (f32 throughout; the sum of squares in a tree, not in order).
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/reduce.cuh"

namespace hearth::cuda {
namespace {

__global__ void rms_norm_kernel(const float* x, const float* w, int64_t d, float eps, float* y) {
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) ss += xr[i] * xr[i];
  const float inv = 1.0f / sqrtf(block_reduce<false>(ss) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) yr[i] = w[i] * (xr[i] * inv);
}

}  // namespace

void rms_norm(cudaStream_t s, const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(x, w, d, eps, y);
  HEARTH_CUDA_LAUNCHED("rms_norm");
}

}  // namespace hearth::cuda
