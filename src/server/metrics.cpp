#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace hearth::server {
namespace {

// Bucket bounds (seconds) follow vLLM's (vllm/v1/metrics/loggers.py): time_to_first_token_seconds
// as is; inter_token_latency_seconds with 1, 2.5 and 5 ms added below its 10 ms floor, since small
// models on a CPU decode a token in a few ms; e2e_request_latency_seconds with 10, 50 and 100 ms
// added below its 0.3 s floor for short or refused requests.
std::vector<double> ttft_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,
          0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
}
std::vector<double> duration_bounds() {
  return {0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,   5.0,    10.0,
          15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// Shortest text that reads back as the same double; Prometheus' spellings for the specials.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// Label values escape backslash, double quote and newline; HELP text escapes backslash and newline.
std::string escape(std::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(escape(help, false)).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, std::string_view name, std::string_view labels, const std::string& value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(value).append("\n");
}

void counter(std::string& out, std::string_view name, std::string_view help, uint64_t value) {
  family(out, name, "counter", help);
  sample(out, name, "", std::to_string(value));
}

void gauge(std::string& out, std::string_view name, std::string_view help, double value) {
  family(out, name, "gauge", help);
  sample(out, name, "", number(value));
}

void histogram(std::string& out, const std::string& name, std::string_view help, const Histogram& h) {
  family(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts().size(); ++i) {
    cumulative += h.counts()[i];
    const double le = i < h.bounds().size() ? h.bounds()[i] : INFINITY;
    sample(out, name + "_bucket", "le=\"" + number(le) + "\"", std::to_string(cumulative));
  }
  sample(out, name + "_sum", "", number(h.sum()));
  sample(out, name + "_count", "", std::to_string(h.count()));
}

nlohmann::ordered_json or_null(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

nlohmann::ordered_json latency(const Histogram& h) {
  return {{"count", h.count()},
          {"mean", or_null(h.count() ? h.sum() / static_cast<double>(h.count()) : NAN)},
          {"p50", or_null(h.quantile(0.5))},
          {"p90", or_null(h.quantile(0.9))},
          {"p99", or_null(h.quantile(0.99))}};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw std::invalid_argument("Histogram: bounds must be finite and strictly increasing");
    }
  }
}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  // The first bound >= v: bucket i holds bounds_[i-1] < v <= bounds_[i].
  counts_[std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin()]++;
  ++count_;
  sum_ += v;
}

double Histogram::quantile(double q) const {
  if (count_ == 0 || bounds_.empty()) return NAN;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(count_);
  uint64_t below = 0;  // observations in the buckets before i
  for (size_t i = 0; i < bounds_.size(); ++i) {
    const uint64_t in = counts_[i];
    if (in > 0 && static_cast<double>(below + in) >= rank) {
      const double lo = i == 0 ? std::min(0.0, bounds_[0]) : bounds_[i - 1];
      return lo + (bounds_[i] - lo) * std::max(0.0, rank - static_cast<double>(below)) / static_cast<double>(in);
    }
    below += in;
  }
  return bounds_.back();  // the rank is in the +Inf bucket
}

Metrics::Data::Data() : ttft(ttft_bounds()), itl(itl_bounds()), duration(duration_bounds()) {}

Metrics::Metrics() : start_(std::chrono::steady_clock::now()) {}

void Metrics::count_request(std::string_view endpoint, int status) {
  std::lock_guard lock(mu_);
  ++data_.requests[{std::string(endpoint), status}];
}

void Metrics::count_cancelled() {
  std::lock_guard lock(mu_);
  ++data_.cancelled;
}

void Metrics::add_prompt_tokens(int64_t n) {
  if (n <= 0) return;
  std::lock_guard lock(mu_);
  data_.prompt_tokens += static_cast<uint64_t>(n);
}

void Metrics::add_generated_tokens(int64_t n) {
  if (n <= 0) return;
  std::lock_guard lock(mu_);
  data_.generated_tokens += static_cast<uint64_t>(n);
}

void Metrics::count_prompt_cache_lookup(int64_t reused_tokens) {
  std::lock_guard lock(mu_);
  ++data_.cache_lookups;
  if (reused_tokens > 0) {
    ++data_.cache_hits;
    data_.cache_hit_tokens += static_cast<uint64_t>(reused_tokens);
  }
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard lock(mu_);
  data_.ttft.observe(seconds);
}

void Metrics::observe_inter_token_latency(double seconds) {
  std::lock_guard lock(mu_);
  data_.itl.observe(seconds);
}

void Metrics::observe_request_duration(double seconds) {
  std::lock_guard lock(mu_);
  data_.duration.observe(seconds);
}

Metrics::Data Metrics::snapshot() const {
  std::lock_guard lock(mu_);
  return data_;
}

