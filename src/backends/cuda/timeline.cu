// The host side of the in-graph timeline (timeline.cuh): the shared records, the choice of the
// replay to record, and the report.
//
// The report lists the replay's kernel launches in order. Blocks of one launch all start before
// any block of the next (a kernel is let launch only once every block of its predecessor has
// passed its wait), so the records sorted by arrival split into launches wherever the kernel
// changes or a block index repeats. For each launch:
//   arrive   its first block at its wait (how early the launch came, from the predecessor's release)
//   release  its first block let go: the predecessor had finished and its writes were visible
//   last     its last block let go (later than release when the grid runs in several waves)
//   path     the next launch's release minus this one's: this launch's share of the step's
//            critical path, its own run plus the hand-off to the next
// and then the path summed by kernel name.
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/timeline.cuh"
#include "base/knobs.h"
#include "base/mapped_file.h"

namespace hearth::cuda {
namespace {

constexpr uint64_t kRecordedReplay = 64;  // warm: the allocator, caches and clocks have settled

std::vector<void (*)(const TimelineSink&)>& registered() {
  static std::vector<void (*)(const TimelineSink&)> units;
  return units;
}

std::string kernel_name(const char* device_address, std::map<const char*, std::string>& names) {
  auto it = names.find(device_address);
  if (it != names.end()) return it->second;
  // Byte by byte: a longer copy could run off the end of the module's data.
  std::string text;
  for (const char* p = device_address; p != nullptr && text.size() < 80; ++p) {
    char c = 0;
    if (cudaMemcpy(&c, p, 1, cudaMemcpyDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      text.clear();
      break;
    }
    if (c == 0) break;
    text += c;
  }
  if (text.empty()) {
    char fallback[32];
    std::snprintf(fallback, sizeof fallback, "kernel@%p", static_cast<const void*>(device_address));
    text = fallback;
  }
  return names[device_address] = text;
}

struct Launch {
  std::string name;
  const char* kernel = nullptr;
  uint32_t blocks = 0;
  size_t recorded = 0;
  uint64_t arrive = UINT64_MAX, release = UINT64_MAX, last = 0;
};

}  // namespace

void timeline_report(const std::vector<TimelineRecord>& records, const std::string& path) {
  std::map<const char*, std::string> names;
  std::vector<Launch> launches;
  std::vector<std::vector<bool>> seen;  // per launch: which of its blocks have a record
  // A block of launch i may still arrive after the first blocks of launch i + 1 (a late wave, or
  // timers read a little apart): a record goes back to the launch before the last when that one
  // is of its kernel and lacks its block.
  auto belongs = [&](size_t i, const TimelineRecord& r) {
    return launches[i].kernel == r.kernel && launches[i].blocks == r.blocks && r.block < r.blocks && !seen[i][r.block];
  };
  for (const TimelineRecord& r : records) {
    size_t i = launches.size();
    if (!launches.empty() && belongs(launches.size() - 1, r)) {
      i = launches.size() - 1;
    } else if (launches.size() >= 2 && belongs(launches.size() - 2, r)) {
      i = launches.size() - 2;
    } else {
      launches.push_back({kernel_name(r.kernel, names), r.kernel, r.blocks});
      seen.emplace_back(r.blocks, false);
    }
    Launch& l = launches[i];
    if (r.block < r.blocks) seen[i][r.block] = true;
    ++l.recorded;
    l.arrive = std::min(l.arrive, r.arrived);
    l.release = std::min(l.release, r.released);
    l.last = std::max(l.last, r.released);
  }
  std::string report;
  auto print = [&report](const char* fmt, auto... args) {
    char line[256];
    std::snprintf(line, sizeof line, fmt, args...);
    report += line;
  };
  const uint64_t t0 = launches.empty() ? 0 : launches.front().release;
  const double span = launches.empty() ? 0.0 : (launches.back().last - t0) / 1e3;
  print("# in-graph timeline of replay %llu of a decode graph: %zu launches, %zu block records, %.1f us\n",
        static_cast<unsigned long long>(kRecordedReplay), launches.size(), records.size(), span);
  print("# times in us from the first release; path = next release - this release\n");
  print("%5s %-40s %7s %8s %9s %9s %9s %7s\n", "#", "kernel", "blocks", "recorded", "arrive", "release", "last",
        "path");
  std::map<std::string, std::pair<int, double>> by_name;
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    const double path = i + 1 < launches.size()
                            ? (static_cast<double>(launches[i + 1].release) - static_cast<double>(l.release)) / 1e3
                            : 0.0;
    auto& [count, sum] = by_name[l.name];
    ++count;
    sum += path;
    print("%5zu %-40.40s %7u %8zu %9.2f %9.2f %9.2f %7.2f\n", i, l.name.c_str(), l.blocks, l.recorded,
          (static_cast<double>(l.arrive) - t0) / 1e3, (static_cast<double>(l.release) - t0) / 1e3,
          (static_cast<double>(l.last) - t0) / 1e3, path);
  }
  print("\n# path by kernel\n%-40s %8s %10s %8s %6s\n", "kernel", "launches", "path us", "mean", "share");
  std::vector<std::pair<std::string, std::pair<int, double>>> sorted(by_name.begin(), by_name.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  for (const auto& [name, stat] : sorted) {
    print("%-40.40s %8d %10.1f %8.2f %5.1f%%\n", name.c_str(), stat.first, stat.second, stat.second / stat.first,
          span > 0 ? 100.0 * stat.second / span : 0.0);
  }
  write_file_atomic(path, report);
  std::fprintf(stderr, "timeline: %zu launches, %.1f us, written to %s\n", launches.size(), span, path.c_str());
}

void timeline_register(void (*point_at)(const TimelineSink&)) { registered().push_back(point_at); }

#ifdef HEARTH_CUDA_TIMELINE

namespace {
constexpr uint64_t kSlots = uint64_t{1} << 24;

struct Recording {
  std::mutex mutex;
  bool done = false;
  TimelineSink sink;
};
Recording& recording() {
  static Recording r;
  return r;
}

void point_all(const TimelineSink& sink) {
  for (auto* point_at : registered()) point_at(sink);
  HEARTH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool timeline_wanted(uint64_t replay) {
  if (replay != kRecordedReplay) return false;
  Recording& r = recording();
  std::lock_guard lock(r.mutex);
  return !r.done && !knobs::cuda_timeline().empty();
}

void timeline_begin(cudaStream_t s) {
  Recording& r = recording();
  std::lock_guard lock(r.mutex);
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
  if (r.sink.records == nullptr) {
    HEARTH_CUDA_CHECK(cudaMalloc(&r.sink.records, kSlots * sizeof(TimelineRecord)));
    r.sink.slots = kSlots;
  }
  HEARTH_CUDA_CHECK(cudaMemset(r.sink.records, 0, kSlots * sizeof(TimelineRecord)));
  r.sink.on = 1;
  point_all(r.sink);
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
}

void timeline_end(cudaStream_t s) {
  Recording& r = recording();
  std::lock_guard lock(r.mutex);
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(s));
  r.sink.on = 0;
  point_all(r.sink);
  r.done = true;
  std::vector<TimelineRecord> all(kSlots);
  HEARTH_CUDA_CHECK(cudaMemcpy(all.data(), r.sink.records, kSlots * sizeof(TimelineRecord), cudaMemcpyDeviceToHost));
  HEARTH_CUDA_CHECK(cudaFree(r.sink.records));
  r.sink.records = nullptr;
  std::vector<TimelineRecord> kept;
  for (const TimelineRecord& rec : all) {
    if (rec.kernel != nullptr && rec.check == timeline_check(rec)) kept.push_back(rec);
  }
  std::sort(kept.begin(), kept.end(), [](const TimelineRecord& a, const TimelineRecord& b) {
    return a.arrived != b.arrived ? a.arrived < b.arrived : a.released < b.released;
  });
  timeline_report(kept, knobs::cuda_timeline());
}

#else

bool timeline_wanted(uint64_t replay) {
  if (replay != kRecordedReplay || knobs::cuda_timeline().empty()) return false;
  static std::once_flag warned;
  std::call_once(warned, [] {
    std::fprintf(stderr,
                 "timeline: HEARTH_CUDA_TIMELINE is set, but this build records none "
                 "(configure with -DHEARTH_CUDA_TIMELINE=ON)\n");
  });
  return false;
}
void timeline_begin(cudaStream_t) {}
void timeline_end(cudaStream_t) {}

#endif

}  // namespace hearth::cuda
