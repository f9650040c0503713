// Memory read bandwidth as a device's kernels reach it, measured now (not looked up): the
// ceiling a decode step, which reads every weight once per token, cannot beat. Each backend
// registers its probe at static-initialization time; callers above core ask through here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/context.h"

namespace hearth {

struct BandwidthProbe {
  size_t bytes = 0;  // buffer size; 0 = the backend's default (far larger than its caches)
  int passes = 5;    // the best pass is reported (a CPU pass: the faster of two read loops)
};

struct BandwidthResult {
  double bytes_per_second = 0;
  size_t bytes = 0;  // buffer read per pass
  int passes = 0;
  int threads = 0;
  std::string isa;  // the instruction set the probe read with (e.g. avx512)
  uint64_t checksum = 0;
};

using BandwidthProbeFn = BandwidthResult (*)(Context& ctx, const BandwidthProbe& probe);
void register_bandwidth_probe(DeviceType type, BandwidthProbeFn fn);

// Reads a buffer with all of ctx.pool's threads; throws Unsupported when the device's
// backend has no probe in this build.
BandwidthResult measure_read_bandwidth(Context& ctx, const BandwidthProbe& probe = {});

}  // namespace hearth
