// Rotary position embedding, HF rotate-half layout, one thread per rotated pair (t, h, i):
//   x'[i] = x[i] cos - x[i + half] sin,  x'[i + half] = x[i + half] cos + x[i] sin,
// angle = position * inv_freq[i] in f32 and cos/sin in double then f32 times attention_factor,
// as the CPU reference. x: [T, H, Dh] in place; dims past 2 * half pass through.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

// Rotates the pair (i, i + half) of one head's row xh at position pos.
__device__ inline void rotate(float* xh, int64_t i, int64_t half, int32_t pos, const float* inv_freq, float af) {
  const float angle = static_cast<float>(pos) * inv_freq[i];
  const float c = static_cast<float>(cos(static_cast<double>(angle))) * af;
  const float sn = static_cast<float>(sin(static_cast<double>(angle))) * af;
  const float a = xh[i], b = xh[i + half];
  xh[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn));
  xh[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, sn));
}

__global__ void rope_kernel(float* x, int64_t T, int64_t H, int64_t Dh, const int32_t* positions, const float* inv_freq,
                            int64_t half, float af) {
  wait_for_previous(__func__);
  const int64_t n = T * H * half;
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < n;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = at % half, th = at / half;
    rotate(x + th * Dh, i, half, positions[th / H], inv_freq, af);
  }
}

// rope of q and k, and k and v into their cache slots, in one pass. Per row t: Hq * half
// rotated pairs of q, then Hkv * Dh elements of k (element d < half rotates its pair and
// stores both; the pair's second element is stored by it; dims past 2 * half are stored as
// they are), then Hkv * Dh elements of v.
template <typename T>
__global__ void rope_kv_write_kernel(RopeKvArgs a, T* k_cache, T* v_cache, int32_t* errors) {
  wait_for_previous(__func__);
  const int64_t nq = a.Hq * a.half, nk = a.Hkv * a.Dh, per_row = nq + 2 * nk;
  for (int64_t at = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; at < a.T * per_row;
       at += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = at / per_row, e = at % per_row;
    const int32_t pos = a.positions[t];
    if (e < nq) {
      rotate(a.q + (t * a.Hq + e / a.half) * a.Dh, e % a.half, a.half, pos, a.inv_freq, a.factor);
      continue;
    }
    const int32_t slot = a.slots[t];
    const bool stored = slot >= 0 && slot < a.n_slots;
    const int64_t e2 = e - nq;
    if (e2 < nk) {
      const int64_t d = e2 % a.Dh;
      float* kh = a.k + t * nk + (e2 - d);
      const int64_t dst = static_cast<int64_t>(slot) * nk + (e2 - d);
      if (d < a.half) {
        rotate(kh, d, a.half, pos, a.inv_freq, a.factor);
        if (stored) {
          k_cache[dst + d] = narrow<T>(kh[d]);
          k_cache[dst + d + a.half] = narrow<T>(kh[d + a.half]);
        }
      } else if (d >= 2 * a.half && stored) {
        k_cache[dst + d] = narrow<T>(kh[d]);
      }
      continue;
    }
    const int64_t e3 = e2 - nk;
    if (!stored) {
      if (e3 == 0) report_error(errors, kBadSlot, slot, static_cast<int32_t>(a.n_slots));
      continue;
    }
    v_cache[static_cast<int64_t>(slot) * nk + e3] = narrow<T>(a.v[t * nk + e3]);
  }
}

}  // namespace

void rope_kv_write(cudaStream_t s, const RopeKvArgs& a, void* k_cache, void* v_cache, DType type, int32_t* errors) {
  const int64_t n = a.T * (a.Hq * a.half + 2 * a.Hkv * a.Dh);
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = std::min<unsigned>(blocks_for(n, kThreads), 65535u);
  switch (type) {
    case DType::kF16:
      launch_kernel(rope_kv_write_kernel<__half>, blocks, kThreads, 0, s, a, static_cast<__half*>(k_cache),
                    static_cast<__half*>(v_cache), errors);
      break;
    case DType::kBF16:
      launch_kernel(rope_kv_write_kernel<__nv_bfloat16>, blocks, kThreads, 0, s, a,
                    static_cast<__nv_bfloat16*>(k_cache), static_cast<__nv_bfloat16*>(v_cache), errors);
      break;
    default:
      launch_kernel(rope_kv_write_kernel<float>, blocks, kThreads, 0, s, a, static_cast<float*>(k_cache),
                    static_cast<float*>(v_cache), errors);
      break;
  }
}

void rope(cudaStream_t s, float* x, int64_t T, int64_t H, int64_t Dh, const int32_t* positions, const float* inv_freq,
          int64_t half, float attention_factor) {
  const int64_t n = T * H * half;
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_kernel(rope_kernel, std::min<unsigned>(blocks_for(n, kThreads), 65535u), kThreads, 0, s, x, T, H, Dh,
                positions, inv_freq, half, attention_factor);
}

}  // namespace hearth::cuda
