// Rotary position embedding, HF rotate-half layout, one thread per rotated pair (t, h, i):
//   x'[i] = x[i] cos - x[i + half] sin,  x'[i + half] = x[i + half] cos + x[i] sin,
// angle = position * inv_freq[i] in f32 and cos/sin in double then f32 times attention_factor,
// as the CPU reference. x: [T, H, Dh] in place; dims past 2 * half pass through.
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"

namespace hearth::cuda {
namespace {

__global__ void rope_kernel(float* x, int64_t T, int64_t H, int64_t Dh, const int32_t* positions, const float* inv_freq,
                            int64_t half, float af) {
  const int64_t n = T * H * half;
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < n;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = at % half, th = at / half, t = th / H;
    const float angle = static_cast<float>(positions[t]) * inv_freq[i];
    const float c = static_cast<float>(cos(static_cast<double>(angle))) * af;
    const float sn = static_cast<float>(sin(static_cast<double>(angle))) * af;
    float* xh = x + th * Dh;
    const float a = xh[i], b = xh[i + half];
    xh[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn));
    xh[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, sn));
  }
}

}  // namespace

void rope(cudaStream_t s, float* x, int64_t T, int64_t H, int64_t Dh, const int32_t* positions, const float* inv_freq,
          int64_t half, float attention_factor) {
  const int64_t n = T * H * half;
  if (n == 0) return;
  constexpr int kThreads = 256;
  rope_kernel<<<std::min<unsigned>(blocks_for(n, kThreads), 65535u), kThreads, 0, s>>>(x, T, H, Dh, positions, inv_freq,
                                                                                       half, attention_factor);
  HEARTH_CUDA_LAUNCHED("rope");
}

}  // namespace hearth::cuda