double Metrics::uptime_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Metrics::prometheus(const Gauges& g) const {
  const Data d = snapshot();  // formatting happens outside the lock
  std::string out;
  family(out, "hearth_requests_total", "counter", "HTTP requests finished, by endpoint and status code.");
  for (const auto& [key, n] : d.requests) {
    sample(out, "hearth_requests_total",
           "endpoint=\"" + escape(key.first, true) + "\",status=\"" + std::to_string(key.second) + "\"",
           std::to_string(n));
  }
  counter(out, "hearth_requests_cancelled_total", "Requests stopped because the client went away.", d.cancelled);
  counter(out, "hearth_prompt_tokens_total", "Prompt tokens received.", d.prompt_tokens);
  counter(out, "hearth_generated_tokens_total", "Tokens generated.", d.generated_tokens);
  counter(out, "hearth_prompt_cache_hit_tokens_total", "Prompt tokens reused from the prompt cache.",
          d.cache_hit_tokens);
  counter(out, "hearth_prompt_cache_lookups_total", "Prompt-cache lookups.", d.cache_lookups);
  counter(out, "hearth_prompt_cache_hits_total", "Prompt-cache lookups that reused at least one token.", d.cache_hits);
  histogram(out, "hearth_time_to_first_token_seconds", "Time from request received to first token.", d.ttft);
  histogram(out, "hearth_inter_token_latency_seconds", "Time between consecutive generated tokens.", d.itl);
  histogram(out, "hearth_request_duration_seconds", "End-to-end request duration.", d.duration);
  gauge(out, "hearth_queue_depth", "Requests waiting for the engine.", static_cast<double>(g.queue_depth));
  gauge(out, "hearth_requests_running", "Requests being generated.", static_cast<double>(g.requests_running));
  gauge(out, "hearth_kv_cache_blocks_used", "KV-cache blocks in use.", static_cast<double>(g.kv_blocks_used));
  gauge(out, "hearth_kv_cache_blocks_total", "KV-cache blocks in the pool.", static_cast<double>(g.kv_blocks_total));
  gauge(out, "hearth_prompt_cache_bytes", "Bytes held by the prompt cache.", static_cast<double>(g.prompt_cache_bytes));
  gauge(out, "hearth_prompt_cache_entries", "Entries in the prompt cache.",
        static_cast<double>(g.prompt_cache_entries));
  gauge(out, "hearth_process_resident_memory_bytes", "Resident memory of the server process.",
        static_cast<double>(g.resident_memory_bytes));
  if (g.device != "cpu") {
    family(out, "hearth_device_memory_bytes", "gauge",
           "Memory of the device the model runs on: total, free (to any process), held (by Hearth's allocator), "
           "in_use (by live tensors).");
    for (const auto& [kind, v] :
         {std::pair{"total", g.device_memory_total_bytes}, std::pair{"free", g.device_memory_free_bytes},
          std::pair{"held", g.device_memory_held_bytes}, std::pair{"in_use", g.device_memory_in_use_bytes}}) {
      sample(out, "hearth_device_memory_bytes", "device=\"" + escape(g.device, true) + "\",kind=\"" + kind + "\"",
             std::to_string(v));
    }
  }
  gauge(out, "hearth_uptime_seconds", "Seconds since the server started.", uptime_seconds());
  return out;
}

nlohmann::ordered_json Metrics::stats(const Gauges& g) const {
  const Data d = snapshot();
  uint64_t total = 0, errors_4xx = 0, errors_5xx = 0;
  nlohmann::ordered_json by_endpoint = nlohmann::ordered_json::object();
  for (const auto& [key, n] : d.requests) {
    total += n;
    if (key.second >= 400 && key.second < 500) errors_4xx += n;
    if (key.second >= 500 && key.second < 600) errors_5xx += n;
    by_endpoint[key.first] = by_endpoint.value(key.first, uint64_t{0}) + n;
  }
  nlohmann::ordered_json memory = {{"rss_bytes", g.resident_memory_bytes}};
  if (g.device != "cpu") {
    memory["device"] = {{"name", g.device},
                        {"total_bytes", g.device_memory_total_bytes},
                        {"free_bytes", g.device_memory_free_bytes},
                        {"held_bytes", g.device_memory_held_bytes},
                        {"in_use_bytes", g.device_memory_in_use_bytes}};
  }
  return {
      {"uptime_seconds", uptime_seconds()},
      {"requests",
       {{"total", total},
        {"by_endpoint", by_endpoint},
        {"errors_4xx", errors_4xx},
        {"errors_5xx", errors_5xx},
        {"cancelled", d.cancelled}}},
      {"tokens", {{"prompt", d.prompt_tokens}, {"generated", d.generated_tokens}}},
      {"latency",
       {{"ttft_seconds", latency(d.ttft)}, {"itl_seconds", latency(d.itl)}, {"request_seconds", latency(d.duration)}}},
      {"cache",
       {{"hit_tokens", d.cache_hit_tokens},
        {"lookups", d.cache_lookups},
        {"hits", d.cache_hits},
        {"bytes", g.prompt_cache_bytes},
        {"entries", g.prompt_cache_entries}}},
      {"kv_cache", {{"blocks_used", g.kv_blocks_used}, {"blocks_total", g.kv_blocks_total}}},
      {"queue", {{"depth", g.queue_depth}, {"running", g.requests_running}}},
      {"memory", memory},
  };
}

}  // namespace hearth::server
