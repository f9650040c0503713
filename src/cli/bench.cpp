// hearth bench: load time, prefill (pp) and decode (tg) speed, time to first token and peak
// memory for one model, and decode against its roofline: the bytes one decoded token reads
// (weights + KV cache) divided by the memory read bandwidth measured in the same run.
// Every run is recorded in the evals database (`hearth evals` lists them).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/knobs.h"
#include "base/strings.h"
#include "base/timer.h"
#include "cli/common.h"
#include "cli/evals_db.h"
#include "cli/verbs.h"
#include "core/bandwidth.h"
#include "formats/json_config.h"
#include "formats/weight_store.h"
#include "runtime/generation.h"

#ifndef HEARTH_COMMIT
#define HEARTH_COMMIT "unknown"
#endif

namespace hearth::cli {
namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kPromptSeed = 0x4845415254480001;  // fixed: every run sees the same prompt

// What the forward reads per decoded token, as the model was loaded (after --dtype; quantized
// matrices with their scales): see ModelInfo::decode_weight_bytes.
struct WeightFootprint {
  uint64_t params = 0;
  uint64_t bytes_per_token = 0;
  std::string stored_dtype;  // the format of most matrix bytes
  std::string dtype;         // as the forward reads the matrices (the same, once loaded)
};

WeightFootprint weight_footprint(const ModelInfo& info) {
  return WeightFootprint{info.params, info.decode_weight_bytes, info.weight_format, info.weight_format};
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// splitmix64: the same ids on every platform and standard library.
std::vector<int32_t> random_prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids;
  uint64_t state = kPromptSeed;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    ids.push_back(static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab)));
  }
  return ids;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Rep {
  double prefill_tokens_per_second, ttft_seconds, decode_tokens_per_second;
  double bandwidth = 0;  // bytes/s: probed right after this run, or the median of its probes
};

