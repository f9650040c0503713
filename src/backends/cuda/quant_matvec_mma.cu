// The 4/8-bit decode matvec on tensor cores (quant_matmul.cu has the layout, the rounding of x
// and the dp4a kernels for the other shapes).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/launch.cuh"
#include "backends/cuda/loads.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/prepared_x.cuh"
#include "backends/cuda/quant_launch.cuh"
#include "base/knobs.h"

namespace hearth::cuda {
namespace {

// Decode rows on tensor cores: mma m16n8k32 with 16 weight rows as A (u8 codes) and xq as B (s8),
// s32 sums. A warp's load of 16 bytes per lane covers a segment of k (128 for 4 bits, 64 for 8)
// of 8 rows, four lanes per row; the rows' scales, biases and x's dx and sums then turn each
// group's integer sums into floats, in the same arithmetic as the dp4a kernels but summed per
// group or group part, so the float order differs from theirs. Lane (g, t) = (lane / 4,
// lane % 4) holds A rows g and g + 8; B column g and C columns 2t, 2t + 1.
// 4 bits: the word a lane loaded gives its low nibbles (A k-quad t) and high nibbles (k-quad
// t + 4), in the order prepare_x stores xq. The lanes split a segment into kParts parts of
// consecutive k (mma_parts), and a part may be its own group: 4 bits in groups of 32, lane t's
// 32 k (4 parts); 4 bits in larger groups and 8 bits in groups of 32, lanes 0-1 and 2-3 (2
// parts); 8 bits in larger groups, one part. So B column n holds token n / kParts's xq on the
// lanes of part n % kParts only, and C column 2t + i is the sum of token (2t + i) / kParts over
// part (2t + i) % kParts: kParts groups in one mma, 8 / kParts tokens per pass.
// A block of kMmaWarps warps takes a tile of 16 rows; warp w its chunks (4 segments, whose
// scales and biases are one or two loads of 4 to 16 bytes per row) w, w + kMmaWarps, ...; the
// warps' sums meet in shared memory in a fixed order (deterministic).

// The 16-bit parameters of kGroups consecutive groups (2 to 16) in one or two loads: words
// 0-3 in v[0], 4-7 in v[1].
template <int kGroups>
__device__ inline void load_group_params(const void* p, uint4 (&v)[2]) {
  if constexpr (kGroups == 16) {
    v[0] = __ldg(static_cast<const uint4*>(p));
    v[1] = __ldg(static_cast<const uint4*>(p) + 1);
  } else if constexpr (kGroups == 8) {
    v[0] = __ldg(static_cast<const uint4*>(p));
  } else if constexpr (kGroups == 4) {
    const uint2 u = __ldg(static_cast<const uint2*>(p));
    v[0] = make_uint4(u.x, u.y, 0, 0);
  } else {
    v[0] = make_uint4(__ldg(static_cast<const unsigned int*>(p)), 0, 0, 0);
  }
}

// Word i (a constant after unrolling) of load_group_params' result.
__device__ inline uint32_t param_word(const uint4 (&v)[2], int i) {
  const uint4& q = v[i / 4];
  return i % 4 == 0 ? q.x : i % 4 == 1 ? q.y : i % 4 == 2 ? q.z : q.w;
}

// Parts of a segment's k that lanes t split between them, each its own group or half group:
// 4 bits in groups of 32, 4 (a lane each); 4 bits in larger groups and 8 bits in groups of 32,
// 2 (lanes 0-1 and 2-3); 8 bits in larger groups, 1.
__host__ __device__ constexpr int mma_parts(int bits, int group_size) {
  return bits == 4 ? (group_size == 32 ? 4 : 2) : (group_size == 32 ? 2 : 1);
}

// kPasses: passes over the segment's codes, 8 / parts tokens each (T <= 8). Two blocks per SM (up
// to 128 registers): bounded to three (80), one pass lost 3-5% of tg128 (H200).
template <int kBits, int kGroupSize, typename S, int kPasses>
__global__ void __launch_bounds__(kMmaWarps * 32, 2) matvec_mma_kernel(QuantLaunch L, PreparedX x, uint32_t T) {
  constexpr int kSegK = kBits == 4 ? 128 : 64;
  constexpr int kChunkK = 4 * kSegK;
  constexpr int kGroups = kChunkK / kGroupSize;
  constexpr int kParts = mma_parts(kBits, kGroupSize);
  constexpr int kPartK = kSegK / kParts;
  constexpr int kTokens = 8 / kParts;               // per pass
  constexpr int kLaneTokens = kParts == 1 ? 2 : 1;  // a lane's C columns: two tokens, or two parts of one
  constexpr int kValues = kPasses * kLaneTokens * 2;
  constexpr uint32_t kLow = 0x0F0F0F0Fu;
  __shared__ float partial[kMmaWarps][kValues][32];
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
  // A chunk's codes and its groups' parameters, two rows a lane.
  uint4 w[2][4];
  uint4 sc[2][2] = {}, bi[2][2] = {};
  auto load_chunk = [&](uint32_t c) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      w[0][s] = load_stream(codes[0] + (c * 4 + s) * 4);
      w[1][s] = load_stream(codes[1] + (c * 4 + s) * 4);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      load_group_params<kGroups>(scales + rows[r] * G + c * kGroups, sc[r]);
      if (biases != nullptr) load_group_params<kGroups>(biases + rows[r] * G + c * kGroups, bi[r]);
    }
  };
  // The warp's first chunk into registers while the previous kernel finishes (no kernel writes
  // the weights): for K = 4096, all the warp has to read.
  if (static_cast<uint32_t>(warp) < chunks) load_chunk(warp);
  wait_for_previous(__func__);
  const float zero_point = -static_cast<float>(1 << (kBits - 1));
  // The part of lane t's own codes, and whether its B column (g) is its part's: token g / kParts.
  const bool my_part = t * kParts / 4 == g % kParts;
  float acc[kPasses][kLaneTokens][2];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int i = 0; i < kLaneTokens; ++i) acc[p][i][0] = acc[p][i][1] = 0.0f;
  }
  for (uint32_t c = warp; c < chunks; c += kMmaWarps) {
    if (c != static_cast<uint32_t>(warp)) load_chunk(c);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const uint32_t k0 = (c * 4 + s) * kSegK;
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const uint32_t u = p * kTokens + g / kParts;
        const bool mine = my_part && u < T;
        int sum4[4] = {0, 0, 0, 0};
        if constexpr (kBits == 4) {
          int4 lo = make_int4(0, 0, 0, 0), hi = lo;
          if (mine) {
            const int8_t* xq = x.q + u * K + k0 + 32 * t;
            lo = *reinterpret_cast<const int4*>(xq);
            hi = *reinterpret_cast<const int4*>(xq + 16);
          }
          const uint32_t wa[4] = {w[0][s].x, w[0][s].y, w[0][s].z, w[0][s].w};
          const uint32_t wb[4] = {w[1][s].x, w[1][s].y, w[1][s].z, w[1][s].w};
          const int b[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            mma_u8s8(sum4, wa[i] & kLow, wb[i] & kLow, (wa[i] >> 4) & kLow, (wb[i] >> 4) & kLow, b[2 * i],
                     b[2 * i + 1]);
          }
        } else {
          int4 xv = make_int4(0, 0, 0, 0);
          if (mine) xv = *reinterpret_cast<const int4*>(x.q + u * K + k0 + 16 * t);
          mma_u8s8(sum4, w[0][s].x, w[1][s].x, w[0][s].y, w[1][s].y, xv.x, xv.y);
          mma_u8s8(sum4, w[0][s].z, w[1][s].z, w[0][s].w, w[1][s].w, xv.z, xv.w);
        }
        // sum4: rows g (0, 1) and g + 8 (2, 3) of C columns 2t and 2t + 1, column n holding
        // token p * kTokens + n / kParts over part n % kParts.
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int slot = kLaneTokens == 2 ? i : 0;
          // (For kParts > 1 both columns are one token, 2t / kParts: one dx load per group, not two.)
          const uint32_t tok = min(p * kTokens + (kParts == 1 ? 2 * t + i : 2 * t / kParts), T - 1);
          // The part's first k within the chunk, its group there, and its scales' word: a
          // constant but for 4 bits in groups of 32, where the lane's parts are 2 (t % 2) + i.
          int local;
          uint32_t sw[2], bw[2];
          bool starts;
          if constexpr (kParts == 4) {
            local = 4 * s + 2 * (t % 2) + i;
            starts = true;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              sw[r] = t % 2 != 0 ? param_word(sc[r], 2 * s + 1) : param_word(sc[r], 2 * s);
              bw[r] = t % 2 != 0 ? param_word(bi[r], 2 * s + 1) : param_word(bi[r], 2 * s);
            }
          } else {
            const int first = s * kSegK + (kParts == 2 ? i : 0) * kPartK;
            local = first / kGroupSize;
            starts = first % kGroupSize == 0;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              sw[r] = param_word(sc[r], local / 2);
              bw[r] = param_word(bi[r], local / 2);
            }
          }
          const uint32_t grp = c * kGroups + local;
          const float dx = x.dx[tok * G + grp], xsum = x.sum[tok * G + grp];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            // A group's parameter sits in the low half of its word when its index is even.
            const bool high = local % 2 != 0;
            const float scale = widen_bits<S>(high ? sw[r] >> 16 : sw[r] & 0xffffu);
            const float bias =
                biases != nullptr ? widen_bits<S>(high ? bw[r] >> 16 : bw[r] & 0xffffu) : zero_point * scale;
            acc[p][slot][r] += static_cast<float>(sum4[2 * r + i]) * (scale * dx) + (starts ? bias * xsum : 0.0f);
          }
        }
      }
    }
  }
  // Four lanes' parts of one token (4 bits in groups of 32): lanes t and t ^ 1 hold its two halves.
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
#pragma unroll
    for (int i = 0; i < kLaneTokens; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float v = acc[p][i][r];
        if constexpr (kParts == 4) v += __shfl_xor_sync(0xffffffffu, v, 1);
        partial[warp][(p * kLaneTokens + i) * 2 + r][lane] = v;
      }
    }
  }
  __syncthreads();
  if (warp < kValues) {
    float total = 0.0f;
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) total += partial[v][warp][lane];
    const int r = warp % 2, i = warp / 2 % kLaneTokens, p = warp / 2 / kLaneTokens;
    const uint32_t tok = p * kTokens + (2 * t + i) / kParts, n = n0 + g + 8 * r;
    const bool owner = kParts != 4 || t % 2 == 0;
    if (owner && tok < T && n < N) store(total, L.bias[j], L.y[j], tok, N, n, (L.accumulate >> j) & 1u);
  }
}

