// MLX affine quantized matrices (core/quant.h, rows layout): packed u32 [N, K * bits / 32], low
// bits first; scales and biases [N, K / group_size] f32|bf16|f16; w = scale * q + bias, or
// scale * (q - 2^(bits-1)) without biases (GGUF Q4_0/Q8_0 as loaded).
//
// Decode (T <= kMatvecRows), 4 and 8 bits: integer dot products, as the CPU's VNNI kernels
// (backends/cpu/quant_panels.cpp) and llama.cpp's CUDA kernels compute them. A first kernel
// rounds x to int8 per weight group (xq = rint(x / dx), dx = max|x| / 127, exactly as the CPU
// rounds it) and keeps each group's exact sum of x; then per group g of row n
//   sum_k x[k] (s q[k] + b) ~= s dx[g] sum_k q[k] xq[k] + b sum_k x[k],
// the integer sum taken by dp4a, four codes per instruction. One warp per row, each lane taking
// 16 bytes of codes at a time (32 4-bit or 16 8-bit codes, within one group), four loads in
// flight. For 4 bits a word's low nibbles (codes 0, 2, 4, 6) and high nibbles (1, 3, 5, 7) each
// meet four bytes of xq, which the first kernel stores in that order. Several matrices of one
// x (q, k, v; gate, up) share both launches. Other widths, and shapes that do not split into
// 16-byte loads, go per element in f32: correct, not fast.
// Prefill: the matrix is dequantized to bf16 in a scratch buffer, then the dense bf16 GEMM.
// Embedding rows: dequantized per element exactly as the CPU reference (no fused multiply-add).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/loads.cuh"
#include "backends/cuda/reduce.cuh"
#include "base/error.h"

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

// x as the integer kernel reads it (scratch): dx and sum per (row t, group) [T, G] f32, then xq
// [T, K] i8 from the next 16 bytes.
struct PreparedX {
  float* dx;
  float* sum;
  int8_t* q;
};
PreparedX prepared_x(void* scratch, int64_t T, int64_t K, int group_size) {
  float* f = static_cast<float*>(scratch);
  const int64_t TG = T * (K / group_size);
  return {f, f + TG, reinterpret_cast<int8_t*>(f + (2 * TG + 3) / 4 * 4)};  // xq 16-byte aligned
}

// Where element k of a row goes in xq: 4-bit words take each 8 codes' even then odd ones.
template <int kBits>
__device__ inline int64_t xq_index(int64_t k) {
  if constexpr (kBits == 4) {
    const int e = static_cast<int>(k % 8);
    return k - e + (e % 2 == 0 ? e / 2 : 4 + e / 2);
  } else {
    return k;
  }
}

// One warp per (row t, group g) of x: [T, K].
template <int kBits>
__global__ void prepare_x_kernel(const float* x, int64_t T, int64_t K, int group_size, PreparedX out) {
  const int64_t G = K / group_size, at = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (at >= T * G) return;
  const int64_t t = at / G, first = t * K + (at % G) * group_size;
  float m = 0.0f, sum = 0.0f;
  for (int k = lane; k < group_size; k += 32) {
    const float v = x[first + k];
    m = fmaxf(m, fabsf(v));
    sum += v;
  }
  m = warp_max(m);
  sum = warp_sum(sum);
  const float inv = m > 0.0f ? 127.0f / m : 0.0f;
  for (int k = lane; k < group_size; k += 32) {
    // Round to nearest even, as the CPU's conversion does (no fused multiply-add before it).
    out.q[first + xq_index<kBits>(k)] = static_cast<int8_t>(__float2int_rn(__fmul_rn(x[first + k], inv)));
  }
  if (lane == 0) {
    out.dx[at] = m / 127.0f;
    out.sum[at] = sum;
  }
}

// Row t of output n: the dot, plus the bias, plus y's old value where the part accumulates.
__device__ inline void store(const QuantPart& p, int64_t t, int64_t n, float dot) {
  const float out = dot + (p.bias != nullptr ? p.bias[n] : 0.0f);
  float& at = p.y[t * p.w.N + n];
  at = p.accumulate ? at + out : out;
}

// The matrices of one launch (same K, width, group size and scale type): part p owns the
// launch's rows [first[p], first[p + 1]).
struct QuantLaunch {
  QuantPart part[kMaxMatvecParts];
  int64_t first[kMaxMatvecParts + 1];
  int n;
};

