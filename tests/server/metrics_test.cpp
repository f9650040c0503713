// Metrics: the /metrics text is checked with a small parser of the Prometheus 0.0.4 exposition
// format (families declared, histograms cumulative, labels escaped); /stats values for known
// observations; exact totals under concurrent updates. Nothing here depends on wall time.
#include "server/metrics.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace hearth::server {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // family -> counter / gauge / histogram
  std::vector<Sample> samples;
  const Sample* find(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const Sample& s : samples) {
      if (s.name == name && s.labels == labels) return &s;
    }
    return nullptr;
  }
  double value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    const Sample* s = find(name, labels);
    EXPECT_NE(s, nullptr) << name;
    return s ? s->value : NAN;
  }
};

// The family a sample line belongs to, given the declared types.
std::string family_of(const std::string& sample, const std::map<std::string, std::string>& types) {
  if (types.count(sample)) return sample;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (sample.size() > s.size() && sample.ends_with(s)) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      if (types.count(base) && types.at(base) == "histogram") return base;
    }
  }
  return "";
}

// One sample line: name, optional {labels} with escapes undone, a space, a float.
void parse_sample(const std::string& line, Sample& s) {
  size_t i = line.find_first_of("{ ");
  ASSERT_NE(i, std::string::npos) << line;
  s.name = line.substr(0, i);
  if (line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find("=\"", i);
      ASSERT_NE(eq, std::string::npos) << line;
      const std::string key = line.substr(i, eq - i);
      std::string value;
      for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\') {
          ++i;
          ASSERT_LT(i, line.size()) << line;
          ASSERT_TRUE(line[i] == '\\' || line[i] == '"' || line[i] == 'n') << "bad escape: " << line;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
      }
      ASSERT_LT(i, line.size()) << "unterminated label: " << line;
      EXPECT_TRUE(s.labels.emplace(key, value).second) << line;
      ++i;
      if (i < line.size() && line[i] == ',') ++i;
    }
    ASSERT_LT(i, line.size()) << "unterminated labels: " << line;
    ++i;
  }
  ASSERT_TRUE(i < line.size() && line[i] == ' ') << line;
  const std::string number = line.substr(i + 1);
  char* end = nullptr;
  s.value = std::strtod(number.c_str(), &end);
  EXPECT_TRUE(!number.empty() && *end == '\0') << "bad value: " << line;
}

// Parses `text`, failing the test on anything the 0.0.4 format does not allow here: a sample
// of an undeclared family, a family without HELP or TYPE, a family split over the text, a bad
// label, a missing trailing newline.
Exposition parse(const std::string& text) {
  Exposition e;
  EXPECT_TRUE(text.ends_with("\n") && !text.ends_with("\n\n")) << "one trailing newline";
  std::set<std::string> helped, closed;
  std::string current;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      std::istringstream words(line.substr(7));
      std::string name, rest;
      words >> name >> rest;
      EXPECT_FALSE(rest.empty()) << line;
      if (line[2] == 'H') {
        EXPECT_TRUE(helped.insert(name).second) << "HELP twice: " << name;
      } else {
        EXPECT_TRUE(helped.count(name)) << "TYPE before HELP: " << name;
        EXPECT_TRUE(rest == "counter" || rest == "gauge" || rest == "histogram") << line;
        EXPECT_TRUE(e.types.emplace(name, rest).second) << "TYPE twice: " << name;
        EXPECT_TRUE(rest != "counter" || name.ends_with("_total")) << name;
      }
      EXPECT_TRUE(name.starts_with("hearth_")) << name;
      continue;
    }
    EXPECT_FALSE(line.empty() || line[0] == '#') << "unexpected line: '" << line << "'";
    Sample s;
    parse_sample(line, s);
    if (::testing::Test::HasFatalFailure()) return e;
    const std::string family = family_of(s.name, e.types);
    EXPECT_FALSE(family.empty()) << "sample of an undeclared family: " << line;
    if (family != current) {
      EXPECT_FALSE(closed.count(family)) << "family split: " << family;
      closed.insert(current);
      current = family;
    }
    e.samples.push_back(s);
  }
  for (const std::string& name : helped) EXPECT_TRUE(e.types.count(name)) << "HELP without TYPE: " << name;
  return e;
}