// Whether L's rows of x go to matvec_mma_kernel: 4 and 8 bits in groups of 32, 64 or 128 with
// 16-bit parameters, K a multiple of the kernel's chunk (512 for 4 bits, 256 for 8) and each
// part's parameters aligned for their loads per chunk; HEARTH_CUDA_MV_MMA=0 keeps the dp4a kernels.
bool mma_takes(const QuantLaunch& L, int bits, DType scale_type) {
  if (scale_type != DType::kBF16 && scale_type != DType::kF16) return false;
  if (!knobs::cuda_mv_mma()) return false;
  const int64_t gs = L.K / L.G, chunk_k = bits == 4 ? 512 : 256;
  if ((gs != 32 && gs != 64 && gs != 128) || L.K % chunk_k != 0) return false;
  const int64_t align = std::min<int64_t>(16, chunk_k / gs * 2);
  const auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % align == 0; };
  for (int i = 0; i < L.n; ++i) {
    if (!aligned(L.scales[i]) || !aligned(L.biases[i])) return false;
  }
  return true;
}

// The kernel for L's group size and T's passes (8 / parts tokens each).
template <int kBits, int kGroupSize, typename S>
void launch_mma(cudaStream_t s, const QuantLaunch& L, const PreparedX& px, int64_t T) {
  const unsigned blocks = L.tiles[L.n], threads = kMmaWarps * 32;
  const auto T32 = static_cast<uint32_t>(T);
  constexpr int kTokens = 8 / mma_parts(kBits, kGroupSize);
  if (T <= kTokens) {
    return launch_kernel(matvec_mma_kernel<kBits, kGroupSize, S, 1>, blocks, threads, 0, s, L, px, T32);
  }
  if constexpr (kTokens <= 4) {
    if (T <= 2 * kTokens)
      return launch_kernel(matvec_mma_kernel<kBits, kGroupSize, S, 2>, blocks, threads, 0, s, L, px, T32);
  }
  if constexpr (kTokens == 2)
    launch_kernel(matvec_mma_kernel<kBits, kGroupSize, S, 4>, blocks, threads, 0, s, L, px, T32);
}

template <int kBits, typename S>
void launch_mma(cudaStream_t s, const QuantLaunch& L, const PreparedX& px, int64_t T) {
  switch (L.K / L.G) {
    case 32: return launch_mma<kBits, 32, S>(s, L, px, T);
    case 64: return launch_mma<kBits, 64, S>(s, L, px, T);
    default: return launch_mma<kBits, 128, S>(s, L, px, T);
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
