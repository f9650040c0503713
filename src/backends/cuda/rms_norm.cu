// RMSNorm, one block per row: x: [rows, d] -> y = w * (x / sqrt(mean(x^2) + eps)), as the
// CPU reference computes it (f32 throughout; the sum of squares in a tree, not in order).
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/reduce.cuh"

namespace hearth::cuda {
namespace {

__global__ void rms_norm_kernel(const float* x, const float* w, int64_t d, float eps, float* y) {
  wait_for_previous(__func__);
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  const float inv = inverse_rms(xr, d, eps, false);
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) yr[i] = w[i] * (xr[i] * inv);
}

// The same for rows of whole float4s (d % 4 == 0, 16-byte aligned), the loads unrolled so that
// a thread's are in flight together: a decode row is one block, and its time is the round trips.
__global__ void rms_norm4_kernel(const float* x, const float* w, int64_t d, float eps, float* y) {
  wait_for_previous(__func__);
  const float4* xr = reinterpret_cast<const float4*>(x + blockIdx.x * d);
  float4* yr = reinterpret_cast<float4*>(y + blockIdx.x * d);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  const int64_t n = d / 4;
  const float inv = inverse_rms(x + blockIdx.x * d, d, eps, true);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) {
    const float4 v = xr[i], g = w4[i];
    yr[i] = make_float4(g.x * (v.x * inv), g.y * (v.y * inv), g.z * (v.z * inv), g.w * (v.w * inv));
  }
}

}  // namespace

void rms_norm(cudaStream_t s, const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  if (rows == 0) return;
  const bool vec4 =
      d % 4 == 0 &&
      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  if (vec4) {
    launch_kernel(rms_norm4_kernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, w, d, eps, y);
  } else {
    launch_kernel(rms_norm_kernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, w, d, eps, y);
  }
}

}  // namespace hearth::cuda
