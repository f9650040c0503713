// Varlen paged attention with GQA, causal and sliding-window masks (semantics as the CPU
// reference, backends/cpu/attention.cpp). q: [T, Hq, Dh] f32; K/V cache: [n_blocks,
// block_size, Hkv, Dh] f32|f16|bf16; out: [T, Hq, Dh] f32.
//
// One block of kWarps warps per (query row, head). Warp w takes the positions lo + 2w,
// lo + 2w + 1, lo + 2w + 2 kWarps, ... two at a time (both rows' loads in flight before either
// score is reduced: a decode row is latency-bound, not bandwidth-bound) and keeps an online
// softmax over them (running max m, sum l, and the weighted V sum in registers, lane i holding
// dims i, i + 32, ...); the warps' states are merged at the end. K and V rows are read whole by
// a warp, so each load is coalesced.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/reduce.cuh"
#include "base/error.h"

namespace hearth::cuda {
namespace {

constexpr int kWarps = 16;
constexpr int kMaxDimsPerLane = 8;  // Dh <= 256

template <typename T>
__global__ void attention_kernel(AttentionArgs a) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // The sequence of row t: the last s with seq_starts[s] <= t.
  int64_t lo_s = 0, hi_s = a.n_seqs - 1;
  while (lo_s < hi_s) {
    const int64_t mid = (lo_s + hi_s + 1) / 2;
    if (a.seq_starts[mid] <= t) {
      lo_s = mid;
    } else {
      hi_s = mid - 1;
    }
  }
  const int64_t seq = lo_s;
  const int64_t c = a.context_lens[seq] + t - a.seq_starts[seq];
  const int64_t lo = a.window > 0 ? max(int64_t{0}, c - a.window + 1) : 0;
  const int64_t kv_head = h / (a.Hq / a.Hkv);
  const float* q = a.q + (t * a.Hq + h) * a.Dh;
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);

  float qr[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  const int dims = static_cast<int>((a.Dh - lane + 31) / 32);  // this lane's dims: lane + 32 i
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    qr[i] = i < dims ? q[lane + 32 * i] * a.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  auto row_of = [&](int64_t j) {
    const int64_t b = a.block_tables[seq * a.max_blocks + j / a.block_size];
    return (b * a.block_size + j % a.block_size) * a.Hkv + kv_head;
  };
  for (int64_t j = lo + 2 * warp; j <= c; j += 2 * kWarps) {
    const bool two = j + 1 <= c;
    const T* k0 = k_cache + row_of(j) * a.Dh;
    const T* k1 = two ? k_cache + row_of(j + 1) * a.Dh : k0;
    float kr0[kMaxDimsPerLane], kr1[kMaxDimsPerLane];
    for (int i = 0; i < dims; ++i) {
      kr0[i] = widen(k0[lane + 32 * i]);
      kr1[i] = widen(k1[lane + 32 * i]);
    }
    float s0 = 0.0f, s1 = 0.0f;
    for (int i = 0; i < dims; ++i) {
      s0 += qr[i] * kr0[i];
      s1 += qr[i] * kr1[i];
    }
    s0 = warp_sum(s0);
    s1 = two ? warp_sum(s1) : -INFINITY;
    const T* v0 = v_cache + (k0 - k_cache);
    const T* v1 = v_cache + (k1 - k_cache);
    const float m_new = fmaxf(m, fmaxf(s0, s1));
    const float keep = expf(m - m_new), p0 = expf(s0 - m_new), p1 = two ? expf(s1 - m_new) : 0.0f;
    l = l * keep + p0 + p1;
    for (int i = 0; i < dims; ++i) {
      acc[i] = acc[i] * keep + p0 * widen(v0[lane + 32 * i]) + p1 * widen(v1[lane + 32 * i]);
    }
    m = m_new;
  }
  // Merge the warps: out = sum_w acc_w e^(m_w - M) / sum_w l_w e^(m_w - M).
  __shared__ float ms[kWarps], ls[kWarps];
  __shared__ float accs[kWarps][32 * kMaxDimsPerLane];
  if (lane == 0) {
    ms[warp] = m;
    ls[warp] = l;
  }
  for (int i = 0; i < dims; ++i) accs[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float big = -INFINITY;
  for (int w = 0; w < kWarps; ++w) big = fmaxf(big, ms[w]);
  float total = 0.0f, weight[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = ms[w] == -INFINITY ? 0.0f : expf(ms[w] - big);  // a warp that saw no position
    total += ls[w] * weight[w];
  }
  float* out = a.out + (t * a.Hq + h) * a.Dh;
  for (int64_t d = threadIdx.x; d < a.Dh; d += kWarps * 32) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += accs[w][d] * weight[w];
    out[d] = o / total;
  }
}

}  // namespace

void attention(cudaStream_t s, const AttentionArgs& a) {
  if (a.T == 0 || a.Hq == 0) return;
  HEARTH_CHECK(a.Dh <= 32 * kMaxDimsPerLane);
  const dim3 grid(static_cast<unsigned>(a.T), static_cast<unsigned>(a.Hq));
  switch (a.kv_dtype) {
    case DType::kF16: attention_kernel<__half><<<grid, kWarps * 32, 0, s>>>(a); break;
    case DType::kBF16: attention_kernel<__nv_bfloat16><<<grid, kWarps * 32, 0, s>>>(a); break;
    default: attention_kernel<float><<<grid, kWarps * 32, 0, s>>>(a); break;
  }
  HEARTH_CUDA_LAUNCHED("attention");
}

}  // namespace hearth::cuda
