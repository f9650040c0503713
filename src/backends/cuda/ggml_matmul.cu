// Matrices in ggml's k-quant blocks (GGUF Q4_K and Q6_K; core/ggml_blocks.h has the layouts):
// packed [N, row_bytes] u8. Q4_0 and Q8_0 never get here: the loader repacks them as symmetric
// affine codes (quant_matmul.cu).
//
// Decode rows (T <= 8) run on tensor cores (q4_k_mma_kernel, q6_k_mma_kernel; HEARTH_CUDA_MV_MMA=0
// keeps the dp4a kernels below), with the same x and the same integer sums per sub-block; at one
// row only Q4_K matrices with N <= K do, where that is faster (q4_k_mma_takes, q6_k_mma_takes).
// Q4_K decode rows (T <= 8) take integer dots: x rounded to int8 per 32 values (a Q4_K
// sub-block; prepared_x.cuh), then per 16 bytes of codes (half of each of two sub-blocks: the
// low nibbles of bytes 32c..32c+31 are sub-block 2c, the high ones 2c+1) 8 dp4a and one float
// step per sub-block: d * scale * dx * isum, and - dmin * min * sum(x) once per sub-block. Q6_K
// decode rows too, with the same x: a lane takes 16 values (one sub-block of one scale), builds
// their 6-bit codes minus 32 as signed bytes from 16 bytes of ql and 16 of qh, and adds
// d * scale * dx * isum (4 dp4a). Q6_K blocks are 210 bytes, so those 16 bytes may start
// 2 bytes off a word: they are read as four or five aligned words and shifted. Up to kQuantGemmRows rows
// (batched decode) take the integer kernels 8 rows at a time; prefill dequantizes the matrix to
// bf16 and takes the dense GEMM; embedding rows are decoded exactly as the CPU
// reference computes them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/loads.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/prepared_x.cuh"
#include "backends/cuda/reduce.cuh"
#include "backends/cuda/table_rows.cuh"
#include "base/knobs.h"

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
  wait_for_previous(__func__);
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

// The 16 bytes at p, which is 2-byte aligned, as four words (four or five aligned loads, shifted;
// nothing past p + 16 is read).
__device__ inline uint4 load16_from_halfwords(const uint8_t* p) {
  const auto* w = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  const bool aligned = (reinterpret_cast<uintptr_t>(p) & 3) == 0;
  const uint32_t a = __ldg(w), b = __ldg(w + 1), c = __ldg(w + 2), d = __ldg(w + 3), e = aligned ? 0u : __ldg(w + 4);
  if (aligned) return make_uint4(a, b, c, d);
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
  wait_for_previous(__func__);
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

// Q4_K decode rows on tensor cores (as quant_matvec_mma.cu does for MLX affine codes): mma
// m16n8k32 with 16 weight rows as A (nibbles as u8) and xq as B (s8). Lane (g, t) loads 16 bytes
// of qs per row, bytes 64s + 16t.. of a block's segment s (0, 1): low nibbles are values of
// sub-block 4s + 2 (t / 2), high nibbles of sub-block 4s + 2 (t / 2) + 1, so an mma's k spans the
// segment's four sub-blocks. B column 4u + q carries token u's xq only where the lane's nibbles
// are sub-block 4s + q (b0 for low, b1 for high), and C column 2t + i is then token 2p + t / 2's
// exact integer sum over sub-block 4s + 2 (t % 2) + i: two tokens per pass, and lanes t, t ^ 1
// hold the four sub-blocks of one token. A block of 8 warps takes 16 rows, warp w the pairs of
// Q4_K blocks w, w + 8, ...; the warps' sums meet in shared memory in a fixed order.

// Sub-block j's 6-bit scale and min from a block's 16-byte head (j a constant after unrolling).
__device__ inline void head_scale_min(const uint4& head, int j, float* sc, float* m) {
  int s, mn;
  q4_k_scale_min([&head](int i) { return scale_byte(head, i); }, j, &s, &mn);
  *sc = static_cast<float>(s);
  *m = static_cast<float>(mn);
}

// Unit `unit` (of `bytes` bytes) of each of the two rows into L2, lane t asking for its 128-byte
// line t of each: what a k-quant tensor-core warp reads first, asked for before its wait.
__device__ inline void prefetch_unit(const uint8_t* const (&rows)[2], int unit, int t, uint32_t bytes) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint8_t* from = rows[r] + unit * bytes;
    const uintptr_t line = (reinterpret_cast<uintptr_t>(from) & ~uintptr_t{127}) + 128 * t;
    if (line < reinterpret_cast<uintptr_t>(from + bytes)) prefetch_line(line);
  }
}

