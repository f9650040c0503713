// Dense y = x w^T + b. x: [T, K] f32, w: [N, K] f32|bf16|f16, bias: [N] f32 or none,
// y: [T, N] f32.
//
// Decode (T <= kMatvecRows): one warp per output row n reads w's row once, coalesced, for all
// T rows of x, accumulating in f32 (w widened exactly, as on the CPU): memory-bound, so it
// reads at the bandwidth the weights allow.
// Prefill: cuBLAS. f32 weights take SGEMM (f32 math, no TF32); bf16/f16 weights take the
// tensor cores with x rounded to the weights' type and f32 accumulation (docs/numerics.md).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <mutex>
#include <stdexcept>
#include <string>

#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/reduce.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

template <typename W, int kT>
__global__ void matvec_kernel(const float* x, const W* w, const float* bias, int64_t K, int64_t N, float* y) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const W* row = w + n * K;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t k = lane; k < K; k += 32) {
    const float wk = widen(row[k]);
    for (int t = 0; t < kT; ++t) acc[t] += x[t * K + k] * wk;
  }
  for (int t = 0; t < kT; ++t) {
    const float sum = warp_sum(acc[t]);
    if (lane == 0) y[t * N + n] = sum + (bias != nullptr ? bias[n] : 0.0f);
  }
}

// The same with 16-byte loads: lane i reads 16 bytes of the row at a time (8 bf16/f16 or 4 f32),
// four loads in flight, so a warp moves 2 KiB per round trip to memory. Needs K * sizeof(W)
// and the rows' start a multiple of 16 bytes, and x 16-byte aligned.
template <typename W, int kT>
__global__ void matvec16_kernel(const float* x, const W* w, const float* bias, int64_t K, int64_t N, float* y) {
  constexpr int kPer = 16 / sizeof(W);  // elements per 16-byte load
  constexpr int kUnroll = 4;
  const int64_t n = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const uint4* row = reinterpret_cast<const uint4*>(w + n * K);
  const int64_t vecs = K / kPer;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + 32 * u;
      raw[u] = v < vecs ? __ldg(row + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = v0 + 32 * u;
      if (v >= vecs) break;
      const W* e = reinterpret_cast<const W*>(&raw[u]);
      for (int t = 0; t < kT; ++t) {
        const float4* xv = reinterpret_cast<const float4*>(x + t * K + v * kPer);
#pragma unroll
        for (int j = 0; j < kPer / 4; ++j) {
          const float4 xj = xv[j];
          acc[t] += xj.x * widen(e[4 * j]) + xj.y * widen(e[4 * j + 1]) + xj.z * widen(e[4 * j + 2]) +
                    xj.w * widen(e[4 * j + 3]);
        }
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    const float sum = warp_sum(acc[t]);
    if (lane == 0) y[t * N + n] = sum + (bias != nullptr ? bias[n] : 0.0f);
  }
}

template <typename W, int kT>
void matvec(cudaStream_t s, const float* x, const W* w, const float* bias, int64_t K, int64_t N, float* y) {
  const bool aligned =
      (K * sizeof(W)) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (aligned) {
    matvec16_kernel<W, kT><<<blocks_for(N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(x, w, bias, K, N, y);
  } else {
    matvec_kernel<W, kT><<<blocks_for(N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(x, w, bias, K, N, y);
  }
}

template <typename W>
void matvec_rows(cudaStream_t s, const float* x, int64_t T, const W* w, const float* bias, int64_t K, int64_t N,
                 float* y) {
  switch (T) {
    case 1: return matvec<W, 1>(s, x, w, bias, K, N, y);
    case 2: return matvec<W, 2>(s, x, w, bias, K, N, y);
    case 3: return matvec<W, 3>(s, x, w, bias, K, N, y);
    case 4: return matvec<W, 4>(s, x, w, bias, K, N, y);
    case 5: return matvec<W, 5>(s, x, w, bias, K, N, y);
    case 6: return matvec<W, 6>(s, x, w, bias, K, N, y);
    case 7: return matvec<W, 7>(s, x, w, bias, K, N, y);
    default: return matvec<W, kMatvecRows>(s, x, w, bias, K, N, y);
  }
}

template <typename W>
__global__ void narrow_kernel(const float* x, int64_t n, W* out) {
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i < n) out[i] = narrow<W>(x[i]);
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t T, int64_t N) {
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i < T * N) y[i] += bias[i % N];
}

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS: ") + what + ": " + cublasGetStatusString(st));
  }
}

// Held across a handle's mode switch and its GEMM: the handles are shared by every thread.
std::mutex& cublas_mutex() {
  static std::mutex m;
  return m;
}

// One handle per device, created on first use, bound to the device's stream (caller holds
// cublas_mutex()).
cublasHandle_t handle_for(int device, cudaStream_t s) {
  static std::array<cublasHandle_t, 16> handles{};
  cublasHandle_t& h = handles.at(static_cast<size_t>(device));
  if (h == nullptr) check_cublas(cublasCreate(&h), "cublasCreate");
  check_cublas(cublasSetStream(h, s), "cublasSetStream");
  return h;
}

}  // namespace

void matmul(cudaStream_t s, int device, const float* x, int64_t T, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y, void* scratch) {
  if (T == 0 || N == 0) return;
  if (T <= kMatvecRows) {
    switch (w_type) {
      case DType::kBF16: matvec_rows(s, x, T, static_cast<const __nv_bfloat16*>(w), bias, K, N, y); break;
      case DType::kF16: matvec_rows(s, x, T, static_cast<const __half*>(w), bias, K, N, y); break;
      default: matvec_rows(s, x, T, static_cast<const float*>(w), bias, K, N, y); break;
    }
    HEARTH_CUDA_LAUNCHED("matvec");
    return;
  }
  // Column-major view: y^T [N, T] = (w as K x N)^T . (x as K x T).
  std::lock_guard<std::mutex> lock(cublas_mutex());
  cublasHandle_t h = handle_for(device, s);
  const float one = 1.0f, zero = 0.0f;
  const int m = static_cast<int>(N), n = static_cast<int>(T), k = static_cast<int>(K);
  if (w_type == DType::kF32) {
    check_cublas(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    check_cublas(
        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, static_cast<const float*>(w), k, x, k, &zero, y, m),
        "cublasSgemm");
  } else {
    // x rounded to the weights' type in `scratch` ([T, K] 16-bit).
    const int64_t count = T * K;
    const cudaDataType type = w_type == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
    if (w_type == DType::kBF16) {
      narrow_kernel<<<blocks_for(count, 256), 256, 0, s>>>(x, count, static_cast<__nv_bfloat16*>(scratch));
    } else {
      narrow_kernel<<<blocks_for(count, 256), 256, 0, s>>>(x, count, static_cast<__half*>(scratch));
    }
    HEARTH_CUDA_LAUNCHED("matmul: x to 16 bits");
    check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, type, k, scratch, type, k, &zero, y,
                              CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }
  if (bias != nullptr) {
    add_bias_kernel<<<blocks_for(T * N, 256), 256, 0, s>>>(y, bias, T, N);
    HEARTH_CUDA_LAUNCHED("matmul: bias");
  }
}

}  // namespace hearth::cuda
