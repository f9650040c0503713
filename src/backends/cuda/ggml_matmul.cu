// Matrices in ggml's k-quant blocks (GGUF Q4_K and Q6_K; core/ggml_blocks.h has the layouts):
// packed [N, row_bytes] u8. Q4_0 and Q8_0 never get here: the loader repacks them as symmetric
// affine codes (quant_matmul.cu).
//
// Q4_K decode rows (T <= 8) take integer dots: x rounded to int8 per 32 values (a Q4_K
// sub-block; prepared_x.cuh), then per 16 bytes of codes (half of each of two sub-blocks: the
// low nibbles of bytes 32c..32c+31 are sub-block 2c, the high ones 2c+1) 8 dp4a and one float
// step per sub-block: d * scale * dx * isum, and - dmin * min * sum(x) once per sub-block. Q6_K
// decode rows too, with the same x: a lane takes 16 values (one sub-block of one scale), builds
// their 6-bit codes minus 32 as signed bytes from 16 bytes of ql and 16 of qh, and adds
// d * scale * dx * isum (4 dp4a). Q6_K blocks are 210 bytes, so those 16 bytes may start
// 2 bytes off a word: they are read as five aligned words and shifted. Up to kQuantGemmRows rows
// (batched decode) take the integer kernels 8 rows at a time; prefill dequantizes the matrix to
// bf16 and takes the dense GEMM; embedding rows are decoded exactly as the CPU
// reference computes them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/loads.cuh"
#include "backends/cuda/prepared_x.cuh"
#include "backends/cuda/reduce.cuh"
#include "backends/cuda/table_rows.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ inline float load_f16(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K block from its 12 scale bytes, byte(i)
// reading byte i.
template <typename Byte>
__device__ inline void q4_k_scale_min(Byte byte, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = byte(j) & 63;
    *m = byte(j + 4) & 63;
  } else {
    *sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
    *m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

// Element i (0..255) of a Q4_K block: d * scale * nibble - dmin * min, rounded as the CPU does.
__device__ inline float q4_k_element(const uint8_t* block, int i) {
  const float d = load_f16(block), dmin = load_f16(block + 2);
  const uint8_t* s = block + 4;
  const int c = i / 64, l = i % 32, high = (i % 64) >= 32;
  int sc, m;
  q4_k_scale_min([s](int i) { return static_cast<int>(s[i]); }, 2 * c + high, &sc, &m);
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

// Byte i (0..11) of a Q4_K block's scales, from its 16-byte head held in registers (a computed
// index into a byte array there would put the head in local memory).
__device__ inline int scale_byte(const uint4& head, int i) {
  const uint32_t word = i < 4 ? head.y : (i < 8 ? head.z : head.w);
  return static_cast<int>((word >> (8 * (i % 4))) & 0xFFu);
}

// Row n of y for each of the kT rows of x: the warp's sum of acc, plus the bias.
template <int kT>
__device__ inline void store_rows(const float (&acc)[kT], int lane, int64_t n, int64_t N, const float* bias, float* y) {
  for (int t = 0; t < kT; ++t) {
    const float total = warp_sum(acc[t]);
    if (lane == 0) y[t * N + n] = total + (bias != nullptr ? bias[n] : 0.0f);
  }
}

// One warp per row; lane by lane over the row's 16-byte pieces of codes (8 per 144-byte block:
// piece p = 2c + h holds bytes 32c + 16h .. + 15 of qs), four in flight, each with its block's
// 16-byte head (d, dmin, scales).
template <int kT>
__global__ void q4_k_dp4a_kernel(GgmlArgs w, PreparedX x, const float* bias, float* y) {
  constexpr int kUnroll = 4;
  constexpr uint32_t kLow = 0x0F0F0F0Fu;
  const int64_t n = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int K = static_cast<int>(w.K), pieces = K / 256 * 8, G = K / 32;
  const uint8_t* row = w.blocks + n * w.row_bytes;
  if (n < w.N) prefetch_row_head(row, w.row_bytes, lane);  // while the previous kernel finishes
  wait_for_previous();
  if (n >= w.N) return;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int v0 = lane; v0 < pieces; v0 += 32 * kUnroll) {
    uint4 codes[kUnroll], head[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = min(v0 + 32 * u, pieces - 1);
      const uint8_t* block = row + (v / 8) * 144;
      head[u] = load_stream(block);
      codes[u] = load_stream(block + 16 + (v % 8) * 16);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + 32 * u;
      if (v >= pieces) break;
      const int b = v / 8, c = (v % 8) / 2, h = v % 2;
      const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(head[u].x & 0xFFFFu)));
      const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(head[u].x >> 16)));
      int sc_lo, m_lo, sc_hi, m_hi;
      const uint4 scales = head[u];
      const auto byte = [scales](int i) { return scale_byte(scales, i); };
      q4_k_scale_min(byte, 2 * c, &sc_lo, &m_lo);
      q4_k_scale_min(byte, 2 * c + 1, &sc_hi, &m_hi);
      const int k_lo = b * 256 + c * 64 + 16 * h, sub_lo = b * 8 + 2 * c;  // k_hi = k_lo + 32
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int4 xa = *reinterpret_cast<const int4*>(x.q + t * K + k_lo);
        const int4 xb = *reinterpret_cast<const int4*>(x.q + t * K + k_lo + 32);
        const uint4& q = codes[u];
        int lo = __dp4a(static_cast<int>(q.x & kLow), xa.x, 0);
        lo = __dp4a(static_cast<int>(q.y & kLow), xa.y, lo);
        lo = __dp4a(static_cast<int>(q.z & kLow), xa.z, lo);
        lo = __dp4a(static_cast<int>(q.w & kLow), xa.w, lo);
        int hi = __dp4a(static_cast<int>((q.x >> 4) & kLow), xb.x, 0);
        hi = __dp4a(static_cast<int>((q.y >> 4) & kLow), xb.y, hi);
        hi = __dp4a(static_cast<int>((q.z >> 4) & kLow), xb.z, hi);
        hi = __dp4a(static_cast<int>((q.w >> 4) & kLow), xb.w, hi);
        const float* dx = x.dx + t * G + sub_lo;
        float part = d * (static_cast<float>(sc_lo) * dx[0] * static_cast<float>(lo) +
                          static_cast<float>(sc_hi) * dx[1] * static_cast<float>(hi));
        if (h == 0) {  // each sub-block's min term once, with its first half
          const float* sum = x.sum + t * G + sub_lo;
          part -= dmin * (static_cast<float>(m_lo) * sum[0] + static_cast<float>(m_hi) * sum[1]);
        }
        acc[t] += part;
      }
    }
  }
  store_rows<kT>(acc, lane, n, w.N, bias, y);
}