// Buckets cumulative and non-decreasing, le increasing and ending at +Inf, +Inf == _count.
void check_histogram(const Exposition& e, const std::string& name) {
  ASSERT_EQ(e.types.count(name), 1u) << name;
  EXPECT_EQ(e.types.at(name), "histogram");
  double last_le = -INFINITY, last_count = 0;
  int buckets = 0;
  for (const Sample& s : e.samples) {
    if (s.name != name + "_bucket") continue;
    ++buckets;
    ASSERT_EQ(s.labels.size(), 1u);
    const double le = std::strtod(s.labels.at("le").c_str(), nullptr);
    EXPECT_GT(le, last_le) << name;
    EXPECT_GE(s.value, last_count) << name << " le=" << s.labels.at("le");
    last_le = le;
    last_count = s.value;
  }
  EXPECT_GT(buckets, 1) << name;
  EXPECT_TRUE(std::isinf(last_le)) << name << ": last bucket is not +Inf";
  EXPECT_EQ(e.value(name + "_bucket", {{"le", "+Inf"}}), e.value(name + "_count"));
  EXPECT_NE(e.find(name + "_sum"), nullptr);
}

const char* const kHistograms[] = {"hearth_time_to_first_token_seconds", "hearth_inter_token_latency_seconds",
                                   "hearth_request_duration_seconds"};

TEST(server_metrics, ParserCatchesBadText) {
  EXPECT_NONFATAL_FAILURE(parse("hearth_x 1\n"), "undeclared family");
  EXPECT_FATAL_FAILURE(parse("# HELP hearth_x_total x\n# TYPE hearth_x_total counter\nhearth_x_total{a=\"\\q\"} 1\n"),
                       "bad escape");
  EXPECT_NONFATAL_FAILURE(check_histogram(parse("# HELP hearth_h h\n# TYPE hearth_h histogram\n"
                                                "hearth_h_bucket{le=\"1\"} 2\nhearth_h_bucket{le=\"+Inf\"} 1\n"
                                                "hearth_h_sum 1\nhearth_h_count 1\n"),
                                          "hearth_h"),
                          "le=+Inf");
}

// Every unlabeled counter and gauge with its value after the updates in CountersAndGauges.
const std::pair<const char*, double> kScalars[] = {{"hearth_requests_cancelled_total", 1},
                                                   {"hearth_prompt_tokens_total", 120},
                                                   {"hearth_generated_tokens_total", 30},
                                                   {"hearth_prompt_cache_hit_tokens_total", 64},
                                                   {"hearth_prompt_cache_lookups_total", 2},
                                                   {"hearth_prompt_cache_hits_total", 1},
                                                   {"hearth_queue_depth", 3},
                                                   {"hearth_requests_running", 1},
                                                   {"hearth_kv_cache_blocks_used", 17},
                                                   {"hearth_kv_cache_blocks_total", 256},
                                                   {"hearth_prompt_cache_bytes", 1 << 20},
                                                   {"hearth_prompt_cache_entries", 2},
                                                   {"hearth_process_resident_memory_bytes", 123456789}};

TEST(server_metrics, EmptyMetricsRenderEveryFamily) {
  const Exposition e = parse(Metrics().prometheus({}));
  EXPECT_EQ(e.types.count("hearth_requests_total"), 1u);
  for (const auto& [name, _] : kScalars) EXPECT_EQ(e.value(name), 0) << name;
  for (const char* h : kHistograms) {
    check_histogram(e, h);
    EXPECT_EQ(e.value(std::string(h) + "_count"), 0);
  }
}

TEST(server_metrics, CountersAndGauges) {
  Metrics m;
  m.count_request("chat", 200);
  m.count_request("chat", 200);
  m.count_request("completion", 400);
  m.count_request("messages", 503);
  m.count_cancelled();
  m.add_prompt_tokens(120);
  m.add_generated_tokens(30);
  m.count_prompt_cache_lookup(0);
  m.count_prompt_cache_lookup(64);
  const Exposition e = parse(m.prometheus({.queue_depth = 3,
                                           .requests_running = 1,
                                           .kv_blocks_used = 17,
                                           .kv_blocks_total = 256,
                                           .prompt_cache_bytes = 1 << 20,
                                           .prompt_cache_entries = 2,
                                           .resident_memory_bytes = 123456789}));
  EXPECT_EQ(e.value("hearth_requests_total", {{"endpoint", "chat"}, {"status", "200"}}), 2);
  EXPECT_EQ(e.value("hearth_requests_total", {{"endpoint", "completion"}, {"status", "400"}}), 1);
  EXPECT_EQ(e.value("hearth_requests_total", {{"endpoint", "messages"}, {"status", "503"}}), 1);
  for (const auto& [name, want] : kScalars) EXPECT_EQ(e.value(name), want) << name;
}

