// Embedding rows of a table that the kernels read element by element (quantized tables, MLX
// affine and ggml blocks): out [T, K] f32, row t = the table's row ids[t]. A bad id gives a row
// of zeros and is reported in the device's error word (kernels.h).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {

// Value()(w, n, k): element k of row n of the table w (Args with N rows of K).
template <typename Args, typename Value>
__global__ void table_rows_kernel(Args w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  wait_for_previous(__func__);
  const int64_t i = blockIdx.x * 256LL + threadIdx.x;
  if (i >= T * w.K) return;
  const int64_t t = i / w.K, k = i % w.K;
  const int32_t id = ids[t];
  if (id < 0 || id >= w.N) {
    out[i] = 0.0f;
    if (k == 0) report_error(errors, kBadTokenId, id, static_cast<int32_t>(w.N));
    return;
  }
  out[i] = Value()(w, id, k);
}

template <typename Value, typename Args>
void table_rows(cudaStream_t s, const Args& w, const int32_t* ids, int64_t T, float* out, int32_t* errors) {
  launch_kernel(table_rows_kernel<Args, Value>, blocks_for(T * w.K, 256), 256, 0, s, w, ids, T, out, errors);
}

}  // namespace hearth::cuda
