// MLX affine quantized matrices (core/quant.h, rows layout): packed u32 [N, K * bits / 32], low
// bits first; scales and biases [N, K / group_size] f32|bf16|f16; w = scale * q + bias, or
// scale * (q - 2^(bits-1)) without biases (GGUF Q4_0/Q8_0 as loaded).
//
// Decode (T <= kMatvecRows), 4 and 8 bits: integer dot products, as the CPU's VNNI kernels
// (backends/cpu/quant_panels.cpp) and llama.cpp's CUDA kernels compute them. A first kernel
// rounds x to int8 per weight group (xq = rint(x / dx), dx = max|x| / 127, exactly as the CPU
// rounds it) and keeps each group's exact sum of x; then per group g of row n
//   sum_k x[k] (s q[k] + b) ~= s dx[g] sum_k q[k] xq[k] + b sum_k x[k],
// the integer sum taken on tensor cores in groups of 32, 64 or 128 with 16-bit parameters
// (quant_matvec_mma.cu, 16 rows per warp), else by dp4a, four codes per instruction; one 4-bit
// row goes to the dp4a kernel whose lanes share each round's parameters where that applies (the
// widest matrices, where it is faster). dp4a: one warp per row, each lane taking
// 16 bytes of codes at a time (32 4-bit or 16 8-bit codes, within one group), four loads in
// flight. For 4 bits a word's low nibbles (codes 0, 2, 4, 6) and high nibbles (1, 3, 5, 7) each
// meet four bytes of xq, which the first kernel stores in that order. Several matrices of one
// x (q, k, v; gate, up) share both launches. Other widths, and shapes that do not split into
// 16-byte loads, go per element in f32: correct, not fast.
// A few more rows (T <= kQuantGemmRows: batched decode, short prompts), 4 and 8 bits: tensor cores
// with each weight dequantized in registers (quant_gemm.cu). Prefill, and other widths: the
// matrix dequantized to bf16 in a scratch buffer, then the dense bf16 GEMM (cuBLAS), which beats
// our own tiles from a few dozen rows on (HEARTH_CUDA_QUANT_GEMM=0 takes it for all).
// Embedding rows: dequantized per element exactly as the CPU reference (no fused multiply-add).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/loads.cuh"
#include "backends/cuda/prepared_x.cuh"
#include "backends/cuda/quant_launch.cuh"
#include "backends/cuda/reduce.cuh"
#include "backends/cuda/table_rows.cuh"
#include "base/error.h"
#include "base/knobs.h"

