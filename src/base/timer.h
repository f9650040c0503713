#pragma once

#include <chrono>

namespace hearth {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  void reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
size_t peak_rss_bytes();
// Current resident set size in bytes (VmRSS), 0 if unknown.
size_t current_rss_bytes();

}  // namespace hearth
