#include "base/timer.h"

#include <fstream>
#include <string>

namespace hearth {
namespace {

size_t read_status_kib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoul(line.substr(key.size())) * 1024;
  }
  return 0;
}

}  // namespace

size_t peak_rss_bytes() { return read_status_kib("VmHWM:"); }
size_t current_rss_bytes() { return read_status_kib("VmRSS:"); }

}  // namespace hearth
