// The processed logits on the GPU: ops::edit_logits (the Sampler's logit processors as per-token
// edits) and ops::logprobs (log_softmax of the chosen token and the best few), so that a request
// with logit_bias, penalties or logprobs still sends only its token and a few numbers to the
// host, not its row of logits.
//
// logprobs in two kernels. The first gives each row B slices (up to kMaxSlices blocks of 1024
// threads, about V / B keys each): a slice's maximum, its sum of exp(l - max) in double, and its
// n best keys (sampling::full_key: descending logit, ties by lower id), found 1024 keys at a time
// by a bitonic sort in shared memory of those keys and the best so far. The second merges a
// row's slices: the maximum, the sum rescaled to it (log_z), and the n best of the B * n
// candidates by one more sort. One block per row walking the whole row took 427 us a row of
// 128256 on an H100 (bench/RESULTS.md, stop 51).
#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/reduce.cuh"
#include "core/logprobs.h"

namespace hearth::cuda {
namespace {

using u64 = unsigned long long;  // the type CUDA's 64-bit shuffles take
constexpr int kEditThreads = 256;
constexpr int kThreads = 1024, kWarps = kThreads / 32;
constexpr u64 kNone = ~u64{0};
constexpr int64_t kMaxSlices = 128;
constexpr int kMaxCandidates = 4096;  // a power of two, at least kMaxSlices * kMaxTopLogprobs
static_assert(kMaxSlices * kMaxTopLogprobs <= kMaxCandidates && kMaxTopLogprobs <= kThreads);

__global__ void edit_logits_kernel(float* logits, int64_t R, int64_t V, const LogitEdit* edits, int64_t E,
                                   int32_t* errors) {
  wait_for_previous(__func__);
  const int64_t i = int64_t{blockIdx.x} * kEditThreads + threadIdx.x;
  if (i >= E) return;
  const LogitEdit e = edits[i];
  if (e.row < 0 || e.row >= R) return report_error(errors, kBadEditRow, e.row, static_cast<int32_t>(R));
  if (e.id < 0 || e.id >= V) return report_error(errors, kBadEditToken, e.id, static_cast<int32_t>(V));
  float& l = logits[e.row * V + e.id];
  l = sampling::edit_logit(l, e);
}

// Sorts keys[0, n) ascending, n a power of two, with the block's kThreads threads; the block is
// synced before and after.
__device__ void bitonic_sort(u64* keys, int n) {
  for (int k = 2; k <= n; k *= 2) {
    for (int j = k / 2; j > 0; j /= 2) {
      __syncthreads();
      for (int i = threadIdx.x; i < n / 2; i += kThreads) {
        const int a = 2 * i - (i & (j - 1)), b = a + j;  // the pair's lower index has bit j clear
        const u64 x = keys[a], y = keys[b];
        if ((x > y) == ((a & k) == 0)) {
          keys[a] = y;
          keys[b] = x;
        }
      }
    }
  }
  __syncthreads();
}

// Where a row's slices leave their parts (scratch): sums [R, B] double, maxima [R, B] f32, and
// keys [R, B, n].
struct SliceParts {
  double* sum;
  u64* keys;
  float* max;
};
SliceParts slice_parts(void* scratch, int64_t R, int64_t B, int n) {
  auto* sum = static_cast<double*>(scratch);
  auto* keys = reinterpret_cast<u64*>(sum + R * B);
  return {sum, keys, reinterpret_cast<float*>(keys + R * B * n)};
}

// Grid (B, R): slice b of row r, [b * slice, min(V, (b + 1) * slice)).
__global__ void logprobs_slices_kernel(const float* logits, int64_t V, int64_t slice, int n, SliceParts parts) {
  __shared__ u64 keys[2 * kThreads];  // a chunk's keys, then the best so far (kNone past n)
  __shared__ float max_part[kWarps];
  __shared__ double sum_part[kWarps];
  wait_for_previous(__func__);
  const int64_t r = blockIdx.y, B = gridDim.x, at = r * B + blockIdx.x;
  const float* l = logits + r * V;
  const int64_t begin = blockIdx.x * slice, end = min(V, begin + slice);
  float mx = -INFINITY;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) mx = fmaxf(mx, l[i]);  // skips NaN
  mx = block_reduce<kThreads>(
      mx, [](float a, float b) { return fmaxf(a, b); }, -INFINITY, max_part);
  double sum = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float e = expf(l[i] - mx);
    if (!isnan(e)) sum += static_cast<double>(e);
  }
  sum = block_reduce<kThreads>(
      sum, [](double a, double b) { return a + b; }, 0.0, sum_part);
  if (threadIdx.x == 0) {
    parts.max[at] = mx;
    parts.sum[at] = sum;
  }
  if (n == 0) return;
  keys[kThreads + threadIdx.x] = kNone;
  for (int64_t c = begin; c < end; c += kThreads) {
    const int64_t i = c + threadIdx.x;
    keys[threadIdx.x] = i < end ? sampling::full_key(sampling::order_key(l[i]), i) : kNone;
    bitonic_sort(keys, 2 * kThreads);
    const u64 best = threadIdx.x < n ? keys[threadIdx.x] : kNone;
    __syncthreads();  // all have read the sorted keys
    keys[kThreads + threadIdx.x] = best;
  }
  __syncthreads();
  if (threadIdx.x < n) parts.keys[at * n + threadIdx.x] = keys[kThreads + threadIdx.x];
}

