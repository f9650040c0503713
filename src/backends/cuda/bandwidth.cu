// The GPU's memory bandwidth as a device-to-device copy reaches it, measured now: bytes read plus
// bytes written per second (a copy of n bytes moves 2n), the best of several passes over a
// buffer far larger than the L2. Decode, which reads every weight once per token, is set
// against it (hearth bench).
#include <algorithm>
#include <string>

#include "backends/cuda/cuda_common.h"
#include "base/error.h"
#include "core/bandwidth.h"
#include "core/tensor.h"

namespace hearth::cuda {
namespace {

BandwidthResult copy_bandwidth(Context& ctx, const BandwidthProbe& probe) {
  cudaStream_t s = use_device(ctx.device);
  cudaDeviceProp prop{};
  HEARTH_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.device.index));
  // Each of the two buffers: 2 GiB by default, at least 16 times the L2.
  size_t bytes = probe.bytes != 0 ? probe.bytes : std::max(size_t{2} << 30, size_t{16} * prop.l2CacheSize);
  bytes = bytes / 256 * 256;
  const Tensor src = Tensor::zeros({static_cast<int64_t>(bytes)}, DType::kU8, ctx.device);
  Tensor dst = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8, ctx.device);
  cudaEvent_t start, stop;
  HEARTH_CUDA_CHECK(cudaEventCreate(&start));
  HEARTH_CUDA_CHECK(cudaEventCreate(&stop));
  HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), bytes, cudaMemcpyDeviceToDevice, s));  // warm-up
  float best_ms = 0;
  for (int pass = 0; pass < probe.passes; ++pass) {
    HEARTH_CUDA_CHECK(cudaEventRecord(start, s));
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), bytes, cudaMemcpyDeviceToDevice, s));
    HEARTH_CUDA_CHECK(cudaEventRecord(stop, s));
    HEARTH_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (pass == 0 || ms < best_ms) best_ms = ms;
  }
  HEARTH_CUDA_CHECK(cudaEventDestroy(start));
  HEARTH_CUDA_CHECK(cudaEventDestroy(stop));
  BandwidthResult r;
  r.bytes_per_second = 2.0 * static_cast<double>(bytes) / (static_cast<double>(best_ms) * 1e-3);
  r.bytes = bytes;
  r.passes = probe.passes;
  r.threads = 0;
  r.isa = std::string("cuda d2d copy, ") + prop.name;
  return r;
}

const bool registered = [] {
  register_bandwidth_probe(DeviceType::kCuda, &copy_bandwidth);
  return true;
}();

}  // namespace
}  // namespace hearth::cuda