// The 16 bytes at p, which is 2-byte aligned, as four words (five aligned loads, shifted).
__device__ inline uint4 load16_from_halfwords(const uint8_t* p) {
  const auto* w = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  const uint32_t a = __ldg(w), b = __ldg(w + 1), c = __ldg(w + 2), d = __ldg(w + 3), e = __ldg(w + 4);
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return make_uint4(a, b, c, d);
  return make_uint4(__funnelshift_r(a, b, 16), __funnelshift_r(b, c, 16), __funnelshift_r(c, d, 16),
                    __funnelshift_r(d, e, 16));
}

// Four Q6_K codes minus 32 as signed bytes: low nibbles (or high, shift 4) of ql, bits 2g..2g+1 of
// qh on top.
__device__ inline int q6_k_codes(uint32_t ql, uint32_t qh, int low_shift, int high_shift) {
  const uint32_t q = ((ql >> low_shift) & 0x0F0F0F0Fu) | (((qh >> high_shift) & 0x03030303u) << 4);
  return static_cast<int>(__vsub4(q, 0x20202020u));
}

// One warp per row; lane by lane over the row's sub-blocks of 16 values (16 per 210-byte block:
// sub-block u holds values 16u..16u+15, i.e. half u / 8, group g = (u % 8) / 2, half-group u % 2;
// its codes are ql[64 half + 32 (g & 1) + 16 (u % 2) ..] (high nibbles for g >= 2) and
// qh[32 half + 16 (u % 2) ..] (bits 2g), its scale is scales[u]), four in flight.
template <int kT>
__global__ void q6_k_dp4a_kernel(GgmlArgs w, PreparedX x, const float* bias, float* y) {
  constexpr int kUnroll = 4;
  const int64_t n = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int K = static_cast<int>(w.K), subs = K / 16, G = K / 32;
  const uint8_t* row = w.blocks + n * w.row_bytes;
  if (n < w.N) prefetch_row_head(row, w.row_bytes, lane);  // while the previous kernel finishes
  wait_for_previous();
  if (n >= w.N) return;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int v0 = lane; v0 < subs; v0 += 32 * kUnroll) {
    uint4 ql[kUnroll], qh[kUnroll];
    float scale[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = min(v0 + 32 * u, subs - 1), sub = v % 16, half = sub / 8, g = (sub % 8) / 2;
      const uint8_t* block = row + (v / 16) * 210;
      ql[u] = load16_from_halfwords(block + 64 * half + 32 * (g & 1) + 16 * (sub % 2));
      qh[u] = load16_from_halfwords(block + 128 + 32 * half + 16 * (sub % 2));
      const float d = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(block + 208)));
      scale[u] = d * static_cast<float>(static_cast<int8_t>(block[192 + sub]));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + 32 * u;
      if (v >= subs) break;
      const int g = (v % 16 % 8) / 2, low_shift = g >= 2 ? 4 : 0, high_shift = 2 * g;
      const int c0 = q6_k_codes(ql[u].x, qh[u].x, low_shift, high_shift);
      const int c1 = q6_k_codes(ql[u].y, qh[u].y, low_shift, high_shift);
      const int c2 = q6_k_codes(ql[u].z, qh[u].z, low_shift, high_shift);
      const int c3 = q6_k_codes(ql[u].w, qh[u].w, low_shift, high_shift);
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int4 xq = *reinterpret_cast<const int4*>(x.q + t * K + 16 * v);
        const int isum = __dp4a(c3, xq.w, __dp4a(c2, xq.z, __dp4a(c1, xq.y, __dp4a(c0, xq.x, 0))));
        acc[t] += scale[u] * x.dx[t * G + v / 2] * static_cast<float>(isum);
      }
    }
  }
  store_rows<kT>(acc, lane, n, w.N, bias, y);
}

