// Recording the device's work as a CUDA graph (graph.cu); the backend's record_graph.
#pragma once

#include <functional>
#include <memory>

#include "core/device.h"
#include "core/ops.h"

namespace hearth::cuda {

std::unique_ptr<DeviceGraph> record_graph(Device device, const std::function<void()>& work);

}  // namespace hearth::cuda
