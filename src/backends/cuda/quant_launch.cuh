// What a launch of the 4/8-bit decode matvec kernels reads and writes (QuantLaunch), shared by
// the dp4a kernels (quant_matmul.cu) and the tensor-core ones (quant_matvec_mma.cu), with the
// helpers both use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels.h"
#include "backends/cuda/prepared_x.cuh"
#include "core/dtype.h"

namespace hearth::cuda {

// The matrices of one matvec launch (same K, width, group size and scale type) as its kernels
// index them: part j owns the launch's rows [first[j], first[j + 1]), and the firsts from n on
// equal the launch's row count, so a row's part is the number of later firsts it has reached.
// Each field is then one load at a computed index (an indexed constant-bank load), where choosing
// among whole parts by predicated copies took ~90 of a 4-bit row's ~580 instructions. Rows and
// parameters are indexed in 32 bits (dp4a_fits).
struct QuantLaunch {
  const uint4* codes[kMaxMatvecParts];  // [N, vecs] 16-byte loads of codes
  const void* scales[kMaxMatvecParts];  // [N, G]
  const void* biases[kMaxMatvecParts];  // [N, G], or null for symmetric codes
  const float* bias[kMaxMatvecParts];   // [N] or null
  float* y[kMaxMatvecParts];            // [T, N]
  uint32_t first[kMaxMatvecParts + 1];
  uint32_t tiles[kMaxMatvecParts + 1];  // the same in tiles of 16 rows (matvec_mma_kernel)
  uint32_t N[kMaxMatvecParts];
  uint32_t accumulate;  // bit j: part j adds to y
  uint32_t K, G;
  int group_shift;  // 16-byte loads of codes per group: 2^group_shift
  int n;
};

// Queues L's rows of x (px, T rows, 4 or 8 bits, scale_type parameters) on tensor cores where
// matvec_mma_kernel takes them (quant_matvec_mma.cu); false, with nothing queued, where not.
bool matvec_mma(cudaStream_t s, const QuantLaunch& L, const PreparedX& px, int64_t T, int bits, DType scale_type);

namespace {

// Row t of output n: the dot, plus the bias, plus y's old value where the part accumulates.
__device__ inline void store(float dot, const float* bias, float* y, int64_t t, int64_t N, int64_t n, bool accumulate) {
  const float out = dot + (bias != nullptr ? bias[n] : 0.0f);
  float& at = y[t * N + n];
  at = accumulate ? at + out : out;
}

// The 16-bit parameter (bf16 or f16) in the low bits of `bits`, widened.
template <typename S>
__device__ inline float widen_bits(uint32_t bits) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __uint_as_float(bits << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
}

}  // namespace
}  // namespace hearth::cuda
