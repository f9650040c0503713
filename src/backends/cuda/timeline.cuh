// The in-graph timeline of one decode step, for builds configured with -DHEARTH_CUDA_TIMELINE=ON
// (off by default: every other build compiles none of the recording). A replayed graph is
// opaque to the host, and the device machine has no Nsight Systems, so each block stamps its
// passage through wait_for_previous() (launch.cuh): when it arrived and when the wait let it go,
// that is, when the kernel before it had finished and its writes were visible. The 64th replay
// of a graph is recorded and written as a report by timeline.cu (knob HEARTH_CUDA_TIMELINE).
//
// A block's record goes to a slot picked by hashing its fields, not by a shared counter: an
// atomic's round trip on the recording thread would delay the very blocks being timed. Two
// blocks that hash to one slot lose one record (about 1 in 300 at a step's ~60k blocks), which
// the report's per-launch minima and maxima barely notice.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hearth::cuda {

struct TimelineRecord {
  uint64_t arrived, released;  // %globaltimer (ns): the block at its wait, and let go
  const char* kernel;          // the kernel's __func__, a device address (0 in an empty slot)
  uint32_t block, blocks;      // linear block index, grid size
  uint32_t sm, check;          // check: timeline_check of the other fields (a torn slot fails it)
};

struct TimelineSink {
  TimelineRecord* records = nullptr;
  uint64_t slots = 0;  // a power of two
  int on = 0;
};

__host__ __device__ inline uint32_t timeline_check(const TimelineRecord& r) {
  uint64_t h = r.arrived * 0x9E3779B97F4A7C15ull ^ r.released;
  h = (h ^ reinterpret_cast<uintptr_t>(r.kernel)) * 0xBF58476D1CE4E5B9ull;
  h ^= (static_cast<uint64_t>(r.block) << 32 | r.blocks) * 0x94D049BB133111EBull;
  h ^= r.sm;
  return static_cast<uint32_t>(h ^ h >> 31 ^ h >> 47);
}

// Host (timeline.cu). Each translation unit that launches kernels registers the function that
// points its own copy of the sink (a __constant__ per unit: no relocatable device code) at the
// shared records.
void timeline_register(void (*point_at)(const TimelineSink&));
// Called by each graph replay with its count (1, 2, ...): whether to record this one.
bool timeline_wanted(uint64_t replay);
void timeline_begin(cudaStream_t s);
// Waits for the replay, then writes the report to the knob's file.
void timeline_end(cudaStream_t s);
// The report of a replay's valid records, sorted by arrival (timeline.cu says what it holds).
void timeline_report(const std::vector<TimelineRecord>& records, const std::string& path);

#if defined(HEARTH_CUDA_TIMELINE) && defined(__CUDACC__)
namespace {
__constant__ TimelineSink timeline_sink;
void timeline_point_at(const TimelineSink& sink) { cudaMemcpyToSymbol(timeline_sink, &sink, sizeof sink); }
[[maybe_unused]] const bool timeline_registered = (timeline_register(&timeline_point_at), true);
}  // namespace

__device__ inline uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 of each block, right after the wait: stores the block's record (no loads but the
// constant bank's, so the block is not held up).
__device__ inline void timeline_record(const char* kernel, uint64_t arrived) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || !timeline_sink.on) return;
  TimelineRecord r;
  r.arrived = arrived;
  r.released = globaltimer();
  r.kernel = kernel;
  r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  r.blocks = gridDim.x * gridDim.y * gridDim.z;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r.sm));
  r.check = timeline_check(r);
  uint64_t slot = (r.arrived ^ reinterpret_cast<uintptr_t>(kernel) >> 4) * 0x9E3779B97F4A7C15ull;
  slot ^= (static_cast<uint64_t>(r.block) * 0xBF58476D1CE4E5B9ull) ^ r.sm;
  slot ^= slot >> 29;
  timeline_sink.records[slot & (timeline_sink.slots - 1)] = r;
}
#endif

}  // namespace hearth::cuda