namespace hearth::cuda {
namespace {

// Blocks of 4 warps (a warp per row): a block leaves the SM when its slowest warp is done, and
// smaller blocks let the next ones in sooner (q4 gate+up 30.7 -> 29.5 us against 8 warps, H200).
constexpr int kWarpsPerBlock = 4;
// Blocks of the kernel whose lanes share each round's parameters that an SM must hold at once:
// 8 caps it at 64 registers (from 66-72) for 32 resident warps instead of 28. H200, 4 bits:
// gate+up 22.8 -> 22.4 us, lm_head 83.9 -> 81.2; tg128 411.9 -> 414.5 tok/s together with the
// threshold of shares_round_params at 1x the resident warps.
constexpr int kSharedBlocksPerSm = 8;

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

// The part that row r of a launch belongs to.
__device__ inline int part_of(const QuantLaunch& L, uint32_t r) {
  int j = 0;
#pragma unroll
  for (int k = 1; k < kMaxMatvecParts; ++k) j += r >= L.first[k] ? 1 : 0;
  return j;
}

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
// 16 bytes of codes would cost more than the dot itself. One row per warp: two rows per warp for
// 4 bits (a 4-bit row of 4096 is only four loads per lane) measured slower on the H200 (o 8.85 ->
// 10.32 us, gate+up 34.97 -> 51.52 us).

// A round's 16-bit scales (or biases), 128 loads of codes in 2^kShift loads per group (kShift 0,
// 1 or 2): lane l loads those of loads 4l..4l+3, 4 >> kShift of them in one 8-, 4- or 2-byte
// load, and each load's comes by shuffle. Eight narrow loads per lane and round (a scale and a
// bias per load of codes) kept the L1 the limit of the 4-bit matvec (ncu: 54% of stalls, 37%
// excess sectors). `mine`: the lane's first group, < G or the lane loads nothing.
template <typename S, int kShift>
__device__ inline uint2 load_round_params(const S* at, uint32_t mine, uint32_t G) {
  uint2 bits = make_uint2(0, 0);
  if (at == nullptr || mine >= G) return bits;
  if constexpr (kShift == 0) {
    bits = __ldg(reinterpret_cast<const uint2*>(at + mine));
  } else if constexpr (kShift == 1) {
    bits.x = __ldg(reinterpret_cast<const unsigned int*>(at + mine));
  } else {
    bits.x = __ldg(reinterpret_cast<const unsigned short*>(at + mine));
  }
  return bits;
}

// Load u's parameter (idx = lane + 32 u within the round) from the lane that loaded it. Every
// lane of the warp must call it (full-mask shuffles).
template <typename S, int kShift>
__device__ inline float shuffled_param(uint2 bits, int idx) {
  const int owner = idx >> 2, pos = (idx >> kShift) & ((4 >> kShift) - 1);
  const uint32_t low = __shfl_sync(0xffffffffu, bits.x, owner);
  uint32_t word = low;
  if constexpr (kShift == 0) {
    // Shuffled by every lane, then chosen (a shuffle inside the choice runs on some lanes only).
    const uint32_t high = __shfl_sync(0xffffffffu, bits.y, owner);
    word = pos < 2 ? low : high;
  }
  return widen_bits<S>(word >> ((pos & 1) * 16));
}

// A row of x through the launch's rows, one row per warp, in rounds of four 16-byte loads of
// codes per lane. kShift: 16-byte loads per group are 2^kShift, or -1 to read it from the launch
// (one instantiation for all group sizes where T > 1 rows share each load's overhead). kShared
// (where shares_round_params): the parameters by load_round_params and shuffles.
template <int kBits, int kT, typename S, int kShift, bool kShared>
__device__ __forceinline__ void matvec_dp4a_rows(const QuantLaunch& L, const PreparedX& x) {
  constexpr int kCodes = 128 / kBits;  // per 16-byte load
  constexpr int kUnroll = 4;
  const uint32_t r = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const bool valid = r < L.first[kMaxMatvecParts];
  const int j = part_of(L, r);
  const uint32_t n = valid ? r - L.first[j] : 0;
  const uint32_t K = L.K, G = L.G, vecs = K / kCodes;
  const int shift = kShift >= 0 ? kShift : L.group_shift;
  const uint4* row = L.codes[j] + n * vecs;
  const S* scales = static_cast<const S*>(L.scales[j]) + n * G;
  const S* biases = L.biases[j] != nullptr ? static_cast<const S*>(L.biases[j]) + n * G : nullptr;
  const float zero_point = -static_cast<float>(1 << (kBits - 1));
  // A round's codes into raw, and each load's scale and bias term (the group's bias added once,
  // with its first 16 bytes), loaded together so that they are in flight with the codes.
  uint4 raw[kUnroll];
  float scale[kUnroll], bias[kUnroll];
  auto load_round = [&](uint32_t v0) {
    if constexpr (kShared) {
      const uint32_t mine = ((v0 - lane) >> kShift) + (4 >> kShift) * lane;
      const uint2 scale_bits = load_round_params<S, kShift>(scales, mine, G);
      const uint2 bias_bits = load_round_params<S, kShift>(biases, mine, G);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t v = v0 + 32 * u;
        raw[u] = v < vecs ? load_stream(row + v) : make_uint4(0, 0, 0, 0);
        scale[u] = shuffled_param<S, kShift>(scale_bits, lane + 32 * u);
        const float b = shuffled_param<S, kShift>(bias_bits, lane + 32 * u);
        const bool first_of_group = (v & ((1u << kShift) - 1)) == 0;
        bias[u] = !first_of_group ? 0.0f : biases != nullptr ? b : zero_point * scale[u];
      }
    } else {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t v = v0 + 32 * u, vc = min(v, vecs - 1), g = vc >> shift;
        raw[u] = v < vecs ? load_stream(row + v) : make_uint4(0, 0, 0, 0);
        scale[u] = widen(__ldg(scales + g));
        const bool first_of_group = (vc & ((1u << shift) - 1)) == 0;
        bias[u] = !first_of_group ? 0.0f : biases != nullptr ? widen(__ldg(biases + g)) : zero_point * scale[u];
      }
    }
  };
  // The row's first round into registers while the previous kernel finishes (no kernel writes
  // the weights): for K = 4096 at 4 bits, the whole row.
  if (valid) load_round(lane);
  wait_for_previous(__func__);
  if (!valid) return;
  float acc[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (uint32_t v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
    if (v0 != static_cast<uint32_t>(lane)) load_round(v0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t v = v0 + 32 * u;
      if (v >= vecs) break;
      const uint32_t g = v >> shift;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const int8_t* xq = x.q + t * K + v * kCodes;
        const float dx = x.dx[t * G + g], sum = x.sum[t * G + g];
        const int isum = dot16<kBits>(raw[u], xq);
        acc[t] += static_cast<float>(isum) * (scale[u] * dx) + bias[u] * sum;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const float total = warp_sum(acc[t]);
    if (lane == 0) store(total, L.bias[j], L.y[j], t, L.N[j], n, (L.accumulate >> j) & 1u);
  }
}

// T > 1 rows: registers as the compiler sees fit (bounds of 128 threads let it take 114 -> 167
// for 8 rows of 4 bits).
template <int kBits, int kT, typename S>
__global__ void matvec_dp4a_kernel(QuantLaunch L, PreparedX x) {
  matvec_dp4a_rows<kBits, kT, S, -1, false>(L, x);
}

// One row, the group shift fixed: blocks of 128 threads, kMinBlocks of them per SM (the
// shared-parameter kernel: kSharedBlocksPerSm). These bounds are what the H200 measured.
template <int kBits, typename S, int kShift, bool kShared, int kMinBlocks>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kMinBlocks) matvec_one_row_kernel(QuantLaunch L, PreparedX x) {
  matvec_dp4a_rows<kBits, 1, S, kShift, kShared>(L, x);
}

// Any width and shape: per element, in f32.
template <int kT>
__global__ void matvec_elements_kernel(QuantPart p, const float* x) {
  wait_for_previous(__func__);
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
    if (lane == 0) store(total, p.bias, p.y, t, w.N, n, p.accumulate);
  }
}