// dp4a with unsigned bytes in a (8-bit codes 0..255) and signed bytes in b.
__device__ inline int dot4_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The integer dot of 16 bytes of codes with their xq (32 bytes for 4 bits, 16 for 8).
template <int kBits>
__device__ inline int dot16(const uint4& w, const int8_t* xq) {
  const int4 a = *reinterpret_cast<const int4*>(xq);
  if constexpr (kBits == 8) {
    return dot4_us(w.w, a.w, dot4_us(w.z, a.z, dot4_us(w.y, a.y, dot4_us(w.x, a.x, 0))));
  } else {
    const int4 b = *reinterpret_cast<const int4*>(xq + 16);
    constexpr uint32_t kLow = 0x0F0F0F0Fu;
    int d = __dp4a(static_cast<int>(w.x & kLow), a.x, 0);
    d = __dp4a(static_cast<int>((w.x >> 4) & kLow), a.y, d);
    d = __dp4a(static_cast<int>(w.y & kLow), a.z, d);
    d = __dp4a(static_cast<int>((w.y >> 4) & kLow), a.w, d);
    d = __dp4a(static_cast<int>(w.z & kLow), b.x, d);
    d = __dp4a(static_cast<int>((w.z >> 4) & kLow), b.y, d);
    d = __dp4a(static_cast<int>(w.w & kLow), b.z, d);
    return __dp4a(static_cast<int>((w.w >> 4) & kLow), b.w, d);
  }
}

// Index arithmetic in 32 bits and shifts (group sizes are powers of two): a 64-bit division per
// 16 bytes of codes would cost more than the dot itself.
template <int kBits, int kT>
__global__ void matvec_dp4a_kernel(QuantLaunch L, PreparedX x) {
  constexpr int kCodes = 128 / kBits;  // per 16-byte load
  constexpr int kUnroll = 4;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= L.first[L.n]) return;
  // The row's part, chosen with constant indices (a computed index into the kernel's parameters
  // would copy them all to local memory).
  QuantPart p = L.part[0];
  int64_t first = 0;
#pragma unroll
  for (int j = 1; j < kMaxMatvecParts; ++j) {
    if (j < L.n && r >= L.first[j]) {
      p = L.part[j];
      first = L.first[j];
    }
  }
  const QuantArgs& w = p.w;
  const int64_t n = r - first;
  const int K = static_cast<int>(w.K), G = K / w.group_size, vecs = K / kCodes;
  const int group_shift = __ffs(w.group_size / kCodes) - 1;  // 16-byte loads per group: 2^shift
  const uint4* row = reinterpret_cast<const uint4*>(w.packed) + n * vecs;
  const int64_t params_at = n * G;
  const float zero_point = -static_cast<float>(1 << (kBits - 1));
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + 32 * u;
      raw[u] = v < vecs ? load_stream(row + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + 32 * u;
      if (v >= vecs) break;
      const int g = v >> group_shift;
      const float s = param(w.scales, w.scale_type, params_at + g);
      // The group's bias term is added once, with its first 16 bytes.
      float b = 0.0f;
      if ((v & ((1 << group_shift) - 1)) == 0)
        b = w.biases != nullptr ? param(w.biases, w.scale_type, params_at + g) : zero_point * s;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int isum = dot16<kBits>(raw[u], x.q + t * K + v * kCodes);
        acc[t] += static_cast<float>(isum) * (s * x.dx[t * G + g]) + b * x.sum[t * G + g];
      }
    }
  }
  for (int t = 0; t < kT; ++t) {
    const float total = warp_sum(acc[t]);
    if (lane == 0) store(p, t, n, total);
  }
}

// Any width and shape: per element, in f32.
template <int kT>
__global__ void matvec_elements_kernel(QuantPart p, const float* x) {
  const QuantArgs& w = p.w;
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
    if (lane == 0) store(p, t, n, total);
  }
}

