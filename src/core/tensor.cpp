#include "core/tensor.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/device_memory.h"

namespace hearth {
namespace {

// A forward's activations are a few buffers of up to ~100 MB (a 2048-token prefill's gate and up),
// allocated and freed op after op. glibc serves blocks past its mmap threshold with fresh
// mappings, and hands heap tops past its trim threshold back to the kernel; both thresholds move
// with the process's past frees, so whether each op's output is faulted in anew (4 KiB at a time)
// hung on the order of unrelated allocations: pp2048 of a 4-bit Qwen3-1.7B read 100-168 tok/s
// from one build to the next, against ~195 with the thresholds fixed at 256 MiB, where freed
// activations are reused in place (bench/RESULTS.md, stop 42). The price: up to 256 MiB of freed
// heap kept resident.
constexpr int kMallocKeepBytes = 256 << 20;

std::shared_ptr<Storage> allocate(size_t bytes) {
  static const bool tuned = [] {
    return mallopt(M_MMAP_THRESHOLD, kMallocKeepBytes) == 1 && mallopt(M_TRIM_THRESHOLD, kMallocKeepBytes) == 1;
  }();
  (void)tuned;  // advisory: a refusal costs speed only
  auto s = std::make_shared<Storage>();
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  s->data = p;
  s->bytes = bytes;
  s->keepalive = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return s;
}

// Large zeroed buffers come straight from the kernel: pages stay untouched (and out of the
// resident set) until written, which keeps a big, mostly empty KV cache cheap.
constexpr size_t kLazyZeroBytes = 1 << 20;

// A mapping of whole 2 MiB pages starting on a 2 MiB boundary, with transparent huge pages asked
// for where the system allows them on request. Weights streamed at full memory bandwidth cross a
// 4 KiB page every 64 cache lines; the hardware prefetchers stop at each page boundary, and each
// page costs a TLB walk. The kernel backs only whole aligned 2 MiB ranges of a mapping with huge
// pages, and a plain mmap starts on any 4 KiB page: a 6 MiB matrix kept about 2 MiB of itself
// (head and tail) on small pages, and a 1.2 MiB one all of it. The cost is the rounded tail, up
// to 2 MiB per buffer (resident once its huge page is touched). Advisory; a refusal only costs
// speed. 4-bit decode on the 2-core EPYC: 83% -> 87.5% of its roofline (bench/RESULTS.md).
constexpr size_t kHugePage = size_t{2} << 20;

std::shared_ptr<Storage> map_zeroed(size_t bytes) {
  const size_t len = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // A huge page more than needed, then the unaligned head and the rest of the tail given back.
  void* mapped = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  auto* raw = static_cast<char*>(mapped);
  auto* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~(kHugePage - 1));
  if (p > raw) ::munmap(raw, static_cast<size_t>(p - raw));
  ::munmap(p + len, kHugePage - static_cast<size_t>(p - raw));  // > 0: p - raw < kHugePage
  ::madvise(p, len, MADV_HUGEPAGE);
  auto s = std::make_shared<Storage>();
  s->data = p;
  s->bytes = bytes;
  s->keepalive = std::shared_ptr<void>(p, [len](void* q) { ::munmap(q, len); });
  return s;
}

// Zeroed buffers from 64 KiB to 1 MiB (the CPU panels' scales and biases: 11% of a 4-bit
// decode's bytes) are carved one after another, 64-byte aligned, from shared 8 MiB chunks of
// map_zeroed, so that they lie on huge pages too without a 2 MiB page each; a chunk goes back
// when the last buffer in it does. Never reused, so still zero. 4-bit decode in the host's fast
// regime: 71% -> 80% of its roofline (bench/RESULTS.md).
constexpr size_t kPooledZeroBytes = size_t{64} << 10, kChunkBytes = size_t{8} << 20;

std::shared_ptr<Storage> pooled_zeroed(size_t bytes) {
  static std::mutex mutex;
  static std::shared_ptr<Storage> chunk;
  static size_t used = 0;
  const size_t rounded = (bytes + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(mutex);
  if (chunk == nullptr || used + rounded > kChunkBytes) {
    chunk = map_zeroed(kChunkBytes);
    used = 0;
  }
  auto s = std::make_shared<Storage>();
  s->data = static_cast<char*>(chunk->data) + used;
  s->bytes = bytes;
  s->keepalive = chunk;  // the chunk's mapping lives while any of its buffers does
  used += rounded;
  return s;
}

std::shared_ptr<Storage> allocate_zeroed(size_t bytes) {
  if (bytes >= kLazyZeroBytes) return map_zeroed(bytes);
  if (bytes >= kPooledZeroBytes) return pooled_zeroed(bytes);
  auto s = allocate(bytes);
  std::memset(s->data, 0, bytes);
  return s;
}

std::shared_ptr<Storage> allocate_on(Device device, size_t bytes, bool zeroed) {
  DeviceMemory& memory = device_memory(device.type);
  auto s = std::make_shared<Storage>();
  s->data = memory.allocate(device, bytes);
  s->bytes = bytes;
  s->device = device;
  s->keepalive =
      std::shared_ptr<void>(s->data, [&memory, device, bytes](void* p) { memory.deallocate(device, p, bytes); });
  if (zeroed) memory.zero(device, s->data, bytes);
  return s;
}

}  // namespace

Tensor Tensor::owning(const Shape& shape, DType dtype, bool zeroed, Device device) {
  HEARTH_CHECK(shape.numel() >= 0);
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  Tensor t;
  if (device.type == DeviceType::kCpu) {
    t.storage_ = zeroed ? allocate_zeroed(bytes) : allocate(bytes);
  } else {
    t.storage_ = allocate_on(device, bytes, zeroed);
  }
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.owned_ = true;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) { return owning(shape, dtype, false, device); }
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return owning(shape, dtype, true, device); }

