// Embedding gather: out[t, :] = table[ids[t], :] widened to f32, one thread per element.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/convert.cuh"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_kernel(const T* table, int64_t V, int64_t D, const int32_t* ids, int64_t T_rows, float* out,
                                 int32_t* errors) {
  wait_for_previous(__func__);
  const int64_t at = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (at >= T_rows * D) return;
  const int64_t t = at / D, d = at % D;
  const int32_t id = ids[t];
  if (id < 0 || id >= V) {
    out[at] = 0.0f;
    if (d == 0) report_error(errors, kBadTokenId, id, static_cast<int32_t>(V));
    return;
  }
  out[at] = widen(table[static_cast<int64_t>(id) * D + d]);
}

}  // namespace

void embedding(cudaStream_t s, const void* table, DType type, int64_t V, int64_t D, const int32_t* ids, int64_t T,
               float* out, int32_t* errors) {
  const int64_t n = T * D;
  if (n == 0) return;
  const unsigned blocks = blocks_for(n, kThreads);
  switch (type) {
    case DType::kBF16:
      launch_kernel(embedding_kernel<__nv_bfloat16>, blocks, kThreads, 0, s, static_cast<const __nv_bfloat16*>(table),
                    V, D, ids, T, out, errors);
      break;
    case DType::kF16:
      launch_kernel(embedding_kernel<__half>, blocks, kThreads, 0, s, static_cast<const __half*>(table), V, D, ids, T,
                    out, errors);
      break;
    default:
      launch_kernel(embedding_kernel<float>, blocks, kThreads, 0, s, static_cast<const float*>(table), V, D, ids, T,
                    out, errors);
      break;
  }
}

}  // namespace hearth::cuda