template <int kT>
void matvec_elements(cudaStream_t s, const QuantPart& p, const float* x) {
  launch_kernel(matvec_elements_kernel<kT>, blocks_for(p.w.N, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, p, x);
}

// f.template operator()<kT>() for kT = T (1 <= T <= kMatvecRows): a kernel instantiation per row count.
template <typename F>
void with_rows(int64_t T, F&& f) {
  switch (T) {
    case 1: return f.template operator()<1>();
    case 2: return f.template operator()<2>();
    case 3: return f.template operator()<3>();
    case 4: return f.template operator()<4>();
    case 5: return f.template operator()<5>();
    case 6: return f.template operator()<6>();
    case 7: return f.template operator()<7>();
    default: return f.template operator()<kMatvecRows>();
  }
}

// Whether the kShared kernel takes L (16-bit parameters): 1, 2 or 4 loads of codes per group,
// rows of exactly one round (32 to 128 loads; no lane leaves the loop before the others),
// parameters aligned for the lanes' wide loads, and at least as many rows as the GPU holds its
// warps at once. Measured on the H200 (Llama-3-8B shapes, 4 bits): q+k+v 10.9 -> 9.3 us, gate+up
// 28.5 -> 25.5, lm_head 104 -> 95, tg128 354 -> 376 tok/s. Slower where the shuffles wait on the
// loads with little to hide them: rows of several rounds (down: 3.5 rounds, 16.4 -> 21.6 us;
// 20.2 with every round's parameters loaded up front), and o (4096 rows, 1.1x the 3696 warps the
// 70-register kernel held: 7.1 -> 8.1 us; 6.83 -> 7.26 at 66 registers), where one wave of warps
// is most of the work. With kSharedBlocksPerSm the GPU holds 4224, and o stays below.
bool shares_round_params(const QuantLaunch& L, int bits, int64_t resident) {
  const int64_t loads_per_group = int64_t{1} << L.group_shift, vecs = int64_t{L.K} * bits / 128;
  if (loads_per_group > 4) return false;
  if (vecs % 32 != 0 || vecs > 128 || int64_t{L.first[L.n]} < resident) return false;
  const auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % (8 / loads_per_group) == 0; };
  for (int i = 0; i < L.n; ++i) {
    if (!aligned(L.scales[i]) || !aligned(L.biases[i])) return false;
  }
  return true;
}

