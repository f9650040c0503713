// Device memory: a caching allocator over cudaMalloc (never managed memory). Freed blocks go
// to a per-device free list, sized in rounded classes, and are handed out again without a
// driver call; as all work on a device runs in its one stream (cuda_common.h), a block freed
// by the host is reused only by work queued after everything that used it. When cudaMalloc
// fails, the cached blocks are given back to the driver and the allocation is tried once more.
//
// While a graph is recorded on a device (graph.cu), its blocks come from and go back to the
// graph's own pool: every block the recorded work touches stays the graph's until the graph is
// destroyed, since each replay writes them again, whatever the host did with them meanwhile.
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "backends/cuda/cuda_common.h"
#include "base/error.h"
#include "base/knobs.h"
#include "core/device_memory.h"

namespace hearth::cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

namespace {

constexpr int kMaxDevices = 16;

int count_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: none, and no sticky error
    return 0;
  }
  return std::min(n, kMaxDevices);
}

}  // namespace

namespace {
std::array<bool, kMaxDevices> early_launch_on{}, clusters_on{};
thread_local int current_device = -1;
}  // namespace

bool early_launch() { return current_device >= 0 && early_launch_on[static_cast<size_t>(current_device)]; }
bool block_clusters() { return current_device >= 0 && clusters_on[static_cast<size_t>(current_device)]; }

cudaStream_t use_device(Device device) {
  static std::array<cudaStream_t, kMaxDevices> streams{};
  static std::mutex m;
  static const int n = count_devices();
  if (device.type != DeviceType::kCuda || device.index < 0 || device.index >= n) {
    throw Unsupported("no device " + device.str() + " (this machine has " + std::to_string(n) + " CUDA device" +
                      (n == 1 ? "" : "s") + ")");
  }
  // The calling thread's current device, so that the common case costs no driver call.
  if (current_device != device.index) {
    HEARTH_CUDA_CHECK(cudaSetDevice(device.index));
    current_device = device.index;
  }
  std::lock_guard<std::mutex> lock(m);
  cudaStream_t& s = streams[static_cast<size_t>(device.index)];
  if (s == nullptr) {
    HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int major = 0;
    HEARTH_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index));
    early_launch_on[static_cast<size_t>(device.index)] = major >= 9 && knobs::cuda_pdl();
    clusters_on[static_cast<size_t>(device.index)] = major >= 9;
  }
  return s;
}

namespace {

// Small blocks round to 512 bytes, large ones to 2 MiB, so that freed blocks fit later requests.
// (The cache is never trimmed while allocations succeed; when one fails it is given back whole.)
size_t size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
  const size_t unit = bytes < (size_t{1} << 20) ? kSmall : kLarge;
  return (std::max<size_t>(bytes, 1) + unit - 1) / unit * unit;
}

class CudaMemory final : public DeviceMemory {
 public:
  int device_count() override { return count_devices(); }

  void* allocate(Device device, size_t bytes) override {
    use_device(device);
    const size_t size = size_class(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    GraphPool* pool = recording_[static_cast<size_t>(device.index)];
    auto& free = pool != nullptr ? pool->free : free_[static_cast<size_t>(device.index)];
    // The smallest cached block that fits, if it is at most twice the request: blocks of one
    // size class serve neighbouring ones too, so the cache does not keep a set per batch size.
    if (auto it = free.lower_bound(size); it != free.end() && it->first <= 2 * size) {
      void* p = it->second;
      free.erase(it);
      return p;
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached(device);
      e = cudaMalloc(&p, size);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw std::bad_alloc();
    }
    check(e, "cudaMalloc");
    sizes_[p] = size;
    held_[static_cast<size_t>(device.index)] += size;
    if (pool != nullptr) owner_[p] = pool;
    return p;
  }

  void deallocate(Device device, void* p, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    GraphPool* pool = recording_[static_cast<size_t>(device.index)];
    if (auto it = owner_.find(p); it != owner_.end()) {
      pool = it->second;
    } else if (pool != nullptr) {
      owner_[p] = pool;  // freed while recording: the recorded work may have used it
    }
    (pool != nullptr ? pool->free : free_[static_cast<size_t>(device.index)]).emplace(sizes_.at(p), p);
  }

  // From now until end_recording, the device's allocations and frees use `pool`.
  void begin_recording(Device device, GraphPool* pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    HEARTH_CHECK(recording_[static_cast<size_t>(device.index)] == nullptr);
    recording_[static_cast<size_t>(device.index)] = pool;
  }
  void end_recording(Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_[static_cast<size_t>(device.index)] = nullptr;
  }
  // The pool's blocks join the device's cache (the caller has waited for the graph's last
  // replay); blocks still held by live tensors go there when those are freed.
  void dissolve(Device device, GraphPool* pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = owner_.begin(); it != owner_.end();) {
      it = it->second == pool ? owner_.erase(it) : std::next(it);
    }
    free_[static_cast<size_t>(device.index)].merge(pool->free);
  }

  DeviceMemoryInfo info(Device device) override {
    use_device(device);
    DeviceMemoryInfo r;
    HEARTH_CUDA_CHECK(cudaMemGetInfo(&r.free_bytes, &r.total_bytes));
    std::lock_guard<std::mutex> lock(mutex_);
    r.held_bytes = held_[static_cast<size_t>(device.index)];
    size_t cached = 0;
    for (const auto& [size, p] : free_[static_cast<size_t>(device.index)]) cached += size;
    r.in_use_bytes = r.held_bytes - cached;
    return r;
  }

  void zero(Device device, void* p, size_t bytes) override {
    HEARTH_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, use_device(device)));
  }

  void to_device(Device device, void* dst, const void* src, size_t bytes) override {
    // From pageable host memory the call returns once the source has been staged, so the
    // caller may free it at once.
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, use_device(device)));
  }

  void to_host(Device device, void* dst, const void* src, size_t bytes) override {
    cudaStream_t s = use_device(device);
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
  }

  void on_device(Device device, void* dst, const void* src, size_t bytes) override {
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, use_device(device)));
  }

 private:
  // Gives the device's cached blocks back to the driver (caller holds mutex_).
  void release_cached(Device device) {
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(use_device(device)));
    auto& free = free_[static_cast<size_t>(device.index)];
    for (auto& [size, p] : free) {
      HEARTH_CUDA_CHECK(cudaFree(p));
      sizes_.erase(p);
      held_[static_cast<size_t>(device.index)] -= size;
    }
    free.clear();
  }

  std::mutex mutex_;
  std::array<std::multimap<size_t, void*>, kMaxDevices> free_;
  std::unordered_map<void*, size_t> sizes_;          // every block from cudaMalloc -> its size
  std::array<size_t, kMaxDevices> held_{};           // per device: the sum of its blocks' sizes
  std::array<GraphPool*, kMaxDevices> recording_{};  // per device: the pool of the graph being recorded
  std::unordered_map<void*, GraphPool*> owner_;      // blocks that belong to a graph's pool
};

// The allocator lives as long as the process: tensors freed during static destruction still
// find it.
CudaMemory& memory() {
  static CudaMemory* m = new CudaMemory;
  return *m;
}

const bool registered = [] {
  register_device_memory(DeviceType::kCuda, &memory());
  return true;
}();

}  // namespace

void begin_graph_pool(Device device, GraphPool* pool) { memory().begin_recording(device, pool); }
void end_graph_pool(Device device) { memory().end_recording(device); }
void dissolve_graph_pool(Device device, GraphPool* pool) { memory().dissolve(device, pool); }
}  // namespace hearth::cuda
