// Weight loads of the matrix-vector kernels.
#pragma once

#include <cuda_runtime.h>

namespace hearth::cuda {

// 16 bytes of a matrix that is read once per launch: through the read-only path, not kept in L1,
// where the activations every warp re-reads stay.
__device__ inline uint4 load_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

}  // namespace hearth::cuda