// The integer kernel of w's type, after x rounded to int8 per 32 values.
template <int kT>
void k_quant_dp4a(cudaStream_t s, const GgmlArgs& w, const float* x, int64_t T, const float* bias, float* y,
                  void* scratch) {
  const PreparedX px = prepare_x<8>(s, XSource{x}, T, w.K, 32, scratch);
  launch_kernel(w.type == GgmlType::kQ4_K ? q4_k_dp4a_kernel<kT> : q6_k_dp4a_kernel<kT>,
                blocks_for(w.N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, w, px, bias, y);
}

template <int kT>
__global__ void matvec_kernel(GgmlArgs w, const float* x, const float* bias, float* y) {
  wait_for_previous();
  const int64_t n = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= w.N) return;
  float acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t k = lane; k < w.K; k += 32) {
    const float wk = element(w, n, k);
    for (int t = 0; t < kT; ++t) acc[t] += x[t * w.K + k] * wk;
  }
  store_rows<kT>(acc, lane, n, w.N, bias, y);
}

template <int kT>
void matvec(cudaStream_t s, const GgmlArgs& w, const float* x, const float* bias, float* y) {
  launch_kernel(matvec_kernel<kT>, blocks_for(w.N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, w, x, bias, y);
}

// Elements i..i+7 of a Q4_K block (i a multiple of 8: one sub-block, one scale and min), each
// as q4_k_element computes it, with the block's params read once.
__device__ inline void q4_k_elements8(const uint8_t* block, int i, float (&out)[8]) {
  const float d = load_f16(block), dmin = load_f16(block + 2);
  const uint8_t* s = block + 4;
  const int c = i / 64, l = i % 32, high = (i % 64) >= 32;
  int sc, m;
  q4_k_scale_min([s](int i) { return static_cast<int>(s[i]); }, 2 * c + high, &sc, &m);
  const float dsc = __fmul_rn(d, static_cast<float>(sc)), dm = __fmul_rn(dmin, static_cast<float>(m));
  // 8 code bytes, 8-byte aligned (blocks are 144 bytes from a 16-byte aligned row).
  const uint2 bytes = *reinterpret_cast<const uint2*>(block + 16 + c * 32 + l);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t byte = ((e < 4 ? bytes.x : bytes.y) >> (8 * (e % 4))) & 0xFFu;
    const float q = static_cast<float>(high ? byte >> 4 : byte & 0xF);
    out[e] = __fsub_rn(__fmul_rn(dsc, q), dm);
  }
}

