// Kernel launches that may start before the previous kernel in the stream has finished
// (programmatic dependent launch, sm_90 and later). A decode step is hundreds of short kernels;
// serialized, each pays a launch and a ramp-up after its predecessor's last block, and for the
// small matrices of a 4-bit model that gap is as long as the work. Launched early, a kernel's
// blocks are resident when its predecessor ends, the heads of their weight rows already in L2
// where the predecessor left memory idle (matmul.cu says where it did not).
//
// The contract, for every kernel started by launch_kernel: each thread calls
// wait_for_previous() before it reads anything an earlier kernel wrote and before it writes
// anything (an early start must neither read an input too soon nor overwrite one still being
// read), and calls it even when it has nothing to do, so that the kernel ends only after its
// predecessor has (the next kernel's wait covers all the earlier ones). Before the wait a kernel
// may only ask L2 for memory (a prefetch reads nothing into the kernel, and L2 is coherent), read
// what it needs to choose the addresses, where a stale value costs a useless prefetch, never a
// wrong result, and read what no kernel writes (the model's weights; the KV cache rows of
// positions before the step, used only where the metadata read after the wait names the same
// row: attention.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/timeline.cuh"

namespace hearth::cuda {

// Waits until the kernels before this one in the stream have finished and their writes are
// visible; then lets the next kernel be launched (its blocks wait in their own call). Kernels
// pass their __func__, which names them in the timeline of builds that record one (timeline.cuh).
__device__ inline void wait_for_previous([[maybe_unused]] const char* kernel = nullptr) {
#ifdef HEARTH_CUDA_TIMELINE
  const uint64_t arrived = globaltimer();
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
#ifdef HEARTH_CUDA_TIMELINE
  timeline_record(kernel, arrived);
#endif
}

// Warp-wide: asks L2 for the head of a weight row, [p, p + min(bytes, kRowHeadBytes)): what the
// warp's first round of loads reads (32 lanes x 4 x 16 bytes), lane i taking line i. Whole rows
// would not fit: every resident warp asking for its row is 8448 warps x 28 KiB for the down
// projection against a 50 MB L2, and read the big matrices ~30% slower (bench/RESULTS.md).
constexpr int64_t kRowHeadBytes = 2048;
__device__ inline void prefetch_line(uintptr_t line) { asm volatile("prefetch.global.L2 [%0];" ::"l"(line)); }
__device__ inline void prefetch_row_head(const void* p, int64_t bytes, int lane) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(min(bytes, kRowHeadBytes));
  const uintptr_t line = first + static_cast<uintptr_t>(lane) * 128;
  if (line < end) prefetch_line(line);
}

// kernel<<<grid, block, shared, s>>>(args...) in clusters of `cluster` blocks along x (1: no
// clusters; more needs block_clusters()), allowed to start early where the device supports it
// and HEARTH_CUDA_PDL is on (early_launch, memory.cu); checks the launch.
template <typename... Params, typename... Args>
void launch_cluster_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster, size_t shared,
                           cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (early_launch()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = s;
  config.attrs = attrs;
  config.numAttrs = n;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), "kernel launch");
}

// Warps of `kernel` (blocks of `threads`, `shared` bytes of dynamic shared memory each) that the
// current GPU holds at once, all SMs full.
template <typename Kernel>
int64_t resident_warps(Kernel kernel, int threads, size_t shared = 0) {
  int device = 0, sms = 0, blocks = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&device));
  HEARTH_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  HEARTH_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared));
  return int64_t{sms} * blocks * (threads / 32);
}

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t s, Args&&... args) {
  launch_cluster_kernel(kernel, grid, block, 1, shared, s, std::forward<Args>(args)...);
}

}  // namespace hearth::cuda
