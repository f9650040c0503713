// MLX affine quantized matrices (core/quant.h, rows layout): packed u32 [N, K * bits / 32], low
// bits first; scales and biases [N, K / group_size] f32|bf16|f16; w = scale * q + bias, or
// scale * (q - 2^(bits-1)) without biases (GGUF Q4_0/Q8_0 as loaded).
//
// Decode (T <= kMatvecRows): for 2, 4 and 8 bits a u32 word holds whole codes of one group; 8
// lanes share a row (4 rows per warp), each taking 16 bytes (4 words) at a time and summing
// x * q and x over each word before one scale-and-bias step per word. 3, 5 and 6 bits (codes across words)
// take a per-element path: correct, not fast.
// Prefill: the matrix is dequantized to bf16 in a scratch buffer, then the dense bf16 GEMM.
// Embedding rows: dequantized per element exactly as the CPU reference (no fused multiply-add).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/reduce.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ inline float param(const void* p, DType t, int64_t i) {
  if (t == DType::kF32) return static_cast<const float*>(p)[i];
  if (t == DType::kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return __half2float(static_cast<const __half*>(p)[i]);
}

// The scale and bias of (row n, group g).
__device__ inline void group_params(const QuantArgs& w, int64_t n, int64_t g, float* s, float* b) {
  const int64_t at = n * (w.K / w.group_size) + g;
  *s = param(w.scales, w.scale_type, at);
  *b = w.biases != nullptr ? param(w.biases, w.scale_type, at) : -static_cast<float>(1 << (w.bits - 1)) * *s;
}

// Element k of a packed row (any width; a code may span two words).
__device__ inline uint32_t code_at(const uint32_t* row, int64_t k, int bits) {
  const uint64_t bit = static_cast<uint64_t>(k) * bits;
  const uint64_t word = bit >> 5, shift = bit & 31;
  uint64_t v = row[word] >> shift;
  if (shift + bits > 32) v |= static_cast<uint64_t>(row[word + 1]) << (32 - shift);
  return static_cast<uint32_t>(v & ((1u << bits) - 1u));
}

// Adds word `wi` of row n (codes k0 .. k0 + 32 / kBits) to acc[t] for every x row.
template <int kBits, int kT>
__device__ inline void add_word(const QuantArgs& w, const float* x, int64_t n, int64_t wi, uint32_t word, float* acc) {
  constexpr int kCodes = 32 / kBits;
  const int64_t k0 = wi * kCodes;
  float s, b;
  group_params(w, n, k0 / w.group_size, &s, &b);
  for (int t = 0; t < kT; ++t) {
    const float* xt = x + t * w.K + k0;
    float dot = 0.0f, sum = 0.0f;
#pragma unroll
    for (int e = 0; e < kCodes; ++e) {
      const float q = static_cast<float>((word >> (kBits * e)) & ((1u << kBits) - 1u));
      dot += xt[e] * q;
      sum += xt[e];
    }
    acc[t] += s * dot + b * sum;
  }
}

// kLanes lanes per row, 32 / kLanes rows per warp: a 4-bit row of 2048 is only 64 16-byte loads,
// too few for a whole warp to keep enough of them in flight.
constexpr int kLanes = 8;

template <int kBits, int kT>
__global__ void matvec_words_kernel(QuantArgs w, const float* x, const float* bias, float* y) {
  constexpr int kRowsPerWarp = 32 / kLanes;
  const int lane = threadIdx.x % 32, sub = lane % kLanes;
  const int64_t n =
      (blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32) * kRowsPerWarp + lane / kLanes;
  const bool valid = n < w.N;  // rows past N still take part in the shuffles below
  const int64_t words = w.K * kBits / 32;
  const uint32_t* row = w.packed + (valid ? n : 0) * words;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  if (valid && words % 4 == 0 && reinterpret_cast<uintptr_t>(w.packed) % 16 == 0) {
    const uint4* vrow = reinterpret_cast<const uint4*>(row);
    for (int64_t v = sub; v < words / 4; v += kLanes) {
      const uint4 q = __ldg(vrow + v);
      add_word<kBits, kT>(w, x, n, 4 * v, q.x, acc);
      add_word<kBits, kT>(w, x, n, 4 * v + 1, q.y, acc);
      add_word<kBits, kT>(w, x, n, 4 * v + 2, q.z, acc);
      add_word<kBits, kT>(w, x, n, 4 * v + 3, q.w, acc);
    }
  } else if (valid) {
    for (int64_t wi = sub; wi < words; wi += kLanes) add_word<kBits, kT>(w, x, n, wi, __ldg(row + wi), acc);
  }
  for (int t = 0; t < kT; ++t) {
    float total = acc[t];
    for (int o = kLanes / 2; o > 0; o /= 2) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (valid && sub == 0) y[t * w.N + n] = total + (bias != nullptr ? bias[n] : 0.0f);
  }
}

