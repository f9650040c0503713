// The processed logits on the GPU: ops::edit_logits (the Sampler's logit processors as per-token
// edits) and ops::logprobs (log_softmax of the chosen token and the best few), so that a request
// with logit_bias, penalties or logprobs still sends only its token and a few numbers to the
// host, not its row of logits.
//
// logprobs: one block of 1024 threads per row, two passes over the row. The first takes the
// maximum and each thread's n best keys (sampling::full_key: descending logit, ties by lower
// id) by the host's bounded insertion (sampling::keep_smallest); the second sums exp(l - max)
// in double. Then n block-wide minimums over the threads' heads merge the lists.
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

__global__ void logprobs_kernel(const float* logits, int64_t V, const int32_t* ids, int n, float* chosen,
                                int32_t* top_ids, float* top, int32_t* errors) {
  __shared__ u64 key_part[kWarps];
  __shared__ float max_part[kWarps];
  __shared__ double sum_part[kWarps];
  wait_for_previous(__func__);
  const int64_t r = blockIdx.x;
  const float* l = logits + r * V;

  u64 best[kMaxTopLogprobs];
  int have = 0;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) {
    const float v = l[i];
    mx = fmaxf(mx, v);  // skips NaN
    if (n > 0) sampling::keep_smallest<u64>(best, have, n, sampling::full_key(sampling::order_key(v), i));
  }
  mx = block_reduce<kThreads>(
      mx, [](float a, float b) { return fmaxf(a, b); }, -INFINITY, max_part);
  double sum = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) {
    const float e = expf(l[i] - mx);
    if (!isnan(e)) sum += static_cast<double>(e);
  }
  sum = block_reduce<kThreads>(
      sum, [](double a, double b) { return a + b; }, 0.0, sum_part);
  const double log_z = static_cast<double>(mx) + log(sum);
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
  // The n smallest keys of all threads' lists, in order: the keys are unique, so one thread
  // holds each minimum and moves past it.
  int head = 0;
  for (int j = 0; j < n; ++j) {
    const u64 mine = head < have ? best[head] : kNone;
    const u64 least = block_reduce<kThreads>(
        mine, [](u64 a, u64 b) { return a < b ? a : b; }, kNone, key_part);
    if (mine == least) ++head;
    if (threadIdx.x == 0) {
      const auto id = static_cast<int32_t>(least & 0xffffffffu);
      top_ids[r * n + j] = id;
      top[r * n + j] = logprob(id);
    }
  }
}

}  // namespace

void edit_logits(cudaStream_t s, float* logits, int64_t R, int64_t V, const LogitEdit* edits, int64_t E,
                 int32_t* errors) {
  if (E == 0) return;
  launch_kernel(edit_logits_kernel, dim3(static_cast<unsigned>((E + kEditThreads - 1) / kEditThreads)), kEditThreads, 0,
                s, logits, R, V, edits, E, errors);
}

void logprobs(cudaStream_t s, const float* logits, int64_t R, int64_t V, const int32_t* ids, int n, float* chosen,
              int32_t* top_ids, float* top, int32_t* errors) {
  if (R == 0) return;
  launch_kernel(logprobs_kernel, dim3(static_cast<unsigned>(R)), kThreads, 0, s, logits, V, ids, n, chosen, top_ids,
                top, errors);
}

}  // namespace hearth::cuda
