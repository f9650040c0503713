// Decode attention on the CPU against the memory bandwidth: one query row, Qwen3-1.7B's heads
// (16 query heads, 8 KV heads of 128), an f16 (or bf16) paged cache of C positions per layer, 28 layers'
// caches visited in turn (past the last-level cache, as a decode step reads them). Prints GB/s of
// K and V read per pass, the median of alternating passes, beside a plain read of the same
// threads probed between them (the host's bandwidth drifts within seconds). With --cached, also
// the rate of passes back to back with no probe between them, where the 28 caches stay in L2 or L3
// if they fit: how far the kernel is from its own compute rate when the bytes are near.
// Usage: cpu_attention_bench [--cached] [--kv f16|bf16] [C ...]   (default f16; 512 2048 4096)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "core/bandwidth.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace {

using namespace hearth;

Tensor filled(const Shape& shape, DType dtype, float value) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = value * static_cast<float>((i * 7919) % 97) / 97.0f;
  // Copied into a zeroed tensor: large ones are mapped on huge pages where the system allows
  // them, as the engine's KV cache is (Tensor::zeros); a plain allocation is on 4 KiB pages.
  const Tensor converted = host.to(dtype);
  Tensor out = Tensor::zeros(shape, dtype);
  std::memcpy(out.raw(), converted.raw(), converted.nbytes());
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> contexts;
  bool cached = false;
  DType kv = DType::kF16;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cached") == 0) {
      cached = true;
    } else if (std::strcmp(argv[i], "--kv") == 0 && i + 1 < argc) {
      kv = std::strcmp(argv[++i], "bf16") == 0 ? DType::kBF16 : DType::kF16;
    } else {
      contexts.push_back(std::atoll(argv[i]));
    }
  }
  if (contexts.empty()) contexts = {512, 2048, 4096};
  constexpr int64_t kLayers = 28, Hq = 16, Hkv = 8, Dh = 128, kBlock = 16;
  ThreadPool pool;
  Context ctx{&pool, Device{DeviceType::kCpu, 0}};
  const Tensor q = filled({1, Hq, Dh}, DType::kF32, 1.0f);
  Tensor out = Tensor::empty({1, Hq, Dh}, DType::kF32);
  for (const int64_t C : contexts) {
    const int64_t blocks = (C + kBlock - 1) / kBlock;
    std::vector<ops::KvLayer> layers;
    for (int64_t l = 0; l < kLayers; ++l) {
      layers.push_back({filled({blocks, kBlock, Hkv, Dh}, kv, 0.5f), filled({blocks, kBlock, Hkv, Dh}, kv, 0.5f)});
    }
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    const int32_t starts[2] = {0, 1}, lens[1] = {static_cast<int32_t>(C - 1)};
    const ops::AttentionBatch batch{Tensor::from_i32({2}, starts), Tensor::from_i32({1}, lens),
                                    Tensor::from_i32({1, blocks}, table.data())};
    const double bytes = 2.0 * 2.0 * static_cast<double>(kLayers * C * Hkv * Dh);
    if (cached) {
      std::vector<double> warm;
      for (int rep = 0; rep < 9; ++rep) {
        for (const ops::KvLayer& cache : layers) ops::attention(ctx, q, cache, batch, 0.088f, 0, out);
        const auto start = std::chrono::steady_clock::now();
        for (int again = 0; again < 4; ++again) {
          for (const ops::KvLayer& cache : layers) ops::attention(ctx, q, cache, batch, 0.088f, 0, out);
        }
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        warm.push_back(4 * bytes / took.count() / 1e9);
      }
      std::printf("context %5lld: attention %5.1f GB/s of K and V, passes back to back (cached where they fit)\n",
                  static_cast<long long>(C), median(warm));
    }
    std::vector<double> attention, read;
    for (int rep = 0; rep < 15; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      for (const ops::KvLayer& cache : layers) ops::attention(ctx, q, cache, batch, 0.088f, 0, out);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      attention.push_back(bytes / took.count() / 1e9);
      BandwidthProbe probe;
      probe.passes = 1;
      read.push_back(measure_read_bandwidth(ctx, probe).bytes_per_second / 1e9);
    }
    std::printf("context %5lld: attention %5.1f GB/s of K and V (%.0f MB per pass), read %5.1f GB/s, %2.0f%%\n",
                static_cast<long long>(C), median(attention), bytes / 1e6, median(read),
                100 * median(attention) / median(read));
  }
}
