// The benchmarks' timer: the fastest of `reps` calls, in seconds (the least disturbed by the
// host's other work).
#pragma once

#include <algorithm>
#include <chrono>

namespace hearth::bench {

template <typename F>
double best_seconds(F&& f, int reps = 5) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace hearth::bench