// The end of the k-quant tensor-core kernels: lane (warp, lane)'s sums acc[p][r] (token
// 2p + t / 2, rows n0 + g and n0 + g + 8, over two of the sub-blocks) added to lane t ^ 1's, which
// holds the token's other two, the block's warps' sums met in `partial` in a fixed order, and each
// (token, row) of y stored once, with its bias.
template <int kPasses>
__device__ inline void store_k_quant_tile(float (&partial)[kMmaWarps][2 * kPasses][32], const float (&acc)[kPasses][2],
                                          uint32_t n0, uint32_t N, uint32_t T, const float* bias, float* y) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float v = acc[p][r];
      partial[warp][2 * p + r][lane] = v + __shfl_xor_sync(0xffffffffu, v, 1);
    }
  }
  __syncthreads();
  if (warp < 2 * kPasses) {
    float total = 0.0f;
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) total += partial[v][warp][lane];
    const int p = warp / 2, r = warp % 2;
    const uint32_t tok = 2 * p + t / 2, n = n0 + g + 8 * r;
    if (t % 2 == 0 && tok < T && n < N) y[tok * N + n] = total + (bias != nullptr ? bias[n] : 0.0f);
  }
}

template <int kPasses>
__global__ void __launch_bounds__(kMmaWarps * 32, 2)
    q4_k_mma_kernel(GgmlArgs w, PreparedX x, const float* bias, float* y, uint32_t T) {
  constexpr uint32_t kLow = 0x0F0F0F0Fu;
  __shared__ float partial[kMmaWarps][2 * kPasses][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const uint32_t N = static_cast<uint32_t>(w.N), K = static_cast<uint32_t>(w.K), G = K / 32, n0 = blockIdx.x * 16;
  const uint32_t pairs = K / 512;  // of Q4_K blocks
  const uint8_t* rows[2] = {w.blocks + min(n0 + g, N - 1) * w.row_bytes,
                            w.blocks + min(n0 + g + 8, N - 1) * w.row_bytes};
  // The warp's first pair of blocks (288 bytes, up to 4 lines of each row) into L2.
  if (static_cast<uint32_t>(warp) < pairs) prefetch_unit(rows, warp, t, 288);
  wait_for_previous(__func__);
  // Whether the lane's B column (g) takes its low or its high nibbles' k: sub-block 4s + g % 4.
  const bool low_on = g % 4 == 2 * (t / 2), high_on = g % 4 == 2 * (t / 2) + 1;
  float acc[kPasses][2];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) acc[p][0] = acc[p][1] = 0.0f;
  for (uint32_t c = warp; c < pairs; c += kMmaWarps) {
    uint4 head[2][2], q[2][2][2];  // [row][block][segment]
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const uint8_t* block = rows[r] + (2 * c + b) * 144;
        head[r][b] = load_stream(block);
        q[r][b][0] = load_stream(block + 16 + 16 * t);
        q[r][b][1] = load_stream(block + 16 + 64 + 16 * t);
      }
    }
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint32_t kb = (2 * c + b) * 256;  // the block's first k
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        // The lane's 16 values of each nibble half: k = kb + 128 s + 64 (t / 2) + 16 (t % 2) + 0..15,
        // and + 32 for the high nibbles.
        const uint32_t k_low = kb + 128 * s + 64 * (t / 2) + 16 * (t % 2);
        // d * scale and dmin * min of the lane's C columns' sub-blocks 4s + 2 (t % 2) + i, per row.
        float dsc[2][2], dm[2][2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint4& h = head[r][b];
          const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x & 0xFFFFu)));
          const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x >> 16)));
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            float sc0, m0, sc1, m1;
            head_scale_min(h, 4 * s + i, &sc0, &m0);
            head_scale_min(h, 4 * s + 2 + i, &sc1, &m1);
            const bool odd = t % 2 != 0;
            dsc[r][i] = d * (odd ? sc1 : sc0);
            dm[r][i] = dmin * (odd ? m1 : m0);
          }
        }
