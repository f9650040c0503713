// Elementwise ops of the MLP and the residual stream, one thread per element.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void silu_mul_kernel(const float* g, const float* u, int64_t n, float* out) {
  wait_for_previous(__func__);
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i < n) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

__global__ void add_kernel(float* a, const float* b, int64_t n) {
  wait_for_previous(__func__);
  const int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (i < n) a[i] += b[i];
}

}  // namespace

void silu_mul(cudaStream_t s, const float* g, const float* u, int64_t n, float* out) {
  if (n == 0) return;
  launch_kernel(silu_mul_kernel, blocks_for(n, kThreads), kThreads, 0, s, g, u, n, out);
}

void add(cudaStream_t s, float* a, const float* b, int64_t n) {
  if (n == 0) return;
  launch_kernel(add_kernel, blocks_for(n, kThreads), kThreads, 0, s, a, b, n);
}

}  // namespace hearth::cuda