// Any width: per element.
template <int kT>
__global__ void matvec_elements_kernel(QuantArgs w, const float* x, const float* bias, float* y) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= w.N) return;
  const uint32_t* row = w.packed + n * (w.K * w.bits / 32);
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t k = lane; k < w.K; k += 32) {
    float s, b;
    group_params(w, n, k / w.group_size, &s, &b);
    const float wk = s * static_cast<float>(code_at(row, k, w.bits)) + b;
    for (int t = 0; t < kT; ++t) acc[t] += x[t * w.K + k] * wk;
  }
  for (int t = 0; t < kT; ++t) {
    const float total = warp_sum(acc[t]);
    if (lane == 0) y[t * w.N + n] = total + (bias != nullptr ? bias[n] : 0.0f);
  }
}

template <int kT>
void matvec(cudaStream_t s, const QuantArgs& w, const float* x, const float* bias, float* y) {
  const unsigned threads = kWarpsPerBlock * 32;
  const unsigned word_blocks = blocks_for(w.N, kWarpsPerBlock * (32 / kLanes));
  switch (w.bits) {
    case 2: matvec_words_kernel<2, kT><<<word_blocks, threads, 0, s>>>(w, x, bias, y); break;
    case 4: matvec_words_kernel<4, kT><<<word_blocks, threads, 0, s>>>(w, x, bias, y); break;
    case 8: matvec_words_kernel<8, kT><<<word_blocks, threads, 0, s>>>(w, x, bias, y); break;
    default: matvec_elements_kernel<kT><<<blocks_for(w.N, kWarpsPerBlock), threads, 0, s>>>(w, x, bias, y); break;
  }
}

// Element (n, k) of the dense matrix, exactly as the CPU reference: s * q + b, two roundings.
__device__ inline float dequantized(const QuantArgs& w, int64_t n, int64_t k) {
  float s, b;
  group_params(w, n, k / w.group_size, &s, &b);
  const uint32_t* row = w.packed + n * (w.K * w.bits / 32);
  return __fadd_rn(__fmul_rn(s, static_cast<float>(code_at(row, k, w.bits))), b);
}

__global__ void dequantize_kernel(QuantArgs w, __nv_bfloat16* out) {
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i < w.N * w.K) out[i] = __float2bfloat16_rn(dequantized(w, i / w.K, i % w.K));
}

__global__ void rows_kernel(QuantArgs w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i >= T * w.K) return;
  const int64_t t = i / w.K, k = i % w.K;
  const int32_t id = ids[t];
  if (id < 0 || id >= w.N) {
    out[i] = 0.0f;
    if (k == 0) report_error(errors, kBadTokenId, id, static_cast<int32_t>(w.N));
    return;
  }
  out[i] = dequantized(w, id, k);
}

}  // namespace

void quantized_matmul(cudaStream_t s, int device, const float* x, int64_t T, const QuantArgs& w, const float* bias,
                      float* y, void* scratch) {
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
      default: matvec<8>(s, w, x, bias, y); break;
    }
    HEARTH_CUDA_LAUNCHED("quantized matvec");
    return;
  }
  // scratch: the dense bf16 matrix [N, K], then x in bf16 [T, K] (matmul's own scratch).
  auto* dense = static_cast<__nv_bfloat16*>(scratch);
  dequantize_kernel<<<blocks_for(w.N * w.K, 256), 256, 0, s>>>(w, dense);
  HEARTH_CUDA_LAUNCHED("dequantize");
  matmul(s, device, x, T, w.K, dense, DType::kBF16, w.N, bias, y, dense + w.N * w.K);
}

void quantized_rows(cudaStream_t s, const QuantArgs& w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  if (T * w.K == 0) return;
  rows_kernel<<<blocks_for(T * w.K, 256), 256, 0, s>>>(w, ids, T, out, errors);
  HEARTH_CUDA_LAUNCHED("quantized_embedding");
}

}  // namespace hearth::cuda