// One row of x: a kernel per group size, where the row's own index arithmetic is a large part
// of the work (a 4-bit row of 4096 is one round of loads per lane).
template <int kBits, typename S, int kShift>
bool matvec_one_row(cudaStream_t s, const QuantLaunch& L, const PreparedX& px, unsigned blocks, bool shared_only) {
  constexpr unsigned threads = kWarpsPerBlock * 32;
  if constexpr (kShift <= 2) {
    constexpr auto shared = matvec_one_row_kernel<kBits, S, kShift, true, kSharedBlocksPerSm>;
    // Once per instantiation (and process: the first GPU's count stands for all).
    static const int64_t resident = resident_warps(shared, threads);
    if (shares_round_params(L, kBits, resident)) {
      launch_kernel(shared, blocks, threads, 0, s, L, px);
      return true;
    }
  }
  if (shared_only) return false;
  launch_kernel(matvec_one_row_kernel<kBits, S, kShift, false, 1>, blocks, threads, 0, s, L, px);
  return true;
}

// One row of x through the one-row kernels (shared_only: only where the lanes share each round's
// parameters); whether it was queued.
template <int kBits, typename S>
bool matvec_one_row(cudaStream_t s, const QuantLaunch& L, const PreparedX& px, bool shared_only) {
  const unsigned blocks = blocks_for(L.first[L.n], kWarpsPerBlock);
  // 16-byte loads per group: 2^shift, from 1 (4 bits in groups of 32) to 8 (dp4a_fits).
  switch (L.group_shift) {
    case 0:
      if constexpr (kBits == 4) return matvec_one_row<kBits, S, 0>(s, L, px, blocks, shared_only);
      return false;
    case 1: return matvec_one_row<kBits, S, 1>(s, L, px, blocks, shared_only);
    case 2: return matvec_one_row<kBits, S, 2>(s, L, px, blocks, shared_only);
    default: return matvec_one_row<kBits, S, 3>(s, L, px, blocks, shared_only);
  }
}

template <int kBits, typename S>
void matvec_dp4a(cudaStream_t s, const XSource& x, int64_t T, const QuantLaunch& L, void* scratch) {
  const int group_size = static_cast<int>(L.K / L.G);
  const PreparedX px =
      x.rounded ? prepared_x(scratch, T, L.K, group_size) : prepare_x<kBits>(s, x, T, L.K, group_size, scratch);
  constexpr DType scale_type = std::is_same_v<S, float>    ? DType::kF32
                               : std::is_same_v<S, __half> ? DType::kF16
                                                           : DType::kBF16;
  if constexpr (sizeof(S) == 2 && kBits == 4) {
    // One 4-bit row goes to the shared-parameter kernel where it applies (many rows: gate+up, the
    // LM head), ahead of the tensor cores by 2% there (H200, cuda_ops_bench; tg128 +0.5%).
    if (T == 1 && matvec_one_row<kBits, S>(s, L, px, true)) return;
  }
  if (matvec_mma(s, L, px, T, kBits, scale_type)) return;
  if constexpr (sizeof(S) == 2) {
    if (T == 1 && matvec_one_row<kBits, S>(s, L, px, false)) return;
  }
  const unsigned blocks = blocks_for(L.first[L.n], kWarpsPerBlock);
  const unsigned threads = kWarpsPerBlock * 32;
  with_rows(T, [&]<int kT>() { launch_kernel(matvec_dp4a_kernel<kBits, kT, S>, blocks, threads, 0, s, L, px); });
}

template <typename S>
void matvec_dp4a(cudaStream_t s, const XSource& x, int64_t T, int bits, const QuantLaunch& L, void* scratch) {
  if (bits == 4) {
    matvec_dp4a<4, S>(s, x, T, L, scratch);
  } else {
    matvec_dp4a<8, S>(s, x, T, L, scratch);
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
  wait_for_previous(__func__);
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i < w.N * w.K) out[i] = __float2bfloat16_rn(dequantized(w, i / w.K, i % w.K));
}

