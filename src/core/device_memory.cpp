#include "core/device_memory.h"

#include <array>

#include "base/error.h"

namespace hearth {
namespace {

std::array<DeviceMemory*, 2>& registry() {
  static std::array<DeviceMemory*, 2> memories{};
  return memories;
}

}  // namespace

void register_device_memory(DeviceType type, DeviceMemory* memory) { registry()[static_cast<size_t>(type)] = memory; }

DeviceMemory& device_memory(DeviceType type) {
  DeviceMemory* m = registry()[static_cast<size_t>(type)];
  if (m == nullptr) throw Unsupported("no memory for device " + Device{type, 0}.str() + " in this build");
  return *m;
}

int device_count(DeviceType type) {
  if (type == DeviceType::kCpu) return 1;
  DeviceMemory* m = registry()[static_cast<size_t>(type)];
  return m == nullptr ? 0 : m->device_count();
}

}  // namespace hearth