#pragma unroll
        for (int p = 0; p < kPasses; ++p) {
          const uint32_t u = 2 * p + g / 4;
          int4 xl = make_int4(0, 0, 0, 0), xh = xl;
          if (u < T) {
            if (low_on) xl = *reinterpret_cast<const int4*>(x.q + u * K + k_low);
            if (high_on) xh = *reinterpret_cast<const int4*>(x.q + u * K + k_low + 32);
          }
          const uint4& qa = q[0][b][s];
          const uint4& qb = q[1][b][s];
          const uint32_t wa[4] = {qa.x, qa.y, qa.z, qa.w}, wb[4] = {qb.x, qb.y, qb.z, qb.w};
          const int xlw[4] = {xl.x, xl.y, xl.z, xl.w}, xhw[4] = {xh.x, xh.y, xh.z, xh.w};
          int sum4[4] = {0, 0, 0, 0};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            mma_u8s8(sum4, wa[i] & kLow, wb[i] & kLow, (wa[i] >> 4) & kLow, (wb[i] >> 4) & kLow, xlw[i], xhw[i]);
          }
          // sum4: rows g (0, 1) and g + 8 (2, 3) of token 2p + t / 2, sub-blocks 4s + 2 (t % 2) + i.
          const uint32_t tok = min(2 * p + t / 2, T - 1);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint32_t sub = kb / 32 + 4 * s + 2 * (t % 2) + i;
            const float dx = x.dx[tok * G + sub], xsum = x.sum[tok * G + sub];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              acc[p][r] += dsc[r][i] * dx * static_cast<float>(sum4[2 * r + i]) - dm[r][i] * xsum;
            }
          }
        }
      }
    }
  }
  store_k_quant_tile<kPasses>(partial, acc, n0, N, T, bias, y);
}

// Q6_K decode rows on tensor cores, as q4_k_mma_kernel: A = 16 rows' codes minus 32 (s8, built as
// q6_k_dp4a_kernel builds them), B = xq. Lane t of segment s (values 64s.. of a block) takes
// sub-block 4s + t (16 values, one scale), so B column 4u + q carries token u's xq on lane q only,
// and C column 2t + i is token 2p + t / 2's exact sum over sub-block 4s + 2 (t % 2) + i. A block of
// 8 warps takes 16 rows, warp w the Q6_K blocks w, w + 8, ...
template <int kPasses>
__global__ void __launch_bounds__(kMmaWarps * 32, 2)
    q6_k_mma_kernel(GgmlArgs w, PreparedX x, const float* bias, float* y, uint32_t T) {
  __shared__ float partial[kMmaWarps][2 * kPasses][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const uint32_t N = static_cast<uint32_t>(w.N), K = static_cast<uint32_t>(w.K), G = K / 32, n0 = blockIdx.x * 16;
  const uint32_t blocks = K / 256;
  const uint8_t* rows[2] = {w.blocks + min(n0 + g, N - 1) * w.row_bytes,
                            w.blocks + min(n0 + g + 8, N - 1) * w.row_bytes};
  // The warp's first block (210 bytes, up to 3 lines of each row) into L2.
  if (static_cast<uint32_t>(warp) < blocks) prefetch_unit(rows, warp, t, 210);
  wait_for_previous(__func__);
  const bool my_part = g % 4 == t;  // B column g is sub-block 4s + g % 4 of token g / 4
  float acc[kPasses][2];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) acc[p][0] = acc[p][1] = 0.0f;
  for (uint32_t b = warp; b < blocks; b += kMmaWarps) {
    const uint8_t* block[2] = {rows[0] + b * 210, rows[1] + b * 210};
    uint4 scales[2];
    float d[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      scales[r] = load16_from_halfwords(block[r] + 192);
      d[r] = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(block[r] + 208)));
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      // The lane's sub-block 4s + t: half s / 2, group 2 (s % 2) + t / 2 of that half, its 16 values
      // 16 (t % 2)..: low 4 bits from ql (high nibbles for groups 2, 3), high 2 from qh.
      const int group = 2 * (s % 2) + t / 2;
      uint32_t codes[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint4 ql = load16_from_halfwords(block[r] + 64 * (s / 2) + 32 * (group & 1) + 16 * (t % 2));
        const uint4 qh = load16_from_halfwords(block[r] + 128 + 32 * (s / 2) + 16 * (t % 2));
        const int low_shift = s % 2 != 0 ? 4 : 0, high_shift = 2 * group;
        codes[r][0] = static_cast<uint32_t>(q6_k_codes(ql.x, qh.x, low_shift, high_shift));
        codes[r][1] = static_cast<uint32_t>(q6_k_codes(ql.y, qh.y, low_shift, high_shift));
        codes[r][2] = static_cast<uint32_t>(q6_k_codes(ql.z, qh.z, low_shift, high_shift));
        codes[r][3] = static_cast<uint32_t>(q6_k_codes(ql.w, qh.w, low_shift, high_shift));
      }
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const uint32_t u = 2 * p + g / 4;
        int4 xv = make_int4(0, 0, 0, 0);
        if (my_part && u < T) xv = *reinterpret_cast<const int4*>(x.q + u * K + b * 256 + 64 * s + 16 * t);
        int sum4[4] = {0, 0, 0, 0};
        mma_s8s8(sum4, codes[0][0], codes[1][0], codes[0][1], codes[1][1], xv.x, xv.y);
        mma_s8s8(sum4, codes[0][2], codes[1][2], codes[0][3], codes[1][3], xv.z, xv.w);
        // sum4: rows g (0, 1) and g + 8 (2, 3) of token 2p + t / 2, sub-blocks 4s + 2 (t % 2) + i,
        // both in x's group of 32 values 8b + 2s + t % 2.
        const uint32_t tok = min(2 * p + t / 2, T - 1);
        const float dx = x.dx[tok * G + b * 8 + 2 * s + t % 2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint32_t word = s == 0 ? scales[r].x : s == 1 ? scales[r].y : s == 2 ? scales[r].z : scales[r].w;
            const auto sc = static_cast<int8_t>((word >> (16 * (t % 2) + 8 * i)) & 0xFFu);
            acc[p][r] += d[r] * static_cast<float>(sc) * dx * static_cast<float>(sum4[2 * r + i]);
          }
        }
      }
    }
  }
  store_k_quant_tile<kPasses>(partial, acc, n0, N, T, bias, y);
}

