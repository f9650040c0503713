// Tensor = storage (owned buffer or a view into a mapped file) + shape + dtype.
// Always contiguous, row-major. Views share storage; copies are explicit (copy(), to()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace hearth {

// Bytes on a device. `keepalive` holds whatever owns the memory (an allocation, a mapped file).
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  std::shared_ptr<void> keepalive;
};

class Tensor {
 public:
  Tensor() = default;

  // New uninitialized / zeroed tensor, on the CPU 64-byte aligned; on another device from
  // its backend's memory (core/device_memory.h).
  static Tensor empty(const Shape& shape, DType dtype, Device device = kCpu);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = kCpu);
  // Wraps memory owned by `keepalive` (e.g. a mapped file) without copying.
  static Tensor view_of(const void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keepalive);
  // Copies host data into a new tensor.
  static Tensor from_f32(const Shape& shape, const float* data);
  static Tensor from_i32(const Shape& shape, const int32_t* data);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.dim(i); }
  int rank() const { return shape_.rank(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device{}; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() { return static_cast<uint8_t*>(storage_->data) + offset_; }
  const void* raw() const { return static_cast<const uint8_t*>(storage_->data) + offset_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }

  // Same storage, new shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // The same values on `device` (a copy; this tensor when it is there already).
  Tensor to_device(Device device) const;
  // Deep copy / dtype conversion (float types only for conversion) into a new CPU tensor;
  // a tensor on another device must be brought to the CPU first.
  Tensor copy() const;
  Tensor to(DType dtype) const;
  // True when this tensor does not own its memory's lifetime alone (e.g. a mapped-file view).
  bool is_view_of_external() const { return storage_ && storage_->keepalive && !owned_; }

  std::string str() const;  // "f32[4, 64]"

 private:
  static Tensor owning(const Shape& shape, DType dtype, bool zeroed, Device device);

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
  bool owned_ = false;
};

// Reads element i of a float tensor of any float dtype as f32 (slow; for tests and setup).
float element_as_f32(const Tensor& t, int64_t i);

}  // namespace hearth
