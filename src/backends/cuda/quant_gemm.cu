// Matmuls of a few rows past the decode kernels' (kMatvecRows < T <= kQuantGemmRows: batched
// decode steps, short prompts) over MLX affine 4- and 8-bit matrices, on tensor cores with each
// weight dequantized in registers: y [T, N] f32 = x [T, K] . w [N, K]^T + bias, with x rounded to
// bf16 first (in scratch, as the dense path rounds it) and f32 accumulation. The weights cross
// memory once, as codes; the dense path writes and reads back a bf16 copy of the whole matrix
// (7x the bytes at 4 bits), which dominates a GEMM of so few rows.
//
// A block of 4 warps computes a 32 x 32 tile of y (kTileRows x kTileCols: many blocks, so that
// a matrix's loads spread over every SM) and walks K 64 at a time. It stages each step's x rows,
// the codes of its 32 weight rows, and their groups' scale and bias in shared memory (cp.async;
// the params through registers a step early), kAhead steps ahead. Warp w owns weight rows
// [8 w, +8) of the tile, one n8 tile: it builds the B fragments in registers straight from the
// codes, each weight s * q + b rounded twice exactly as the dequantize kernel and the CPU
// reference compute it, so the products are those of the dequantized matrix; then reads x's two
// m16 tiles with ldmatrix and runs mma.sync m16n8k16.
//
// Lane (g = lane / 4, c = lane % 4) needs, of weight row g of its n8 tile, the code pairs
// (8 m + 2c, 8 m + 2c + 1) of the step, m = 0..7 (mma.cuh's B layout: pair 2 ks is b0 of k16
// step ks, pair 2 ks + 1 its b1). A pair shares a byte at 4 bits and a half-word at 8.
//
// Larger tiles (128 x 128, each warp 128 x 32) made a full prefill GEMM: correct, but at 190-225
// TFLOP/s against 420-580 for the dequantized copy and cuBLAS (bench/RESULTS.md), so prefill
// keeps the copy.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/mma.cuh"

namespace hearth::cuda {
namespace {

constexpr int kStep = 64, kWarps = 4, kThreads = 32 * kWarps, kAhead = 4, kStages = kAhead + 1;
constexpr int kTileRows = 32, kTileCols = 8 * kWarps, kMTiles = kTileRows / 16;
constexpr int kStride = kStep + 8;  // bf16 values per staged x row: 16 bytes of padding for ldmatrix

// The dynamic shared memory of one block, in bytes: x, codes, and the (scale, bias) of each
// weight row's two halves of a step, per stage.
template <int kBits>
struct Layout {
  static constexpr int kCodeBytes = kStep * kBits / 8;  // one weight row's codes per step
  static constexpr int kX = kStages * kTileRows * kStride * 2;
  static constexpr int kCodes = kStages * kTileCols * kCodeBytes;
  static constexpr int kParams = kStages * kTileCols * 2 * 8;
  static constexpr int kBytes = kX + kCodes + kParams;
};

// An int below 2^23 as a float, exactly, without the slow integer conversion: the float of bits
// 2^23 | q is 2^23 + q.
__device__ inline float small_int_to_float(uint32_t q) { return __uint_as_float(0x4B000000u | q) - 8388608.0f; }

// The scale and bias of the group holding k of weight row n.
struct alignas(8) GroupParams {
  float scale, bias;
};
template <int kBits, typename S>
__device__ inline GroupParams group_params(const QuantArgs& w, int64_t n, int k, int group_shift) {
  const int64_t at = n * (w.K >> group_shift) + (k >> group_shift);
  const float scale = widen(static_cast<const S*>(w.scales)[at]);
  return {scale, w.biases != nullptr ? widen(static_cast<const S*>(w.biases)[at])
                                     : -static_cast<float>(1 << (kBits - 1)) * scale};
}

// Pair m of this lane (codes 8 m + 2c and 8 m + 2c + 1 of the step, from the step's words of
// its weight row) as two bf16 weights in one register.
template <int kBits>
__device__ inline uint32_t dequantize_pair(const uint32_t* words, int m, int c, GroupParams p) {
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int bit = (8 * m + 2 * c) * kBits;
  const uint32_t word = words[bit / 32] >> (bit % 32);
  const float q0 = small_int_to_float(word & kMask), q1 = small_int_to_float((word >> kBits) & kMask);
  return pack2<__nv_bfloat16>(__fadd_rn(__fmul_rn(p.scale, q0), p.bias), __fadd_rn(__fmul_rn(p.scale, q1), p.bias));
}

template <int kBits, typename S>
__global__ void __launch_bounds__(kThreads)
    quant_gemm_kernel(const __nv_bfloat16* x, int64_t T, QuantArgs w, const float* bias, float* y) {
  using L = Layout<kBits>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);                    // [kStages][kTileRows][kStride]
  unsigned char* cs = smem + L::kX;                                     // [kStages][kTileCols][kCodeBytes]
  auto* ps = reinterpret_cast<GroupParams*>(smem + L::kX + L::kCodes);  // [kStages][kTileCols][2]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTileRows, n0 = static_cast<int64_t>(blockIdx.y) * kTileCols;
  const int64_t K = w.K, N = w.N, row_bytes = K * kBits / 8;
  const int steps = static_cast<int>(K / kStep), group_shift = __ffs(w.group_size) - 1;
  const auto* packed = reinterpret_cast<const unsigned char*>(w.packed);
  wait_for_previous(__func__);

