#pragma once

#include <string>

namespace hearth {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string str() const { return type == DeviceType::kCpu ? "cpu" : "cuda:" + std::to_string(index); }
};

inline constexpr Device kCpu{};

}  // namespace hearth
