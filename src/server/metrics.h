// The server's counters and latency histograms, rendered for GET /metrics (Prometheus text
// exposition format 0.0.4) and GET /stats (a JSON summary). HTTP threads and the engine thread
// update one Metrics concurrently; every method is thread-safe (one mutex: updates come at most
// once per token). Values that belong to other components (queue depth, KV blocks, memory) are
// not tracked here: the caller passes them to the render functions as Gauges.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::server {

// Point-in-time values the caller reads from the engine/worker just before rendering.
struct Gauges {
  int64_t queue_depth = 0;       // requests waiting for the engine
  int64_t requests_running = 0;  // requests the engine is generating for
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t prompt_cache_bytes = 0;
  int64_t prompt_cache_entries = 0;
  int64_t resident_memory_bytes = 0;  // base/timer.h current_rss_bytes()
  // Where the model runs, and that device's memory when it is not the CPU
  // (core/device_memory.h DeviceMemoryInfo).
  std::string device = "cpu";
  int64_t device_memory_total_bytes = 0;
  int64_t device_memory_free_bytes = 0;
  int64_t device_memory_held_bytes = 0;
  int64_t device_memory_in_use_bytes = 0;
};

// A fixed-bucket histogram with Prometheus semantics: bucket i counts observations v <= bounds[i];
// one more bucket (+Inf) counts the rest. Not thread-safe by itself (Metrics guards its own).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // strictly increasing, finite
  void observe(double v);                          // NaN is ignored

  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket counts (not cumulative), bounds().size() + 1 of them; the last is the +Inf bucket.
  const std::vector<uint64_t>& counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // The q-quantile (0..1) estimated as Prometheus' histogram_quantile() does: linear within the
  // bucket holding the rank (the first bucket starts at 0); the highest finite bound if the rank
  // is in the +Inf bucket; NaN when there are no observations.
  double quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  Metrics();

  // One finished HTTP request on `endpoint` ("chat", "completion", "messages") answered with
  // HTTP `status` (for streams: the status sent with the headers).
  void count_request(std::string_view endpoint, int status);
  // A request stopped because its client went away.
  void count_cancelled();
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n);
  // One prompt-cache lookup that reused `reused_tokens` prompt tokens (0: a miss).
  void count_prompt_cache_lookup(int64_t reused_tokens);

  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_request_duration(double seconds);  // end to end, request received -> last byte

  // Every family with # HELP and # TYPE, names prefixed hearth_, one trailing newline.
  std::string prometheus(const Gauges& gauges) const;
  // uptime_seconds, requests, tokens, latency (mean, p50/p90/p99 from the buckets), cache, queue,
  // memory. The caller adds the model name and context.
  nlohmann::ordered_json stats(const Gauges& gauges) const;

 private:
  struct Data {
    Data();                                                    // the histograms' bucket bounds
    std::map<std::pair<std::string, int>, uint64_t> requests;  // (endpoint, status) -> count
    uint64_t cancelled = 0;
    uint64_t prompt_tokens = 0;
    uint64_t generated_tokens = 0;
    uint64_t cache_hit_tokens = 0;
    uint64_t cache_lookups = 0;
    uint64_t cache_hits = 0;
    Histogram ttft;
    Histogram itl;
    Histogram duration;
  };
  Data snapshot() const;
  double uptime_seconds() const;

  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  Data data_;
};

}  // namespace hearth::server