// The same for widths whose codes sit whole in a word (2, 4, 8 bits; K a multiple of 32), one
// thread per word, a row per blockIdx.x: no division per element (a 64-bit one costs more than
// the element), the group's scale and bias read once, the same two roundings per element.
template <int kBits, typename S>
__global__ void dequantize_words_kernel(QuantArgs w, __nv_bfloat16* out) {
  wait_for_previous(__func__);
  constexpr int kCodes = 32 / kBits;
  const int64_t n = blockIdx.x;
  const int K = static_cast<int>(w.K), words_per_row = K / kCodes, at = blockIdx.y * 256 + threadIdx.x;
  if (at >= words_per_row) return;
  const int k0 = at * kCodes;
  const int64_t param = n * (K / w.group_size) + k0 / w.group_size;
  const float scale = widen(static_cast<const S*>(w.scales)[param]);
  const float bias = w.biases != nullptr ? widen(static_cast<const S*>(w.biases)[param])
                                         : -static_cast<float>(1 << (kBits - 1)) * scale;
  const uint32_t word = w.packed[n * words_per_row + at];
  // The word's values as pairs, stored 16 bytes at a time (8 for 8 bits): 2-byte stores spread
  // a warp's writes over many times the bytes they fill (4 bits took 3x as long as 8 that way).
  uint32_t pairs[kCodes / 2];
#pragma unroll
  for (int e = 0; e < kCodes; e += 2) {
    const float q0 = static_cast<float>((word >> (kBits * e)) & ((1u << kBits) - 1u));
    const float q1 = static_cast<float>((word >> (kBits * (e + 1))) & ((1u << kBits) - 1u));
    const __nv_bfloat162 v =
        __floats2bfloat162_rn(__fadd_rn(__fmul_rn(scale, q0), bias), __fadd_rn(__fmul_rn(scale, q1), bias));
    pairs[e / 2] = *reinterpret_cast<const uint32_t*>(&v);
  }
  if constexpr (kCodes == 4) {
    *reinterpret_cast<uint2*>(out + n * w.K + k0) = make_uint2(pairs[0], pairs[1]);
  } else {
    auto* dst = reinterpret_cast<uint4*>(out + n * w.K + k0);
#pragma unroll
    for (int i = 0; i < kCodes / 8; ++i)
      dst[i] = make_uint4(pairs[4 * i], pairs[4 * i + 1], pairs[4 * i + 2], pairs[4 * i + 3]);
  }
}

template <typename S>
void dequantize_words(cudaStream_t s, const QuantArgs& w, __nv_bfloat16* out) {
  const dim3 blocks(static_cast<unsigned>(w.N), blocks_for(w.K * w.bits / 32, 256));
  switch (w.bits) {
    case 2: launch_kernel(dequantize_words_kernel<2, S>, blocks, 256, 0, s, w, out); break;
    case 4: launch_kernel(dequantize_words_kernel<4, S>, blocks, 256, 0, s, w, out); break;
    default: launch_kernel(dequantize_words_kernel<8, S>, blocks, 256, 0, s, w, out); break;
  }
}

// The dense bf16 copy of w in `out` [N, K].
void dequantize(cudaStream_t s, const QuantArgs& w, __nv_bfloat16* out) {
  if ((w.bits == 2 || w.bits == 4 || w.bits == 8) && w.K % 32 == 0 && w.K < (1 << 30) && w.N < (1LL << 31)) {
    switch (w.scale_type) {
      case DType::kBF16: return dequantize_words<__nv_bfloat16>(s, w, out);
      case DType::kF16: return dequantize_words<__half>(s, w, out);
      default: return dequantize_words<float>(s, w, out);
    }
  }
  launch_kernel(dequantize_kernel, blocks_for(w.N * w.K, 256), 256, 0, s, w, out);
}

struct AffineElement {  // table_rows' element
  __device__ float operator()(const QuantArgs& w, int64_t n, int64_t k) const { return dequantized(w, n, k); }
};

// The integer kernels read 16 bytes of codes at a time, all within one group (of a power-of-two
// size, at most 8 such loads), and index rows and parameters in 32 bits.
bool dp4a_fits(const QuantArgs& w) {
  const bool power_of_two = (w.group_size & (w.group_size - 1)) == 0;
  return (w.bits == 4 || w.bits == 8) && w.group_size >= 32 && w.group_size * w.bits <= 8 * 128 && power_of_two &&
         w.K % 32 == 0 && w.K > 0 && w.K < (1 << 30) && w.N * (w.K / 16) < (int64_t{1} << 32) &&
         reinterpret_cast<uintptr_t>(w.packed) % 16 == 0;
}

// Whether quantized_matmul of T > kMatvecRows rows runs quant_gemm.
bool takes_quant_gemm(int64_t T, const QuantArgs& w) {
  return T <= kQuantGemmRows && quant_gemm_fits(w) && knobs::cuda_quant_gemm();
}

}  // namespace