  // Step `step`'s x rows and weight codes into stage step % kStages; rows past T or N as zeros.
  auto stage = [&](int step) {
    const int st = step % kStages;
    constexpr int kXPieces = kStep / 8;  // 16-byte pieces per x row
#pragma unroll
    for (int i = 0; i < (kTileRows * kXPieces + kThreads - 1) / kThreads; ++i) {
      const int e = tid + i * kThreads, r = e / kXPieces, piece = e % kXPieces;
      if (e >= kTileRows * kXPieces) break;
      const bool live = t0 + r < T;
      const __nv_bfloat16* from = x + (live ? t0 + r : 0) * K + static_cast<int64_t>(step) * kStep + piece * 8;
      copy16_async_or_zero(xs + (st * kTileRows + r) * kStride + piece * 8, from, live);
    }
    constexpr int kCodePieces = L::kCodeBytes / 16;
#pragma unroll
    for (int i = 0; i < (kTileCols * kCodePieces + kThreads - 1) / kThreads; ++i) {
      const int e = tid + i * kThreads, r = e / kCodePieces, piece = e % kCodePieces;
      if (e >= kTileCols * kCodePieces) break;
      const bool live = n0 + r < N;
      const unsigned char* from =
          packed + (live ? n0 + r : 0) * row_bytes + static_cast<int64_t>(step) * L::kCodeBytes + piece * 16;
      copy16_async_or_zero(cs + (st * kTileCols + r) * L::kCodeBytes + piece * 16, from, live);
    }
  };

  // Thread tid < kTileCols loads the group params of the tile's weight row tid (a row past N holds
  // zero codes: row N - 1's params serve it) for a step's two halves (one group unless groups are
  // 32): a step ahead of the stage they go to, so that their latency hides behind a step's work.
  const bool loads_params = tid < kTileCols;
  const int64_t own_n = min(n0 + tid, N - 1);
  auto load_params = [&](int step, GroupParams(&p)[2]) {
    if (!loads_params) return;
    p[0] = group_params<kBits, S>(w, own_n, step * kStep, group_shift);
    p[1] = group_shift > 5 ? p[0] : group_params<kBits, S>(w, own_n, step * kStep + 32, group_shift);
  };
  auto put_params = [&](int step, const GroupParams(&p)[2]) {
    if (!loads_params) return;
    GroupParams* to = ps + ((step % kStages) * kTileCols + tid) * 2;
    to[0] = p[0];
    to[1] = p[1];
  };

