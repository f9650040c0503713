// The 4/8-bit decode matvec on tensor cores (quant_matmul.cu has the layout, the rounding of x
// and the dp4a kernels for the other shapes).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/launch.cuh"
#include "backends/cuda/loads.cuh"
#include "backends/cuda/prepared_x.cuh"
#include "backends/cuda/quant_launch.cuh"
#include "base/knobs.h"

namespace hearth::cuda {
namespace {

// Decode rows on tensor cores: mma m16n8k32 with 16 weight rows as A (u8 codes) and xq as B (s8),
// s32 sums. A warp's load of 16 bytes per lane covers a segment of k (128 for 4 bits, 64 for 8)
// of 8 rows, four lanes per row; the rows' scales, biases and x's dx and sums then turn each
// group's integer sums into floats, in the same arithmetic as the dp4a kernels but summed per
// group half (4 bits) or group (8 bits), so the float order differs from theirs. Lane (g, t) =
// (lane / 4, lane % 4) holds A rows g and g + 8; B column g and C columns 2t, 2t + 1.
// 4 bits: the word a lane loaded gives its low nibbles (A k-quad t) and high nibbles (k-quad
// t + 4), in the order prepare_x stores xq; lanes t = 0, 1 hold the segment's first 64 k, lanes
// 2, 3 the next 64, which may be another group. So B column 2u + h holds token u's xq on lanes of
// half h only, and C column 2t + h is token t's sum over half h: two groups in one mma, four
// tokens per pass. 8 bits: a segment is one group (or half of one), column g is token g.
// A block of kMmaWarps warps takes a tile of 16 rows; warp w its chunks (4 segments, whose
// scales and biases are one 4- to 16-byte load per row) w, w + kMmaWarps, ...; the warps' sums
// meet in shared memory in a fixed order (deterministic).
constexpr int kMmaWarps = 8;

__device__ inline void mma_u8s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, int b0, int b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The 16-bit parameters of kGroups consecutive groups (2, 4 or 8) in one load.
template <int kGroups>
__device__ inline uint4 load_group_params(const void* p) {
  if constexpr (kGroups == 8) {
    return __ldg(static_cast<const uint4*>(p));
  } else if constexpr (kGroups == 4) {
    const uint2 v = __ldg(static_cast<const uint2*>(p));
    return make_uint4(v.x, v.y, 0, 0);
  } else {
    return make_uint4(__ldg(static_cast<const unsigned int*>(p)), 0, 0, 0);
  }
}

// Parameter i (a constant after unrolling) of load_group_params' result, widened.
template <typename S>
__device__ inline float group_param(const uint4& v, int i) {
  const uint32_t word = i / 2 == 0 ? v.x : i / 2 == 1 ? v.y : i / 2 == 2 ? v.z : v.w;
  return widen_bits<S>(i % 2 == 0 ? word & 0xffffu : word >> 16);
}

// One C column's group (local, its index in the chunk's parameters; at, its index in x's dx and
// sums): acc[r] += sum4[2r + i] * (scale_r * dx) + bias_r * sum(x), the bias term only where the
// group starts (a group of 128 has two 4-bit halves).
template <typename S>
__device__ inline void add_group(float (&acc)[2], const int (&sum4)[4], int i, const uint4 (&sc)[2],
                                 const uint4 (&bi)[2], bool has_biases, float zero_point, int local, bool starts,
                                 const PreparedX& x, uint32_t at) {
  const float dx = x.dx[at], xsum = x.sum[at];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float scale = group_param<S>(sc[r], local);
    const float bias = has_biases ? group_param<S>(bi[r], local) : zero_point * scale;
    acc[r] += static_cast<float>(sum4[2 * r + i]) * (scale * dx) + (starts ? bias * xsum : 0.0f);
  }
}

// kSlots: 8 bits, 2 (tokens 2t, 2t + 1 per lane); 4 bits, the passes of four tokens (1 or 2).
template <int kBits, int kGroupSize, typename S, int kSlots>
__global__ void __launch_bounds__(kMmaWarps * 32, 2) matvec_mma_kernel(QuantLaunch L, PreparedX x, uint32_t T) {
  constexpr int kSegK = kBits == 4 ? 128 : 64;
  constexpr int kChunkK = 4 * kSegK;
  constexpr int kGroups = kChunkK / kGroupSize;
  constexpr uint32_t kLow = 0x0F0F0F0Fu;
  __shared__ float partial[kMmaWarps][2 * kSlots][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const uint32_t tile = blockIdx.x;
  int j = 0;
#pragma unroll
  for (int k = 1; k < kMaxMatvecParts; ++k) j += tile >= L.tiles[k] ? 1 : 0;
  const uint32_t N = L.N[j], n0 = (tile - L.tiles[j]) * 16, K = L.K, G = L.G;
  const uint32_t vecs = K * kBits / 128, chunks = K / kChunkK;
  // Rows past N (a partial tile) read the last row and store nothing.
  const uint32_t rows[2] = {min(n0 + g, N - 1), min(n0 + g + 8, N - 1)};
  const uint4* codes[2] = {L.codes[j] + rows[0] * vecs + t, L.codes[j] + rows[1] * vecs + t};
  const S* scales = static_cast<const S*>(L.scales[j]);
  const S* biases = static_cast<const S*>(L.biases[j]);
  // The warp's first chunk into L2 while the previous kernel finishes: 256 bytes of each row,
  // lanes t = 0, 1 row g, lanes 2, 3 row g + 8.
  if (static_cast<uint32_t>(warp) < chunks) {
    prefetch_line(reinterpret_cast<uintptr_t>((t < 2 ? codes[0] : codes[1]) - t + warp * 16 + 8 * (t % 2)));
  }
  wait_for_previous();
  const float zero_point = -static_cast<float>(1 << (kBits - 1));
  float acc[kSlots][2];
#pragma unroll
  for (int p = 0; p < kSlots; ++p) acc[p][0] = acc[p][1] = 0.0f;
  for (uint32_t c = warp; c < chunks; c += kMmaWarps) {
    uint4 w[2][4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      w[0][s] = load_stream(codes[0] + (c * 4 + s) * 4);
      w[1][s] = load_stream(codes[1] + (c * 4 + s) * 4);
    }
    uint4 sc[2], bi[2] = {};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sc[r] = load_group_params<kGroups>(scales + rows[r] * G + c * kGroups);
      if (biases != nullptr) bi[r] = load_group_params<kGroups>(biases + rows[r] * G + c * kGroups);
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t k0 = (c * 4 + s) * kSegK;
      if constexpr (kBits == 4) {
#pragma unroll
        for (int p = 0; p < kSlots; ++p) {
          const uint32_t u = 4 * p + g / 2;
          int4 lo = make_int4(0, 0, 0, 0), hi = lo;
          if (t / 2 == g % 2 && u < T) {
            const int8_t* xq = x.q + u * K + k0 + 32 * t;
            lo = *reinterpret_cast<const int4*>(xq);
            hi = *reinterpret_cast<const int4*>(xq + 16);
          }
          const uint32_t* wa = &w[0][s].x;
          const uint32_t* wb = &w[1][s].x;
          const int b[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
          int sum4[4] = {0, 0, 0, 0};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            mma_u8s8(sum4, wa[i] & kLow, wb[i] & kLow, (wa[i] >> 4) & kLow, (wb[i] >> 4) & kLow, b[2 * i],
                     b[2 * i + 1]);
          }
          // sum4: rows g (0, 1) and g + 8 (2, 3), halves 0 and 1, of token 4p + t.
          const uint32_t tok = min(4 * p + t, T - 1);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int first = s * kSegK + 64 * h;  // the half's first k within the chunk
            add_group<S>(acc[p], sum4, h, sc, bi, biases != nullptr, zero_point, first / kGroupSize,
                         first % kGroupSize == 0, x, tok * G + (c * kGroups + first / kGroupSize));
          }
        }
      } else {
        int4 xv = make_int4(0, 0, 0, 0);
        if (static_cast<uint32_t>(g) < T) xv = *reinterpret_cast<const int4*>(x.q + g * K + k0 + 16 * t);
        int sum4[4] = {0, 0, 0, 0};
        mma_u8s8(sum4, w[0][s].x, w[1][s].x, w[0][s].y, w[1][s].y, xv.x, xv.y);
        mma_u8s8(sum4, w[0][s].z, w[1][s].z, w[0][s].w, w[1][s].w, xv.z, xv.w);
        // sum4: rows g (0, 1) and g + 8 (2, 3), tokens 2t and 2t + 1.
        const int local = s * kSegK / kGroupSize;
        const uint32_t grp = c * kGroups + local;
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const uint32_t tok = min(2 * t + q, T - 1);
          add_group<S>(acc[q], sum4, q, sc, bi, biases != nullptr, zero_point, local, s * kSegK % kGroupSize == 0, x,
                       tok * G + grp);
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < kSlots; ++p) {
#pragma unroll
    for (int r = 0; r < 2; ++r) partial[warp][2 * p + r][lane] = acc[p][r];
  }
  __syncthreads();
  if (warp < 2 * kSlots) {
    float total = 0.0f;
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) total += partial[v][warp][lane];
    const int p = warp / 2, r = warp % 2;
    const uint32_t tok = kBits == 4 ? 4 * p + t : 2 * t + p, n = n0 + g + 8 * r;
    if (tok < T && n < N) store(total, L.bias[j], L.y[j], tok, N, n, (L.accumulate >> j) & 1u);
  }
}

// Whether L's rows of x go to matvec_mma_kernel: 4 and 8 bits in groups of 64 or 128 with 16-bit
// parameters, K a multiple of the kernel's chunk (512 for 4 bits, 256 for 8) and each part's
// parameters aligned for one load per chunk; HEARTH_CUDA_MV_MMA=0 keeps the dp4a kernels.
bool mma_takes(const QuantLaunch& L, int bits, DType scale_type) {
  if (scale_type != DType::kBF16 && scale_type != DType::kF16) return false;
  if (!knobs::cuda_mv_mma()) return false;
  const int64_t gs = L.K / L.G, chunk_k = bits == 4 ? 512 : 256;
  if ((gs != 64 && gs != 128) || L.K % chunk_k != 0) return false;
  const auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % (chunk_k / gs * 2) == 0; };
  for (int i = 0; i < L.n; ++i) {
    if (!aligned(L.scales[i]) || !aligned(L.biases[i])) return false;
  }
  return true;
}

