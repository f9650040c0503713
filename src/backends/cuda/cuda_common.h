// What every CUDA file of the backend shares: error checks that throw, the device's stream,
// and launch helpers. Host code only (the kernels are in the .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>

#include "core/device.h"

namespace hearth::cuda {

// Throws std::runtime_error naming the call and CUDA's message when e is not cudaSuccess.
void check(cudaError_t e, const char* what);
#define HEARTH_CUDA_CHECK(call) ::hearth::cuda::check((call), #call)

// Makes `device` current and returns its stream: every kernel and copy of the backend on that
// device runs in this one stream, so each sees the results of the ones before it.
cudaStream_t use_device(Device device);

// Whether kernels on the calling thread's current device (the last use_device) may start before
// the previous kernel ends (launch.cuh): compute capability 9.0 or later and HEARTH_CUDA_PDL on,
// read at the device's first use.
bool early_launch();
// Whether it runs thread block clusters (compute capability 9.0 or later).
bool block_clusters();

// The device memory of one recorded graph (memory.cu): blocks the graph's work allocated or
// freed while it was recorded, kept for its replays. Between begin and end every allocation
// and free on the device goes through the pool; dissolve gives its blocks back to the cache.
struct GraphPool {
  std::multimap<size_t, void*> free;  // the pool's blocks not held by a live tensor, by size
};
void begin_graph_pool(Device device, GraphPool* pool);
void end_graph_pool(Device device);
void dissolve_graph_pool(Device device, GraphPool* pool);

inline unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace hearth::cuda