  float acc[kMTiles][4] = {};
  GroupParams next[2];
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < steps) {
      stage(st);
      load_params(st, next);
      put_params(st, next);
    }
    commit_copies();
  }
  if (kStages - 1 < steps) load_params(kStages - 1, next);
  for (int step = 0; step < steps; ++step) {
    wait_copies<kStages - 2>();
    // This step's copies and params have landed, and every warp is done with the stage the next
    // ones overwrite.
    __syncthreads();
    if (step + kStages - 1 < steps) {
      stage(step + kStages - 1);
      put_params(step + kStages - 1, next);
      if (step + kStages < steps) load_params(step + kStages, next);
    }
    commit_copies();
    const int st = step % kStages;

    // This warp's weight row of the stage: its codes and params.
    const int r = warp * 8 + g;
    const auto* words = reinterpret_cast<const uint32_t*>(cs + (st * kTileCols + r) * L::kCodeBytes);
    const GroupParams* params = ps + (st * kTileCols + r) * 2;
    const __nv_bfloat16* xa = xs + st * kTileRows * kStride;
#pragma unroll
    for (int ks = 0; ks < kStep / 16; ++ks) {
      const uint32_t b0 = dequantize_pair<kBits>(words, 2 * ks, c, params[ks / 2]);
      const uint32_t b1 = dequantize_pair<kBits>(words, 2 * ks + 1, c, params[ks / 2]);
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        uint32_t a[4];
        load_matrices(a, xa + (mi * 16 + lane % 16) * kStride + ks * 16 + 8 * (lane / 16));
        mma<__nv_bfloat16>(acc[mi], a, b0, b1);
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t t = t0 + mi * 16 + g + 8 * h;
      if (t >= T) continue;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t n = n0 + warp * 8 + 2 * c + e;
        if (n < N) y[t * N + n] = acc[mi][2 * h + e] + (bias != nullptr ? bias[n] : 0.0f);
      }
    }
  }
}

template <int kBits, typename S>
void launch(cudaStream_t s, const __nv_bfloat16* x, int64_t T, const QuantArgs& w, const float* bias, float* y) {
  constexpr int kBytes = Layout<kBits>::kBytes;
  static_assert(kBytes <= 48 * 1024, "more dynamic shared memory needs cudaFuncSetAttribute");
  const dim3 grid(blocks_for(T, kTileRows), blocks_for(w.N, kTileCols));
  launch_kernel(quant_gemm_kernel<kBits, S>, grid, kThreads, kBytes, s, x, T, w, bias, y);
}

template <int kBits>
void launch_bits(cudaStream_t s, const __nv_bfloat16* x, int64_t T, const QuantArgs& w, const float* bias, float* y) {
  switch (w.scale_type) {
    case DType::kBF16: return launch<kBits, __nv_bfloat16>(s, x, T, w, bias, y);
    case DType::kF16: return launch<kBits, __half>(s, x, T, w, bias, y);
    default: return launch<kBits, float>(s, x, T, w, bias, y);
  }
}

}  // namespace

bool quant_gemm_fits(const QuantArgs& w) {
  const bool power_of_two = (w.group_size & (w.group_size - 1)) == 0;
  return (w.bits == 4 || w.bits == 8) && w.group_size >= 32 && power_of_two && w.K % kStep == 0 && w.K < (1 << 30) &&
         reinterpret_cast<uintptr_t>(w.packed) % 16 == 0 && w.N < 65535LL * kTileCols;
}

void quant_gemm(cudaStream_t s, const float* x, int64_t T, const QuantArgs& w, const float* bias, float* y,
                void* scratch) {
  auto* xb = static_cast<__nv_bfloat16*>(scratch);
  round_to_16bit(s, x, T * w.K, DType::kBF16, xb);
  if (w.bits == 4) {
    launch_bits<4>(s, xb, T, w, bias, y);
  } else {
    launch_bits<8>(s, xb, T, w, bias, y);
  }
}

}  // namespace hearth::cuda