template <int kBits, typename S>
void launch_mma(cudaStream_t s, const QuantLaunch& L, const PreparedX& px, int64_t T) {
  const unsigned blocks = L.tiles[L.n], threads = kMmaWarps * 32;
  const auto T32 = static_cast<uint32_t>(T);
  const bool gs64 = L.K / L.G == 64;
  if constexpr (kBits == 8) {
    if (gs64) return launch_kernel(matvec_mma_kernel<8, 64, S, 2>, blocks, threads, 0, s, L, px, T32);
    return launch_kernel(matvec_mma_kernel<8, 128, S, 2>, blocks, threads, 0, s, L, px, T32);
  } else if (T <= 4) {
    if (gs64) return launch_kernel(matvec_mma_kernel<4, 64, S, 1>, blocks, threads, 0, s, L, px, T32);
    return launch_kernel(matvec_mma_kernel<4, 128, S, 1>, blocks, threads, 0, s, L, px, T32);
  } else {
    if (gs64) return launch_kernel(matvec_mma_kernel<4, 64, S, 2>, blocks, threads, 0, s, L, px, T32);
    return launch_kernel(matvec_mma_kernel<4, 128, S, 2>, blocks, threads, 0, s, L, px, T32);
  }
}

}  // namespace

bool matvec_mma(cudaStream_t s, const QuantLaunch& L, const PreparedX& px, int64_t T, int bits, DType scale_type) {
  if (!mma_takes(L, bits, scale_type)) return false;
  if (scale_type == DType::kBF16) {
    bits == 4 ? launch_mma<4, __nv_bfloat16>(s, L, px, T) : launch_mma<8, __nv_bfloat16>(s, L, px, T);
  } else {
    bits == 4 ? launch_mma<4, __half>(s, L, px, T) : launch_mma<8, __half>(s, L, px, T);
  }
  return true;
}

}  // namespace hearth::cuda