// Grid R: row r's slices merged into its chosen token's logprob and the n best.
__global__ void logprobs_merge_kernel(const float* logits, int64_t V, int64_t B, const int32_t* ids, int n,
                                      SliceParts parts, float* chosen, int32_t* top_ids, float* top, int32_t* errors) {
  __shared__ u64 keys[kMaxCandidates];
  __shared__ float max_part[kWarps];
  __shared__ double sum_part[kWarps];
  wait_for_previous(__func__);
  const int64_t r = blockIdx.x;
  float mx = -INFINITY;
  for (int64_t b = threadIdx.x; b < B; b += kThreads) mx = fmaxf(mx, parts.max[r * B + b]);
  mx = block_reduce<kThreads>(
      mx, [](float a, float b) { return fmaxf(a, b); }, -INFINITY, max_part);
  double sum = 0;
  for (int64_t b = threadIdx.x; b < B; b += kThreads) {
    const double part = parts.sum[r * B + b];  // 0 where the slice has no finite logit
    if (part > 0) sum += part * exp(static_cast<double>(parts.max[r * B + b]) - static_cast<double>(mx));
  }
  sum = block_reduce<kThreads>(
      sum, [](double a, double b) { return a + b; }, 0.0, sum_part);
  const double log_z = static_cast<double>(mx) + log(sum);
  const float* l = logits + r * V;
  auto logprob = [&](int64_t i) { return static_cast<float>(static_cast<double>(l[i]) - log_z); };
  if (threadIdx.x == 0) {
    const int32_t id = ids[r];
    if (id >= 0 && id < V) {
      chosen[r] = logprob(id);
    } else {
      chosen[r] = NAN;
      report_error(errors, kBadChosenToken, id, static_cast<int32_t>(V));
    }
  }
  if (n == 0) return;
  const int m = static_cast<int>(B) * n;
  int padded = 2;
  while (padded < m) padded *= 2;
  for (int i = threadIdx.x; i < padded; i += kThreads) keys[i] = i < m ? parts.keys[r * B * n + i] : kNone;
  bitonic_sort(keys, padded);
  if (threadIdx.x < n) {
    const auto id = static_cast<int32_t>(keys[threadIdx.x] & 0xffffffffu);
    top_ids[r * n + threadIdx.x] = id;
    top[r * n + threadIdx.x] = logprob(id);
  }
}

// Slices per row: one per kThreads keys, at most kMaxSlices, so that the candidates fit the
// merge's sort.
int64_t slices(int64_t V) { return std::clamp<int64_t>((V + kThreads - 1) / kThreads, 1, kMaxSlices); }

}  // namespace

void edit_logits(cudaStream_t s, float* logits, int64_t R, int64_t V, const LogitEdit* edits, int64_t E,
                 int32_t* errors) {
  if (E == 0) return;
  launch_kernel(edit_logits_kernel, dim3(static_cast<unsigned>((E + kEditThreads - 1) / kEditThreads)), kEditThreads, 0,
                s, logits, R, V, edits, E, errors);
}

int64_t logprobs_scratch_bytes(int64_t R, int64_t V, int n) {
  return R * slices(V) * static_cast<int64_t>(sizeof(double) + sizeof(float) + n * sizeof(u64));
}

void logprobs(cudaStream_t s, const float* logits, int64_t R, int64_t V, const int32_t* ids, int n, float* chosen,
              int32_t* top_ids, float* top, int32_t* errors, void* scratch) {
  if (R == 0) return;
  HEARTH_CHECK(n >= 0 && n <= kMaxTopLogprobs && R <= 65535);
  const int64_t B = slices(V), slice = (V + B - 1) / B;
  const SliceParts parts = slice_parts(scratch, R, B, n);
  launch_kernel(logprobs_slices_kernel, dim3(static_cast<unsigned>(B), static_cast<unsigned>(R)), kThreads, 0, s,
                logits, V, slice, n, parts);
  launch_kernel(logprobs_merge_kernel, dim3(static_cast<unsigned>(R)), kThreads, 0, s, logits, V, B, ids, n, parts,
                chosen, top_ids, top, errors);
}

}  // namespace hearth::cuda