template <int kT>
void matvec_elements(cudaStream_t s, const QuantPart& p, const float* x) {
  matvec_elements_kernel<kT><<<blocks_for(p.w.N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(p, x);
}

template <int kBits>
void matvec_dp4a(cudaStream_t s, const float* x, int64_t T, const QuantLaunch& L, void* scratch) {
  const QuantArgs& w = L.part[0].w;
  const PreparedX px = prepared_x(scratch, T, w.K, w.group_size);
  const int64_t groups = T * (w.K / w.group_size);
  prepare_x_kernel<kBits>
      <<<blocks_for(groups, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(x, T, w.K, w.group_size, px);
  const unsigned blocks = blocks_for(L.first[L.n], kWarpsPerBlock), threads = kWarpsPerBlock * 32;
  switch (T) {
    case 1: matvec_dp4a_kernel<kBits, 1><<<blocks, threads, 0, s>>>(L, px); break;
    case 2: matvec_dp4a_kernel<kBits, 2><<<blocks, threads, 0, s>>>(L, px); break;
    case 3: matvec_dp4a_kernel<kBits, 3><<<blocks, threads, 0, s>>>(L, px); break;
    case 4: matvec_dp4a_kernel<kBits, 4><<<blocks, threads, 0, s>>>(L, px); break;
    case 5: matvec_dp4a_kernel<kBits, 5><<<blocks, threads, 0, s>>>(L, px); break;
    case 6: matvec_dp4a_kernel<kBits, 6><<<blocks, threads, 0, s>>>(L, px); break;
    case 7: matvec_dp4a_kernel<kBits, 7><<<blocks, threads, 0, s>>>(L, px); break;
    default: matvec_dp4a_kernel<kBits, kMatvecRows><<<blocks, threads, 0, s>>>(L, px); break;
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

// The integer kernels read 16 bytes of codes at a time, all within one group (of a power-of-two
// size), and index a row in 32 bits.
bool dp4a_fits(const QuantArgs& w) {
  const bool power_of_two = (w.group_size & (w.group_size - 1)) == 0;
  return (w.bits == 4 || w.bits == 8) && w.group_size >= 32 && power_of_two && w.K % 32 == 0 && w.K < (1 << 30) &&
         reinterpret_cast<uintptr_t>(w.packed) % 16 == 0;
}

}  // namespace

void quantized_matvec_group(cudaStream_t s, const float* x, int64_t T, const QuantPart* parts, int n, void* scratch) {
  HEARTH_CHECK(T >= 1 && T <= kMatvecRows && n >= 1 && n <= kMaxMatvecParts);
  const QuantArgs& w0 = parts[0].w;
  bool together = dp4a_fits(w0);
  for (int i = 1; i < n; ++i) {
    const QuantArgs& w = parts[i].w;
    together = together && dp4a_fits(w) && w.K == w0.K && w.bits == w0.bits && w.group_size == w0.group_size &&
               w.scale_type == w0.scale_type;
  }
  if (!together) {
    // One launch per matrix: the integer kernels where they fit, else per element.
    for (int i = 0; i < n; ++i) {
      const QuantPart& p = parts[i];
      if (dp4a_fits(p.w)) {
        quantized_matvec_group(s, x, T, &p, 1, scratch);
        continue;
      }
      switch (T) {
        case 1: matvec_elements<1>(s, p, x); break;
        case 2: matvec_elements<2>(s, p, x); break;
        case 3: matvec_elements<3>(s, p, x); break;
        case 4: matvec_elements<4>(s, p, x); break;
        case 5: matvec_elements<5>(s, p, x); break;
        case 6: matvec_elements<6>(s, p, x); break;
        case 7: matvec_elements<7>(s, p, x); break;
        default: matvec_elements<kMatvecRows>(s, p, x); break;
      }
      HEARTH_CUDA_LAUNCHED("quantized matvec");
    }
    return;
  }
  QuantLaunch L{};
  L.n = n;
  for (int i = 0; i < n; ++i) {
    L.part[i] = parts[i];
    L.first[i + 1] = L.first[i] + parts[i].w.N;
  }
  if (L.first[n] == 0) return;
  if (w0.bits == 4) {
    matvec_dp4a<4>(s, x, T, L, scratch);
  } else {
    matvec_dp4a<8>(s, x, T, L, scratch);
  }
  HEARTH_CUDA_LAUNCHED("quantized matvec");
}

void quantized_matmul(cudaStream_t s, int device, const float* x, int64_t T, const QuantArgs& w, const float* bias,
                      float* y, void* scratch) {
  if (T == 0 || w.N == 0) return;
  if (T <= kMatvecRows) {
    const QuantPart part{w, bias, y};
    return quantized_matvec_group(s, x, T, &part, 1, scratch);
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