// Elements i..i+7 of a Q6_K block (i a multiple of 8: one scale), each as q6_k_element computes
// it. Blocks are 210 bytes, so the bytes are read one by one.
__device__ inline void q6_k_elements8(const uint8_t* block, int i, float (&out)[8]) {
  const int half = i / 128, r = i % 128, g = r / 32, l = r % 32;
  const int8_t sc = static_cast<int8_t>(block[192 + half * 8 + l / 16 + 2 * g]);
  const float dsc = __fmul_rn(load_f16(block + 208), static_cast<float>(sc));
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint8_t lo = block[half * 64 + l + e + 32 * (g & 1)];
    const int low = g >= 2 ? lo >> 4 : lo & 0xF;
    const int high = (block[128 + half * 32 + l + e] >> (2 * g)) & 3;
    out[e] = __fmul_rn(dsc, static_cast<float>((low | (high << 4)) - 32));
  }
}

// The dense bf16 copy, 8 elements of row blockIdx.x per thread, each decoded as element() does
// and stored 16 bytes at a time (K is a multiple of 256). One element per thread read the
// block's params ~10 times per element: 290 us for a [14336, 4096] Q4_K matrix on the H200.
template <GgmlType kType>
__global__ void dequantize_kernel(GgmlArgs w, __nv_bfloat16* out) {
  wait_for_previous();
  const int64_t n = blockIdx.x, k = (blockIdx.y * 256LL + threadIdx.x) * 8;
  if (k >= w.K) return;
  constexpr int kBlockBytes = kType == GgmlType::kQ4_K ? 144 : 210;
  const uint8_t* block = w.blocks + n * w.row_bytes + (k / 256) * kBlockBytes;
  float v[8];
  if constexpr (kType == GgmlType::kQ4_K) {
    q4_k_elements8(block, static_cast<int>(k % 256), v);
  } else {
    q6_k_elements8(block, static_cast<int>(k % 256), v);
  }
  uint32_t pairs[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
    pairs[e] = *reinterpret_cast<const uint32_t*>(&p);
  }
  *reinterpret_cast<uint4*>(out + n * w.K + k) = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
}

// One element per thread (Q4_K rows that are not 16-byte aligned).
__global__ void dequantize_elements_kernel(GgmlArgs w, __nv_bfloat16* out) {
  wait_for_previous();
  const int64_t n = blockIdx.x, k = blockIdx.y * 256LL + threadIdx.x;
  if (k < w.K) out[n * w.K + k] = __float2bfloat16_rn(element(w, n, k));
}

