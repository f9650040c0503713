// What an op needs besides its tensors: where it runs and the threads it may use.
// Passed explicitly; there is no global context.
#pragma once

#include "base/thread_pool.h"
#include "core/device.h"

namespace hearth {

struct Context {
  ThreadPool* pool = nullptr;
  Device device;
};

}  // namespace hearth