Tensor Tensor::to_device(Device target) const {
  HEARTH_CHECK(defined());
  const Device from = device();
  if (from == target) return *this;
  Tensor t = empty(shape_, dtype_, target);
  if (nbytes() == 0) return t;
  if (from.type == DeviceType::kCpu) {
    device_memory(target.type).to_device(target, t.raw(), raw(), nbytes());
  } else if (target.type == DeviceType::kCpu) {
    device_memory(from.type).to_host(from, t.raw(), raw(), nbytes());
  } else {
    HEARTH_CHECK_MSG(from.type == target.type, "to_device: " + from.str() + " -> " + target.str());
    device_memory(from.type).on_device(from, t.raw(), raw(), nbytes());
  }
  return t;
}

Tensor Tensor::view_of(const void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keepalive) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = const_cast<void*>(data);
  t.storage_->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage_->keepalive = std::move(keepalive);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, const float* data) {
  Tensor t = empty(shape, DType::kF32);
  std::memcpy(t.raw(), data, t.nbytes());
  return t;
}

Tensor Tensor::from_i32(const Shape& shape, const int32_t* data) {
  Tensor t = empty(shape, DType::kI32);
  std::memcpy(t.raw(), data, t.nbytes());
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  HEARTH_CHECK_MSG(shape.numel() == numel(), "reshape " + shape_.str() + " -> " + shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  HEARTH_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= dim(0));
  const int64_t row = dim(0) == 0 ? 0 : numel() / dim(0);
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  int64_t dims[Shape::kMaxRank];
  for (int i = 0; i < rank(); ++i) dims[i] = shape_[i];
  dims[0] = end - begin;
  t.shape_ = Shape::from(dims, dims + rank());
  return t;
}

Tensor Tensor::copy() const {
  HEARTH_CHECK_MSG(device().type == DeviceType::kCpu, "copy: " + str() + " is on " + device().str());
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype_) return copy();
  HEARTH_CHECK_MSG(device().type == DeviceType::kCpu, "to: " + str() + " is on " + device().str());
  HEARTH_CHECK_MSG(is_float(dtype_) && is_float(target), "to: " + str() + " -> " + std::string(dtype_name(target)));
  Tensor t = empty(shape_, target);
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = element_as_f32(*this, i);
    switch (target) {
      case DType::kF32: t.data<float>()[i] = v; break;
      case DType::kBF16: t.data<uint16_t>()[i] = f32_to_bf16(v); break;
      case DType::kF16: t.data<uint16_t>()[i] = f32_to_f16(v); break;
      default: break;
    }
  }
  return t;
}

std::string Tensor::str() const { return std::string(dtype_name(dtype_)) + shape_.str(); }

float element_as_f32(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, t.data<uint8_t>() + 4 * i, 4);
      return v;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, t.data<uint8_t>() + 2 * i, 2);
      return t.dtype() == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    default: HEARTH_CHECK_MSG(false, "element_as_f32 on " + t.str());
  }
  return 0;
}

}  // namespace hearth
