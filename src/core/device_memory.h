// Memory on a device other than the CPU: its backend provides it, registered like the backend
// itself (core never includes a backend header). Tensors on such a device hold device
// pointers, which host code must not read; Tensor::to_device moves data across.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace hearth {

// A device's memory now: the driver's view and the allocator's.
struct DeviceMemoryInfo {
  size_t total_bytes = 0, free_bytes = 0;  // the whole device (free: to any process)
  size_t held_bytes = 0;                   // taken from the driver by Hearth's allocator
  size_t in_use_bytes = 0;                 // of which held by live tensors (the rest is cached)
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Devices of this type present now (0 when the driver or the hardware is missing).
  virtual int device_count() = 0;
  // Throws Unsupported for a device that is not there, std::bad_alloc when memory runs out.
  virtual void* allocate(Device device, size_t bytes) = 0;
  virtual void deallocate(Device device, void* p, size_t bytes) = 0;
  virtual void zero(Device device, void* p, size_t bytes) = 0;
  // Copies in the device's stream order; copies to the host return once the bytes are there.
  virtual void to_device(Device device, void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(Device device, void* dst, const void* src, size_t bytes) = 0;
  virtual void on_device(Device device, void* dst, const void* src, size_t bytes) = 0;
  virtual DeviceMemoryInfo info(Device device) = 0;
};

void register_device_memory(DeviceType type, DeviceMemory* memory);
// Throws Unsupported("no memory for device cuda:0 in this build") when none is registered.
DeviceMemory& device_memory(DeviceType type);
// Devices of this type present (0 when the build has no backend for them).
int device_count(DeviceType type);

}  // namespace hearth