// Whether q6_k_mma_kernel takes T rows of w: blocks 2-byte aligned, as the dp4a kernel reads them
// (HEARTH_CUDA_MV_MMA), and two rows or more. At one row the dp4a kernel is ahead (H200,
// cuda_ops_bench: down [4096, 14336] 27.8 against 29.6 us, the LM head 179 against 219).
bool q6_k_mma_takes(const GgmlArgs& w, int64_t T) {
  return knobs::cuda_mv_mma() && T > 1 && w.type == GgmlType::kQ6_K && w.row_bytes % 2 == 0 &&
         reinterpret_cast<uintptr_t>(w.blocks) % 2 == 0;
}

// Whether q4_k_mma_kernel takes T rows of w: K in pairs of blocks, rows 16-byte aligned
// (HEARTH_CUDA_MV_MMA); at one row only where N <= K. Many rows over a short K keep the dp4a
// kernel ahead, whose warp owns a row (H200, cuda_ops_bench at one row: gate/up [14336, 4096]
// 16.9 against 19.6 us; q/o 9.0 against 8.0 and down [4096, 14336] 22.5 against 17.3 the other way).
bool q4_k_mma_takes(const GgmlArgs& w, int64_t T) {
  return knobs::cuda_mv_mma() && (T > 1 || w.N <= w.K) && w.type == GgmlType::kQ4_K && w.K % 512 == 0 &&
         w.row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(w.blocks) % 16 == 0;
}

// T rows through a k-quant tensor-core kernel, a block per tile of 16 rows: kernel_of(passes) is
// its instantiation for 1, 2 or 4 passes of two tokens.
template <typename KernelOf>
void launch_k_quant_mma(cudaStream_t s, KernelOf kernel_of, const GgmlArgs& w, const PreparedX& px, const float* bias,
                        float* y, int64_t T) {
  const unsigned tiles = static_cast<unsigned>((w.N + 15) / 16), threads = kMmaWarps * 32;
  const auto T32 = static_cast<uint32_t>(T);
  const auto launch = [&](auto kernel) { launch_kernel(kernel, tiles, threads, 0, s, w, px, bias, y, T32); };
  if (T <= 2) return launch(kernel_of(std::integral_constant<int, 1>{}));
  if (T <= 4) return launch(kernel_of(std::integral_constant<int, 2>{}));
  launch(kernel_of(std::integral_constant<int, 4>{}));
}

// The integer kernel of w's type, after x rounded to int8 per 32 values.
template <int kT>
void k_quant_dp4a(cudaStream_t s, const GgmlArgs& w, const float* x, int64_t T, const float* bias, float* y,
                  void* scratch) {
  const PreparedX px = prepare_x<8>(s, XSource{x}, T, w.K, 32, scratch);
  if (q4_k_mma_takes(w, T)) {
    return launch_k_quant_mma(
        s, [](auto passes) { return q4_k_mma_kernel<decltype(passes)::value>; }, w, px, bias, y, T);
  }
  if (q6_k_mma_takes(w, T)) {
    return launch_k_quant_mma(
        s, [](auto passes) { return q6_k_mma_kernel<decltype(passes)::value>; }, w, px, bias, y, T);
  }
  launch_kernel(w.type == GgmlType::kQ4_K ? q4_k_dp4a_kernel<kT> : q6_k_dp4a_kernel<kT>,
                blocks_for(w.N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, w, px, bias, y);
}

template <int kT>
__global__ void matvec_kernel(GgmlArgs w, const float* x, const float* bias, float* y) {
  wait_for_previous(__func__);
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
  wait_for_previous(__func__);
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
  wait_for_previous(__func__);
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
