// Element conversions the kernels share: f32 <-> the storage types (f32, bf16, f16), rounding to
// nearest even as the CPU's conversions do.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace hearth::cuda {

template <typename T>
__device__ inline float widen(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return static_cast<float>(v);
  }
}

template <typename T>
__device__ inline T narrow(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

}  // namespace hearth::cuda
