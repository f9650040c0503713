// New K/V rows into the paged cache, rounded to the cache's element type (round to nearest
// even, as the CPU's store_f32_as), one thread per element. k, v: [T, row] f32; caches:
// [n_slots, row].
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
__global__ void kv_write_kernel(const float* k, const float* v, int64_t T_rows, int64_t row, const int32_t* slots,
                                int64_t n_slots, T* k_cache, T* v_cache, int32_t* errors) {
  wait_for_previous(__func__);
  const int64_t at = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (at >= T_rows * row) return;
  const int64_t t = at / row, e = at % row;
  const int32_t slot = slots[t];
  if (slot < 0 || slot >= n_slots) {
    if (e == 0) report_error(errors, kBadSlot, slot, static_cast<int32_t>(n_slots));
    return;
  }
  const int64_t dst = static_cast<int64_t>(slot) * row + e;
  k_cache[dst] = narrow<T>(k[at]);
  v_cache[dst] = narrow<T>(v[at]);
}

template <typename T>
void launch(cudaStream_t s, const float* k, const float* v, int64_t T_rows, int64_t row, const int32_t* slots,
            int64_t n_slots, void* k_cache, void* v_cache, int32_t* errors) {
  launch_kernel(kv_write_kernel<T>, blocks_for(T_rows * row, kThreads), kThreads, 0, s, k, v, T_rows, row, slots,
                n_slots, static_cast<T*>(k_cache), static_cast<T*>(v_cache), errors);
}

}  // namespace

void kv_write(cudaStream_t s, const float* k, const float* v, int64_t T, int64_t row, const int32_t* slots,
              int64_t n_slots, void* k_cache, void* v_cache, DType type, int32_t* errors) {
  if (T * row == 0) return;
  switch (type) {
    case DType::kF16: launch<__half>(s, k, v, T, row, slots, n_slots, k_cache, v_cache, errors); break;
    case DType::kBF16: launch<__nv_bfloat16>(s, k, v, T, row, slots, n_slots, k_cache, v_cache, errors); break;
    default: launch<float>(s, k, v, T, row, slots, n_slots, k_cache, v_cache, errors); break;
  }
}

}  // namespace hearth::cuda
