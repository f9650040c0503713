// y[t, n] = sum_k x[t, k] * w[n, k] + bias[n]
// x: [T, K] f32, w: [N, K] f32|bf16|f16 (the HF Linear layout), y: [T, N] f32.
// Threads split N, and each weight row is read from memory once per call, applied to every row
// of x while it sits in cache. Decode (T <= kStreamRows) walks a thread's weight rows one after
// another: one run of ascending addresses, the one access pattern the hardware prefetchers
// follow at full speed (four runs 4-12 KiB apart read bf16 at 12.7 GB/s on one core of the
// 2-core EPYC, against 26-27 one row at a time; matvec_bench, bench/RESULTS.md, 2026-12-05).
// Prefill (T > kStreamRows) takes the register tiles of matmul_tiles.cpp.
#include <algorithm>
#include <vector>

#include "backends/cpu/dot.h"
#include "backends/cpu/kernels.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kRowsPerBlock = 4;
constexpr int64_t kStreamRows = 4;  // rows of x up to which the weight rows go one at a time

// out[t] = dot(x[t], w) for kT rows of x (rows K apart) and one weight row: each weight vector
// is loaded and widened once for the kT rows, right before its FMAs (with the two widenings of
// a step back to back, gcc's code read bf16 at 13 GB/s on one core instead of 22). bf16 takes
// four accumulators per row of x, f32 and f16 two: with four, bf16 read 4-9% faster on one core
// and f32 no faster (matvec_bench; bench/RESULTS.md, 2026-12-05).
template <DType BT, int kT>
HEARTH_AVX512 void row_dots_avx512(const float* x, int64_t K, const void* w, float* out) {
  constexpr int kAcc = BT == DType::kBF16 ? 4 : 2;
  __m512 acc[kT][kAcc];
  for (int t = 0; t < kT; ++t) {
    for (int i = 0; i < kAcc; ++i) acc[t][i] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 * kAcc <= K; k += 16 * kAcc) {
    for (int i = 0; i < kAcc; ++i) {
      const __m512 wv = simd::load16<BT>(w, k + 16 * i, 0xffff);
      for (int t = 0; t < kT; ++t) acc[t][i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + t * K + k + 16 * i), wv, acc[t][i]);
    }
  }
  for (; k < K; k += 16) {  // accumulator 0 only: a runtime index would put acc in memory
    const __mmask16 m = simd::tail_mask16(K - k);
    const __m512 wv = simd::load16<BT>(w, k, m);
    for (int t = 0; t < kT; ++t) acc[t][0] = _mm512_fmadd_ps(simd::load16_f32(x + t * K + k, m), wv, acc[t][0]);
  }
  for (int t = 0; t < kT; ++t) {
    __m512 sum = acc[t][0];
    for (int i = 1; i < kAcc; ++i) sum = _mm512_add_ps(sum, acc[t][i]);
    out[t] = _mm512_reduce_add_ps(sum);
  }
}

// Decode: weight rows n_begin .. n_end one at a time (see the top of the file).
template <DType BT>
void stream_rows(Isa isa, const float* x, int64_t T, int64_t K, const void* w, int64_t n_begin, int64_t n_end,
                 int64_t N, const float* bias, float* y) {
  constexpr size_t kElem = BT == DType::kF32 ? 4 : 2;
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const void* w_row = wb + static_cast<size_t>(n) * K * kElem;
    float out[kStreamRows];
    if (isa == Isa::kAvx512) {
      switch (T) {
        case 1: row_dots_avx512<BT, 1>(x, K, w_row, out); break;
        case 2: row_dots_avx512<BT, 2>(x, K, w_row, out); break;
        case 3: row_dots_avx512<BT, 3>(x, K, w_row, out); break;
        default: row_dots_avx512<BT, 4>(x, K, w_row, out); break;
      }
    } else {
      for (int64_t t = 0; t < T; ++t) out[t] = dot_avx2<BT>(x + t * K, w_row, K);
    }
    for (int64_t t = 0; t < T; ++t) y[t * N + n] = out[t] + (bias ? bias[n] : 0.0f);
  }
}

// The scalar reference, for every T.
template <DType BT>
void matmul_rows_scalar(const float* x, int64_t T, int64_t K, const void* w, int64_t n_begin, int64_t n_end, int64_t N,
                        const float* bias, float* y) {
  constexpr size_t kElem = BT == DType::kF32 ? 4 : 2;
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const void* w_row = wb + static_cast<size_t>(n) * K * kElem;
    for (int64_t t = 0; t < T; ++t) y[t * N + n] = dot_scalar<BT>(x + t * K, w_row, K) + (bias ? bias[n] : 0.0f);
  }
}

}  // namespace

bool matmul_rounds_x_to_bf16(Isa isa, DType w_type, int64_t T) {
  return isa == Isa::kAvx512 && w_type == DType::kBF16 && T > kStreamRows && has_avx512_bf16();
}

void matmul(Isa isa, ThreadPool* pool, const float* x, int64_t T, int64_t K, const void* w, DType w_type, int64_t N,
            const float* bias, float* y) {
  if (matmul_rounds_x_to_bf16(isa, w_type, T)) {
    matmul_bf16_dots(pool, x, T, K, static_cast<const uint16_t*>(w), N, bias, y);
    return;
  }
  if (isa != Isa::kScalar && T > kStreamRows) {
    matmul_fma_tiles(isa, pool, x, T, K, w, w_type, N, bias, y);
    return;
  }
  dispatch_float(w_type, [&]<DType BT>() {
    auto run = [&](int64_t begin, int64_t end) {
      // Chunks are in units of 4-row blocks so only the last chunk has a ragged tail.
      const int64_t n0 = begin * kRowsPerBlock, n1 = std::min(N, end * kRowsPerBlock);
      if (isa != Isa::kScalar) {
        stream_rows<BT>(isa, x, T, K, w, n0, n1, N, bias, y);
      } else {
        matmul_rows_scalar<BT>(x, T, K, w, n0, n1, N, bias, y);
      }
    };
    const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    // Enough work per chunk to pay for waking a thread (~64k multiply-adds).
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, K * T * kRowsPerBlock));
    if (pool != nullptr) {
      pool->parallel_for(blocks, grain, run);
    } else {
      run(0, blocks);
    }
  });
}

}  // namespace hearth::cpu