int64_t quantized_matmul_scratch_bytes(int64_t T, const QuantArgs& w) {
  return T > kMatvecRows && takes_quant_gemm(T, w) ? 2 * T * w.K : quantized_scratch_bytes(T, w.N, w.K);
}

bool quantized_matvec_group(cudaStream_t s, const XSource& src, int64_t T, const QuantPart* parts, int n,
                            void* scratch) {
  HEARTH_CHECK(T >= 1 && T <= kMatvecRows && n >= 1 && n <= kMaxMatvecParts);
  const QuantArgs& w0 = parts[0].w;
  bool together = dp4a_fits(w0);
  for (int i = 1; i < n; ++i) {
    const QuantArgs& w = parts[i].w;
    together = together && dp4a_fits(w) && w.K == w0.K && w.bits == w0.bits && w.group_size == w0.group_size &&
               w.scale_type == w0.scale_type;
  }
  if (!together) return false;
  QuantLaunch L{};
  L.n = n;
  L.K = static_cast<uint32_t>(w0.K);
  L.G = static_cast<uint32_t>(w0.K / w0.group_size);
  L.group_shift = __builtin_ctz(static_cast<unsigned>(w0.group_size * w0.bits / 128));
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    const QuantPart& p = parts[i];
    L.codes[i] = reinterpret_cast<const uint4*>(p.w.packed);
    L.scales[i] = p.w.scales;
    L.biases[i] = p.w.biases;
    L.bias[i] = p.bias;
    L.y[i] = p.y;
    L.N[i] = static_cast<uint32_t>(p.w.N);
    L.accumulate |= p.accumulate ? 1u << i : 0u;
    rows += p.w.N;
  }
  if (rows == 0) return true;
  if (rows >= (int64_t{1} << 32)) return false;
  for (uint32_t i = 0, first = 0; i <= kMaxMatvecParts; ++i) {
    L.first[i] = first;
    if (i < static_cast<uint32_t>(n)) first += L.N[i];
  }
  for (uint32_t i = 0, tiles = 0; i <= kMaxMatvecParts; ++i) {
    L.tiles[i] = tiles;
    if (i < static_cast<uint32_t>(n)) tiles += (L.N[i] + 15) / 16;
  }
  // Scales and biases of their own type: no branch between a load and its use.
  switch (w0.scale_type) {
    case DType::kBF16: matvec_dp4a<__nv_bfloat16>(s, src, T, w0.bits, L, scratch); break;
    case DType::kF16: matvec_dp4a<__half>(s, src, T, w0.bits, L, scratch); break;
    default: matvec_dp4a<float>(s, src, T, w0.bits, L, scratch); break;
  }
  return true;
}

void quantized_matvec_group(cudaStream_t s, const float* x, int64_t T, const QuantPart* parts, int n, void* scratch) {
  if (quantized_matvec_group(s, XSource{x}, T, parts, n, scratch)) return;
  // One launch per matrix: the integer kernels where they fit, else per element.
  for (int i = 0; i < n; ++i) {
    const QuantPart& p = parts[i];
    if (!quantized_matvec_group(s, XSource{x}, T, &p, 1, scratch)) {
      with_rows(T, [&]<int kT>() { matvec_elements<kT>(s, p, x); });
    }
  }
}

void quantized_matmul(cudaStream_t s, int device, const float* x, int64_t T, const QuantArgs& w, const float* bias,
                      float* y, void* scratch) {
  if (T == 0 || w.N == 0) return;
  if (T <= kMatvecRows) {
    const QuantPart part{w, bias, y};
    return quantized_matvec_group(s, x, T, &part, 1, scratch);
  }
  if (takes_quant_gemm(T, w)) return quant_gemm(s, x, T, w, bias, y, scratch);
  // scratch: the dense bf16 matrix [N, K], then x in bf16 [T, K] (matmul's own scratch).
  auto* dense = static_cast<__nv_bfloat16*>(scratch);
  dequantize(s, w, dense);
  matmul(s, device, x, T, w.K, dense, DType::kBF16, w.N, bias, y, dense + w.N * w.K);
}

void quantized_rows(cudaStream_t s, const QuantArgs& w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  if (T * w.K == 0) return;
  table_rows<AffineElement>(s, w, ids, T, out, errors);
}

}  // namespace hearth::cuda
