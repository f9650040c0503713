// Splitting a matrix's output rows across the pool.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/thread_pool.h"

namespace hearth::cpu {

// run(n0, n1) over rows [0, N), split across the pool (or inline without one) in whole units of
// `unit` rows, so that a kernel's row tiles are never cut.
template <typename Run>
void parallel_rows(ThreadPool* pool, int64_t N, int64_t unit, const Run& run) {
  if (pool == nullptr) {
    run(int64_t{0}, N);
    return;
  }
  pool->parallel_for((N + unit - 1) / unit, 1, [&](int64_t a, int64_t b) { run(a * unit, std::min(N, b * unit)); });
}

}  // namespace hearth::cpu