// One greedy generation of exactly gen_tokens tokens after the prompt. between(n) runs after
// token n (1 .. gen_tokens - 1), outside the timed steps.
Rep run_once(Engine& engine, const std::vector<int32_t>& prompt, int64_t gen_tokens,
             const std::function<void(int64_t)>& between = nullptr) {
  GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = gen_tokens;
  req.ignore_eos = true;
  req.prefill_chunk = static_cast<int64_t>(prompt.size());
  GenerationStream stream(engine, req);
  for (int64_t n = 1; stream.next(); ++n) {
    if (between && n < gen_tokens) between(n);
  }
  const GenerationStats& st = stream.stats();
  HEARTH_CHECK(st.generated_tokens == gen_tokens && st.prefill_seconds > 0 && st.decode_seconds > 0);
  return {static_cast<double>(st.prompt_tokens) / st.prefill_seconds, st.prefill_seconds,
          static_cast<double>(st.generated_tokens - 1) / st.decode_seconds};
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Decimal units, as bandwidth is quoted (GB/s).
std::string decimal_bytes(double v) {
  if (v >= 1e9) return fixed(v / 1e9, 3) + " GB";
  if (v >= 1e6) return fixed(v / 1e6, 1) + " MB";
  if (v >= 1e3) return fixed(v / 1e3, 1) + " kB";
  return fixed(v, 0) + " B";
}

void print_table(const json& j) {
  const json& m = j["model"];
  const json& bw = j["bandwidth"];
  const json& rf = j["roofline"];
  const json& st = j["settings"];
  const std::string pp = "pp" + std::to_string(st["prompt_tokens"].get<int64_t>());
  const std::string tg = "tg" + std::to_string(st["gen_tokens"].get<int64_t>());
  const double params = m["params"].get<double>();
  std::printf("model      %s (%s, %s params, %s)\n", m["path"].get<std::string>().c_str(),
              m["arch"].get<std::string>().c_str(),
              (params >= 1e9 ? fixed(params / 1e9, 2) + "B" : fixed(params / 1e6, 1) + "M").c_str(),
              m["dtype"].get<std::string>().c_str());
  std::printf("machine    %s, %lld cores, %s; %lld threads; median of %lld runs\n",
              j["machine"]["cpu_model"].get<std::string>().c_str(), j["machine"]["cpu_cores"].get<long long>(),
              j["machine"]["isa"].get<std::string>().c_str(), st["threads"].get<long long>(),
              st["reps"].get<long long>());
  std::printf("%-10s %12s\n", "load", (fixed(j["load_seconds"].get<double>(), 3) + " s").c_str());
  std::printf("%-10s %12s\n", pp.c_str(), (fixed(j["prefill_tokens_per_second"].get<double>(), 1) + " tok/s").c_str());
  const double ttft = j["ttft_seconds"].get<double>();
  std::printf("%-10s %12s\n", "ttft", (ttft >= 1 ? fixed(ttft, 3) + " s" : fixed(ttft * 1e3, 2) + " ms").c_str());
  std::printf("%-10s %12s\n", tg.c_str(), (fixed(j["decode_tokens_per_second"].get<double>(), 2) + " tok/s").c_str());
  std::printf("%-10s %12s\n", "peak RSS", format_bytes(j["peak_rss_bytes"].get<uint64_t>()).c_str());
  const int64_t probes = bw.value("probes_per_run", int64_t{1});
  const std::string when = probes > 1
                               ? "the median of " + std::to_string(probes) + " probes in each run, each the best of " +
                                     std::to_string(bw["passes"].get<int>()) + " passes"
                               : "best of " + std::to_string(bw["passes"].get<int>()) + " passes after each run";
  std::printf("%-10s %12s  (%s read, %s buffer, %s)\n", "bandwidth",
              (fixed(bw["bytes_per_second"].get<double>() / 1e9, 1) + " GB/s").c_str(),
              bw["isa"].get<std::string>().c_str(), format_bytes(bw["buffer_bytes"].get<uint64_t>()).c_str(),
              when.c_str());
  std::printf("%-10s %12s  (weights %s + KV %s at mean context %.0f)\n", "bytes/tok",
              decimal_bytes(rf["bytes_per_token"].get<double>()).c_str(),
              decimal_bytes(rf["weight_bytes_per_token"].get<double>()).c_str(),
              decimal_bytes(rf["kv_bytes_per_token"].get<double>()).c_str(), rf["mean_context"].get<double>());
  std::printf("%-10s %12s  each run's decode at a median %.0f%% of its own\n", "roofline",
              (fixed(rf["tokens_per_second"].get<double>(), 2) + " tok/s").c_str(),
              100 * rf["decode_fraction"].get<double>());
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  ModelFlags mf;
  int64_t prompt_tokens = 512, gen_tokens = 128, reps = 3, bandwidth_mib = 0, probe_every = 0;
  bool json_out = false, no_record = false;
  std::string db_path;
  Flags f("bench", "MODEL [flags]",
          "Measures load time, prefill (ppN) and decode (tgN) speed, time to first token and peak\n"
          "memory, and after each run the machine's memory read bandwidth with the same threads;\n"
          "reports decode as a fraction of its roofline: bandwidth / bytes read per decoded token\n"
          "(weights at the dtype the forward reads + the KV cache at the mean context), the median\n"
          "of each run against the bandwidth probed after it. The prompt is random token\n"
          "ids from a fixed seed; decode is greedy and ignores end-of-sequence. Each run is recorded\n"
          "in the evals database (see hearth evals).");
  mf.declare(f);
  f.add("prompt-tokens", "Prompt length for prefill, in tokens (default 512).", &prompt_tokens);
  f.add("gen-tokens", "Tokens to generate, at least 2 (default 128).", &gen_tokens);
  f.add("reps", "Runs to take the median of (default 3).", &reps);
  f.add("bandwidth-mib", "Bandwidth probe buffer in MiB; 0 = max(1 GiB, 4x the last-level cache) (default 0).",
        &bandwidth_mib);
  f.add("probe-every",
        "Also probe the bandwidth before each run and every N decoded tokens (not timed as decode); "
        "the run's bandwidth is then the median of its probes, for machines whose bandwidth drifts "
        "within seconds. 0: only after each run (default 0).",
        &probe_every);
  f.add("json", "Print one JSON object instead of the table.", &json_out);
  f.add("db", "Evals database (default $XDG_CACHE_HOME/hearth/evals.sqlite, else ~/.cache/hearth/...).", &db_path);
  f.add("no-record", "Do not record the run in the evals database.", &no_record);
  if (!f.parse(args)) return 0;
  if (prompt_tokens < 1) throw InputError("bench: --prompt-tokens must be >= 1");
  if (gen_tokens < 2) throw InputError("bench: --gen-tokens must be >= 2 (decode speed needs a second token)");
  if (reps < 1) throw InputError("bench: --reps must be >= 1");
  if (bandwidth_mib < 0) throw InputError("bench: --bandwidth-mib must be >= 0");
  if (probe_every < 0) throw InputError("bench: --probe-every must be >= 0");
  if (!no_record) {
    if (db_path.empty()) db_path = default_evals_db_path();
    list_bench_runs(db_path, 1);  // an unusable database fails now, not after the run
  }

  const Timer load_timer;
  auto pool = mf.make_pool();
  const LoadOptions load_options = mf.load_options();
  auto model = load_model(mf.model, load_options);
  const double load_seconds = load_timer.seconds();
  const ModelInfo& info = model->info();
  std::fprintf(stderr, "bench: loaded %s in %.3f s; %lld threads\n", mf.model.c_str(), load_seconds,
               static_cast<long long>(pool->size()));
  const WeightFootprint weights = weight_footprint(info);

  EngineOptions eo = mf.engine_options();
  eo.kv_tokens = prompt_tokens + gen_tokens;
  Engine engine(*model, Context{pool.get(), load_options.device}, eo);
  const std::vector<int32_t> prompt = random_prompt(prompt_tokens, info.vocab_size);
  // Warm-up: fault in the mapped weights and the first KV pages; not measured.
  run_once(engine, std::vector<int32_t>(prompt.begin(), prompt.begin() + std::min<int64_t>(prompt_tokens, 16)), 2);
  // The bandwidth is probed right after each run: on a shared machine it drifts (other tenants'
  // traffic), so each run's decode is set against the bandwidth of its own moment.
  Context ctx{pool.get(), load_options.device};
  BandwidthProbe probe;
  probe.bytes = static_cast<size_t>(bandwidth_mib) << 20;
  std::vector<Rep> runs;
  size_t peak_rss = 0;
  BandwidthResult bw;
  std::vector<double> probes;  // this run's
  auto probe_now = [&] {
    bw = measure_read_bandwidth(ctx, probe);
    probes.push_back(bw.bytes_per_second);
  };
  for (int64_t r = 0; r < reps; ++r) {
    probes.clear();
    // The first run measures the peak RSS without the probe's buffer: after its prompt (the
    // prefill's peak) before any probe, and its resident set at the end (the KV cache grown).
    if (probe_every > 0 && r > 0) probe_now();
    runs.push_back(run_once(engine, prompt, gen_tokens, [&](int64_t n) {
      if (probe_every == 0) return;
      if (r == 0 && n == 1) peak_rss = peak_rss_bytes();
      if (r == 0 && n == gen_tokens - 1) peak_rss = std::max(peak_rss, current_rss_bytes());
      if (n % probe_every == 0) probe_now();
    }));
    if (r == 0 && probe_every == 0) peak_rss = peak_rss_bytes();  // before the probe's buffer
    probe_now();
    runs.back().bandwidth = median(probes);
    std::fprintf(stderr, "bench: run %lld/%lld: pp %.1f tok/s, tg %.2f tok/s, read bandwidth %.1f GB/s\n",
                 static_cast<long long>(r + 1), static_cast<long long>(reps), runs.back().prefill_tokens_per_second,
                 runs.back().decode_tokens_per_second, runs.back().bandwidth / 1e9);
  }
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const Rep& r : runs) v.push_back(field(r));
    return median(v);
  };

  // KV bytes per token of context: K and V of every layer, at the cache's dtype.
  uint64_t kv_bytes_per_position = 0;
  for (const ops::KvLayer& l : engine.kv().layers)
    kv_bytes_per_position += 2 * static_cast<uint64_t>(l.k.dim(2) * l.k.dim(3)) * dtype_size(l.k.dtype());
  // Decode step i (1..G-1) attends over P + i positions: the mean is P + G/2.
  const double mean_context = static_cast<double>(prompt_tokens) + static_cast<double>(gen_tokens) / 2;
  const double kv_bytes = static_cast<double>(kv_bytes_per_position) * mean_context;
  const double bytes_per_token = static_cast<double>(weights.bytes_per_token) + kv_bytes;
  const double bandwidth = med([](const Rep& r) { return r.bandwidth; });
  const double roofline = bandwidth / bytes_per_token;
  const double decode = med([](const Rep& r) { return r.decode_tokens_per_second; });
  // The median of each run's fraction of its own roofline.
  const double decode_fraction =
      med([&](const Rep& r) { return r.decode_tokens_per_second * bytes_per_token / r.bandwidth; });

  json j;
  j["timestamp"] = utc_now();
  j["hearth_commit"] = HEARTH_COMMIT;
  j["machine"] = {{"cpu_model", cpu_model_name()},
                  {"cpu_cores", std::max(1u, std::thread::hardware_concurrency())},
                  {"isa", bw.isa},
                  // HEARTH_ISA may force narrower kernels than the CPU has (the probe uses the widest).
                  {"kernel_isa", knobs::isa() == "auto" ? bw.isa : knobs::isa()}};
  j["model"] = {{"path", mf.model},
                {"arch", info.model_type},
                {"params", weights.params},
                {"dtype", weights.dtype},
                {"stored_dtype", weights.stored_dtype},
                {"file_bytes", info.weight_bytes},
                {"n_layers", info.n_layers},
                {"hidden", info.hidden},
                {"vocab_size", info.vocab_size}};
  j["settings"] = {{"threads", pool->size()},    {"prompt_tokens", prompt_tokens},
                   {"gen_tokens", gen_tokens},   {"reps", reps},
                   {"prompt_seed", kPromptSeed}, {"probe_every", probe_every}};
  j["load_seconds"] = load_seconds;
  j["prefill_tokens_per_second"] = med([](const Rep& r) { return r.prefill_tokens_per_second; });
  j["ttft_seconds"] = med([](const Rep& r) { return r.ttft_seconds; });
  j["decode_tokens_per_second"] = decode;
  j["peak_rss_bytes"] = peak_rss;
  j["bandwidth"] = {{"bytes_per_second", bandwidth},   {"buffer_bytes", bw.bytes}, {"passes", bw.passes},
                    {"probes_per_run", probes.size()}, {"threads", bw.threads},    {"isa", bw.isa}};
  j["roofline"] = {{"weight_bytes_per_token", weights.bytes_per_token},
                   {"kv_bytes_per_token", static_cast<uint64_t>(std::llround(kv_bytes))},
                   {"mean_context", mean_context},
                   {"bytes_per_token", bytes_per_token},
                   {"tokens_per_second", roofline},
                   {"decode_fraction", decode_fraction}};
  json per_run = json::array();
  for (const Rep& r : runs) {
    per_run.push_back({{"prefill_tokens_per_second", r.prefill_tokens_per_second},
                       {"ttft_seconds", r.ttft_seconds},
                       {"decode_tokens_per_second", r.decode_tokens_per_second},
                       {"bandwidth_bytes_per_second", r.bandwidth},
                       {"decode_fraction", r.decode_tokens_per_second * bytes_per_token / r.bandwidth}});
  }
  j["runs"] = per_run;

  if (json_out) {
    std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    print_table(j);
  }
  std::fflush(stdout);
  if (!no_record) {
    BenchRecord rec;
    rec.timestamp = j["timestamp"];
    rec.commit = HEARTH_COMMIT;
    rec.cpu_model = j["machine"]["cpu_model"];
    rec.cpu_cores = j["machine"]["cpu_cores"];
    rec.isa = bw.isa;
    rec.model_path = mf.model;
    rec.model_arch = info.model_type;
    rec.model_params = static_cast<int64_t>(weights.params);
    rec.model_dtype = weights.dtype;
    rec.threads = pool->size();
    rec.prompt_tokens = prompt_tokens;
    rec.gen_tokens = gen_tokens;
    rec.reps = reps;
    rec.load_seconds = load_seconds;
    rec.prefill_tokens_per_second = j["prefill_tokens_per_second"];
    rec.ttft_seconds = j["ttft_seconds"];
    rec.decode_tokens_per_second = decode;
    rec.peak_rss_bytes = static_cast<int64_t>(peak_rss);
    rec.bandwidth_bytes_per_second = bandwidth;
    rec.bytes_per_token = bytes_per_token;
    rec.roofline_tokens_per_second = roofline;
    rec.roofline_fraction = decode_fraction;
    rec.json = j.dump(-1, ' ', false, json::error_handler_t::replace);
    const int64_t id = record_bench_run(db_path, rec);
    std::fprintf(stderr, "bench: recorded run %lld in %s\n", static_cast<long long>(id), db_path.c_str());
  }
  return 0;
}

}  // namespace hearth::cli