struct GgmlElement {  // table_rows' element
  __device__ float operator()(const GgmlArgs& w, int64_t n, int64_t k) const { return element(w, n, k); }
};

}  // namespace

bool ggml_has_kernels(GgmlType type) { return type == GgmlType::kQ4_K || type == GgmlType::kQ6_K; }

void ggml_matmul(cudaStream_t s, int device, const float* x, int64_t T, const GgmlArgs& w, const float* bias, float* y,
                 void* scratch) {
  if (T == 0 || w.N == 0) return;
  // The Q4_K kernel reads 16-byte pieces: rows (144-byte blocks) start 16-byte aligned. The
  // Q6_K one reads words.
  const bool integer = w.type == GgmlType::kQ6_K || reinterpret_cast<uintptr_t>(w.blocks) % 16 == 0;
  if (T <= kMatvecRows && integer) {
    switch (T) {
      case 1: k_quant_dp4a<1>(s, w, x, T, bias, y, scratch); break;
      case 2: k_quant_dp4a<2>(s, w, x, T, bias, y, scratch); break;
      case 3: k_quant_dp4a<3>(s, w, x, T, bias, y, scratch); break;
      case 4: k_quant_dp4a<4>(s, w, x, T, bias, y, scratch); break;
      case 5: k_quant_dp4a<5>(s, w, x, T, bias, y, scratch); break;
      case 6: k_quant_dp4a<6>(s, w, x, T, bias, y, scratch); break;
      case 7: k_quant_dp4a<7>(s, w, x, T, bias, y, scratch); break;
      default: k_quant_dp4a<kMatvecRows>(s, w, x, T, bias, y, scratch); break;
    }
    return;
  }
  // A few more rows (batched decode): the integer kernels over chunks of kMatvecRows rows, each
  // chunk reading the matrix once: even four passes move less than the dense copy writes.
  if (T <= kQuantGemmRows && integer) {
    for (int64_t t0 = 0; t0 < T; t0 += kMatvecRows) {
      ggml_matmul(s, device, x + t0 * w.K, std::min<int64_t>(kMatvecRows, T - t0), w, bias, y + t0 * w.N, scratch);
    }
    return;
  }
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
    return;
  }
  auto* dense = static_cast<__nv_bfloat16*>(scratch);
  const dim3 grid(static_cast<unsigned>(w.N), blocks_for(w.K / 8, 256));
  if (w.type == GgmlType::kQ4_K && reinterpret_cast<uintptr_t>(w.blocks) % 16 == 0) {
    launch_kernel(dequantize_kernel<GgmlType::kQ4_K>, grid, 256, 0, s, w, dense);
  } else if (w.type == GgmlType::kQ6_K) {
    launch_kernel(dequantize_kernel<GgmlType::kQ6_K>, grid, 256, 0, s, w, dense);
  } else {
    launch_kernel(dequantize_elements_kernel, dim3(static_cast<unsigned>(w.N), blocks_for(w.K, 256)), 256, 0, s, w,
                  dense);
  }
  matmul(s, device, x, T, w.K, dense, DType::kBF16, w.N, bias, y, dense + w.N * w.K);
}

int64_t ggml_matmul_scratch_bytes(int64_t T, const GgmlArgs& w) {
  const bool integer = w.type == GgmlType::kQ6_K || reinterpret_cast<uintptr_t>(w.blocks) % 16 == 0;
  return quantized_scratch_bytes(T <= kQuantGemmRows && integer ? std::min<int64_t>(T, kMatvecRows) : T, w.N, w.K);
}

void ggml_rows(cudaStream_t s, const GgmlArgs& w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  if (T * w.K == 0) return;
  table_rows<GgmlElement>(s, w, ids, T, out, errors);
}

}  // namespace hearth::cuda
