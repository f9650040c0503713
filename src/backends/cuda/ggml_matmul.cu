// Matrices in ggml's k-quant blocks (GGUF Q4_K and Q6_K; core/ggml_blocks.h has the layouts):
// packed [N, row_bytes] u8. Q4_0 and Q8_0 never get here: the loader repacks them as symmetric
// affine codes (quant_matmul.cu).
//
// Each element is decoded on its own (its block's scales are read again from L1): decode
// (T <= 8) is one warp per row over the elements, prefill dequantizes the matrix to bf16 and
// takes the dense GEMM, embedding rows are decoded exactly as the CPU reference computes them.
// Correct, not yet fast.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/reduce.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ inline float load_f16(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

// Element i (0..255) of a Q4_K block: d * scale * nibble - dmin * min, rounded as the CPU does.
__device__ inline float q4_k_element(const uint8_t* block, int i) {
  const float d = load_f16(block), dmin = load_f16(block + 2);
  const uint8_t* s = block + 4;
  const int c = i / 64, l = i % 32, high = (i % 64) >= 32, j = 2 * c + high;
  int sc, m;
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
  const uint8_t byte = block[16 + c * 32 + l];
  const float q = static_cast<float>(high ? byte >> 4 : byte & 0xF);
  return __fsub_rn(__fmul_rn(__fmul_rn(d, static_cast<float>(sc)), q), __fmul_rn(dmin, static_cast<float>(m)));
}

// Element i of a Q6_K block: d * scale * (q - 32).
__device__ inline float q6_k_element(const uint8_t* block, int i) {
  const int half = i / 128, r = i % 128, g = r / 32, l = r % 32;
  const uint8_t lo = block[half * 64 + l + 32 * (g & 1)];
  const int low = g >= 2 ? lo >> 4 : lo & 0xF;
  const int high = (block[128 + half * 32 + l] >> (2 * g)) & 3;
  const int8_t sc = static_cast<int8_t>(block[192 + half * 8 + l / 16 + 2 * g]);
  const float d = load_f16(block + 208);
  return __fmul_rn(__fmul_rn(d, static_cast<float>(sc)), static_cast<float>((low | (high << 4)) - 32));
}

__device__ inline float element(const GgmlArgs& w, int64_t n, int64_t k) {
  const uint8_t* row = w.blocks + n * w.row_bytes;
  const int64_t b = k / 256;
  const int i = static_cast<int>(k % 256);
  return w.type == GgmlType::kQ4_K ? q4_k_element(row + b * 144, i) : q6_k_element(row + b * 210, i);
}

template <int kT>
__global__ void matvec_kernel(GgmlArgs w, const float* x, const float* bias, float* y) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= w.N) return;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t k = lane; k < w.K; k += 32) {
    const float wk = element(w, n, k);
    for (int t = 0; t < kT; ++t) acc[t] += x[t * w.K + k] * wk;
  }
  for (int t = 0; t < kT; ++t) {
    const float total = warp_sum(acc[t]);
    if (lane == 0) y[t * w.N + n] = total + (bias != nullptr ? bias[n] : 0.0f);
  }
}

template <int kT>
void matvec(cudaStream_t s, const GgmlArgs& w, const float* x, const float* bias, float* y) {
  matvec_kernel<kT><<<blocks_for(w.N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(w, x, bias, y);
}

__global__ void dequantize_kernel(GgmlArgs w, __nv_bfloat16* out) {
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i < w.N * w.K) out[i] = __float2bfloat16_rn(element(w, i / w.K, i % w.K));
}

__global__ void rows_kernel(GgmlArgs w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i >= T * w.K) return;
  const int64_t t = i / w.K, k = i % w.K;
  const int32_t id = ids[t];
  if (id < 0 || id >= w.N) {
    out[i] = 0.0f;
    if (k == 0) report_error(errors, kBadTokenId, id, static_cast<int32_t>(w.N));
    return;
  }
  out[i] = element(w, id, k);
}

}  // namespace

bool ggml_has_kernels(GgmlType type) { return type == GgmlType::kQ4_K || type == GgmlType::kQ6_K; }

void ggml_matmul(cudaStream_t s, int device, const float* x, int64_t T, const GgmlArgs& w, const float* bias, float* y,
                 void* scratch) {
  if (T == 0 || w.N == 0) return;
  if (T <= kMatvecRows) {
    switch (T) {
      case 1: matvec<1>(s, w, x, bias, y); break;
      case 2: matvec<2>(s, w, x, bias, y); break;
      case 3: matvec<3>(s, w, x, bias, y); break;
      case 4: matvec<4>(s, w, x, bias, y); break;
      case 5: matvec<5>(s, w, x, bias, y); break;
      case 6: matvec<6>(s, w, x, bias, y); break;
      case 7: matvec<7>(s, w, x, bias, y); break;
      default: matvec<kMatvecRows>(s, w, x, bias, y); break;
    }
    HEARTH_CUDA_LAUNCHED("ggml matvec");
    return;
  }
  auto* dense = static_cast<__nv_bfloat16*>(scratch);
  dequantize_kernel<<<blocks_for(w.N * w.K, 256), 256, 0, s>>>(w, dense);
  HEARTH_CUDA_LAUNCHED("ggml dequantize");
  matmul(s, device, x, T, w.K, dense, DType::kBF16, w.N, bias, y, dense + w.N * w.K);
}

void ggml_rows(cudaStream_t s, const GgmlArgs& w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  if (T * w.K == 0) return;
  rows_kernel<<<blocks_for(T * w.K, 256), 256, 0, s>>>(w, ids, T, out, errors);
  HEARTH_CUDA_LAUNCHED("ggml embedding rows");
}

}  // namespace hearth::cuda