TEST(server_metrics, HistogramBucketsAndSumForKnownObservations) {
  Metrics m;
  const double ttfts[] = {0.003, 0.05, 0.5, 3.0, 5000.0};  // 0.5 sits on a bound: le is inclusive
  double sum = 0;
  for (const double t : ttfts) {
    m.observe_time_to_first_token(t);
    sum += t;
  }
  m.observe_time_to_first_token(NAN);  // ignored
  m.observe_inter_token_latency(0.02);
  m.observe_request_duration(7.0);
  const Exposition e = parse(m.prometheus({}));
  for (const char* h : kHistograms) check_histogram(e, h);
  const std::string t = "hearth_time_to_first_token_seconds";
  EXPECT_EQ(e.value(t + "_count"), 5);
  EXPECT_EQ(e.value(t + "_sum"), sum);  // shortest round-trip text: exact
  const std::pair<const char*, double> cumulative[] = {{"0.001", 0}, {"0.005", 1}, {"0.06", 2}, {"0.5", 3},
                                                       {"5", 4},     {"2560", 4},  {"+Inf", 5}};
  for (const auto& [le, want] : cumulative) EXPECT_EQ(e.value(t + "_bucket", {{"le", le}}), want) << le;
  EXPECT_EQ(e.value("hearth_inter_token_latency_seconds_count"), 1);
  EXPECT_EQ(e.value("hearth_inter_token_latency_seconds_sum"), 0.02);
  EXPECT_EQ(e.value("hearth_request_duration_seconds_bucket", {{"le", "5"}}), 0);
  EXPECT_EQ(e.value("hearth_request_duration_seconds_bucket", {{"le", "10"}}), 1);
}

TEST(server_metrics, LabelValuesAreEscaped) {
  Metrics m;
  const std::string odd = "a\"b\\c\nd";
  m.count_request(odd, 500);
  const std::string text = m.prometheus({});
  EXPECT_NE(text.find(R"(hearth_requests_total{endpoint="a\"b\\c\nd",status="500"} 1)"), std::string::npos) << text;
  const Exposition e = parse(text);
  EXPECT_EQ(e.value("hearth_requests_total", {{"endpoint", odd}, {"status", "500"}}), 1);
  EXPECT_EQ(m.stats({})["requests"]["by_endpoint"][odd], 1);
}

TEST(server_metrics, ConcurrentUpdatesGiveExactTotals) {
  Metrics m;
  constexpr int kThreads = 8, kIters = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kIters; ++i) {
        m.count_request(t % 2 ? "chat" : "completion", 200);
        m.add_generated_tokens(1);
        m.add_prompt_tokens(2);
        m.observe_inter_token_latency(0.02);
        m.observe_time_to_first_token(0.25);
        m.count_prompt_cache_lookup(i % 2 ? 3 : 0);
      }
    });
  }
  std::thread reader([&m] {
    for (int i = 0; i < 50; ++i) parse(m.prometheus({}));  // renders while others update
  });
  for (std::thread& t : threads) t.join();
  reader.join();
  const Exposition e = parse(m.prometheus({}));
  constexpr double n = kThreads * kIters;
  EXPECT_EQ(e.value("hearth_requests_total", {{"endpoint", "chat"}, {"status", "200"}}), n / 2);
  EXPECT_EQ(e.value("hearth_requests_total", {{"endpoint", "completion"}, {"status", "200"}}), n / 2);
  EXPECT_EQ(e.value("hearth_generated_tokens_total"), n);
  EXPECT_EQ(e.value("hearth_prompt_tokens_total"), 2 * n);
  EXPECT_EQ(e.value("hearth_prompt_cache_lookups_total"), n);
  EXPECT_EQ(e.value("hearth_prompt_cache_hits_total"), n / 2);
  EXPECT_EQ(e.value("hearth_prompt_cache_hit_tokens_total"), 3 * n / 2);
  EXPECT_EQ(e.value("hearth_inter_token_latency_seconds_count"), n);
  EXPECT_EQ(e.value("hearth_inter_token_latency_seconds_bucket", {{"le", "0.01"}}), 0);
  EXPECT_EQ(e.value("hearth_inter_token_latency_seconds_bucket", {{"le", "0.025"}}), n);
  EXPECT_EQ(e.value("hearth_time_to_first_token_seconds_bucket", {{"le", "0.25"}}), n);
  EXPECT_NEAR(e.value("hearth_inter_token_latency_seconds_sum"), 0.02 * n, 1e-6);
}

TEST(server_metrics, StatsSummarizeKnownObservations) {
  Metrics m;
  // 50 in (0.01, 0.025], 40 in (0.05, 0.075], 10 in (0.2, 0.3].
  for (int i = 0; i < 50; ++i) m.observe_inter_token_latency(0.02);
  for (int i = 0; i < 40; ++i) m.observe_inter_token_latency(0.06);
  for (int i = 0; i < 10; ++i) m.observe_inter_token_latency(0.3);
  m.observe_time_to_first_token(0.7);
  m.count_request("chat", 200);
  m.count_request("chat", 429);
  m.count_request("completion", 400);
  m.count_request("messages", 500);
  m.add_prompt_tokens(10);
  m.add_generated_tokens(7);
  m.count_prompt_cache_lookup(5);
  m.count_prompt_cache_lookup(0);
  const nlohmann::ordered_json s = m.stats({.queue_depth = 4,
                                            .requests_running = 1,
                                            .prompt_cache_bytes = 99,
                                            .prompt_cache_entries = 3,
                                            .resident_memory_bytes = 4096});
  EXPECT_GE(s["uptime_seconds"].get<double>(), 0.0);
  const nlohmann::ordered_json want = {
      {"requests",
       {{"total", 4},
        {"by_endpoint", {{"chat", 2}, {"completion", 1}, {"messages", 1}}},
        {"errors_4xx", 2},
        {"errors_5xx", 1},
        {"cancelled", 0}}},
      {"tokens", {{"prompt", 10}, {"generated", 7}}},
      {"cache", {{"hit_tokens", 5}, {"lookups", 2}, {"hits", 1}, {"bytes", 99}, {"entries", 3}}},
      {"kv_cache", {{"blocks_used", 0}, {"blocks_total", 0}}},
      {"queue", {{"depth", 4}, {"running", 1}}},
      {"memory", {{"rss_bytes", 4096}}}};
  for (const auto& [key, value] : want.items()) EXPECT_EQ(s.at(key), value) << key;
  // On a GPU, its memory beside the process's.
  const nlohmann::ordered_json gpu = m.stats({.resident_memory_bytes = 4096,
                                              .device = "cuda:0",
                                              .device_memory_total_bytes = 1000,
                                              .device_memory_free_bytes = 600,
                                              .device_memory_held_bytes = 300,
                                              .device_memory_in_use_bytes = 200});
  EXPECT_EQ(gpu["memory"], nlohmann::ordered_json({{"rss_bytes", 4096},
                                                   {"device",
                                                    {{"name", "cuda:0"},
                                                     {"total_bytes", 1000},
                                                     {"free_bytes", 600},
                                                     {"held_bytes", 300},
                                                     {"in_use_bytes", 200}}}}));
  const Exposition e = parse(m.prometheus({.device = "cuda:0",
                                           .device_memory_total_bytes = 1000,
                                           .device_memory_free_bytes = 600,
                                           .device_memory_held_bytes = 300,
                                           .device_memory_in_use_bytes = 200}));
  EXPECT_EQ(e.value("hearth_device_memory_bytes", {{"device", "cuda:0"}, {"kind", "free"}}), 600);
  EXPECT_EQ(e.value("hearth_device_memory_bytes", {{"device", "cuda:0"}, {"kind", "in_use"}}), 200);
  const auto& itl = s["latency"]["itl_seconds"];
  EXPECT_EQ(itl["count"], 100);
  EXPECT_NEAR(itl["mean"].get<double>(), (50 * 0.02 + 40 * 0.06 + 10 * 0.3) / 100, 1e-12);
  const double p50 = itl["p50"], p90 = itl["p90"], p99 = itl["p99"];
  EXPECT_TRUE(p50 > 0.01 && p50 <= 0.025) << p50;
  EXPECT_TRUE(p90 > 0.05 && p90 <= 0.075) << p90;
  EXPECT_TRUE(p99 > 0.2 && p99 <= 0.3) << p99;
  const auto& ttft = s["latency"]["ttft_seconds"];
  EXPECT_EQ(ttft["count"], 1);
  EXPECT_DOUBLE_EQ(ttft["mean"].get<double>(), 0.7);
  EXPECT_TRUE(ttft["p50"].get<double>() > 0.5 && ttft["p50"].get<double>() <= 0.75);
  EXPECT_TRUE(s["latency"]["request_seconds"]["mean"].is_null());  // no observations
  EXPECT_TRUE(s["latency"]["request_seconds"]["p99"].is_null());
}

TEST(server_metrics, HistogramQuantileInterpolatesWithinBucket) {
  Histogram h({1, 2, 4});
  EXPECT_TRUE(std::isnan(h.quantile(0.5)));
  for (int i = 0; i < 4; ++i) h.observe(1.5);
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 1.5);  // rank 2 of 4 in (1, 2]
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 2.0);
  h.observe(0.5);
  EXPECT_DOUBLE_EQ(h.quantile(0.0), 0.0);  // the first bucket starts at 0
  for (int i = 0; i < 20; ++i) h.observe(100);
  EXPECT_DOUBLE_EQ(h.quantile(0.99), 4.0);  // +Inf bucket: the highest finite bound
  EXPECT_EQ(h.count(), 25u);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{1, 4, 0, 20}));
  EXPECT_THROW(Histogram({2, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace hearth::server
