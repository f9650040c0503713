// What `hearth serve` adds on top of the engine: the same greedy generation (same prompt
// tokens, same number of generated tokens) run (a) on the engine directly through a
// GenerationStream and (b) through an in-process HttpServer, streamed over loopback HTTP from
// /v1/completions, as a client sees it. Reports time to first token and decode speed of both,
// the added TTFT (ms) and the decode loss (%), medians over interleaved repeats.
//
// Both sides use one model, one thread pool and engines with the prompt cache off, so every
// TTFT includes the whole prefill. The decode is forced onto one ordinary text token
// (logit_bias +100, on both sides) so that every generated token is one SSE frame and EOS
// never ends a run early; the forward pass does not depend on which token it is fed.
//
// Wall-clock differences of a few percent drown in noise on a shared machine, so two
// load-independent measures come with them: the CPU time of each role (compute threads, the
// server's HTTP threads, the client) from /proc/self/task/*/schedstat, and the split of the
// HTTP TTFT into the server's own TTFT (handler start -> first token read, from /metrics)
// and what lies outside the handler (connection, httplib, writing the first frame, reading it).
//
// Usage: server_overhead_bench MODEL_DIR [--tokenizer DIR] [--threads N] [--prompt-tokens 128]
//        [--tokens 64] [--repeats 5] [--compute-nice N] [--json]
#include <httplib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generation.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace {

using json = nlohmann::ordered_json;
using hearth::Timer;

struct Run {
  double ttft_s = 0;        // request -> first token (engine) / first content frame (HTTP)
  double decode_tok_s = 0;  // (tokens - 1) / (last token - first token)
  int64_t tokens = 0;
  std::vector<double> gaps_s;  // between consecutive tokens / frames
  double headers_s = 0;        // HTTP: request -> response headers read
  double server_ttft_s = 0;    // HTTP: the server's own TTFT (handler start -> first token read), from /metrics
  // CPU time by role (ns): the forward passes (pool workers + the thread that drives the
  // engine), the server's HTTP threads, the client (this thread; HTTP runs only).
  int64_t compute_ns = 0, server_ns = 0, client_ns = 0;
};

// CPU time of every thread of this process so far (ns, from /proc/self/task/TID/schedstat),
// by thread id. Unlike wall time it does not grow when other jobs share the machine.
using ThreadCpu = std::map<int, int64_t>;
ThreadCpu thread_cpu() {
  ThreadCpu out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(e.path() / "schedstat");
    int64_t ns = 0;
    if (f >> ns) out[std::stoi(e.path().filename().string())] = ns;
  }
  return out;
}

std::set<int> tids_of(const ThreadCpu& t) {
  std::set<int> out;
  for (const auto& [tid, ns] : t) out.insert(tid);
  return out;
}

// CPU used between two snapshots by the threads in `in` (or, with in_set false, by those not in it).
int64_t cpu_between(const ThreadCpu& before, const ThreadCpu& after, const std::set<int>& tids, bool in_set = true) {
  int64_t total = 0;
  for (const auto& [tid, ns] : after) {
    if ((tids.count(tid) != 0) != in_set) continue;
    auto it = before.find(tid);
    total += ns - (it == before.end() ? 0 : it->second);
  }
  return total;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Run from_times(double ttft, const std::vector<double>& times) {
  Run r;
  r.ttft_s = ttft;
  r.tokens = static_cast<int64_t>(times.size());
  if (times.size() >= 2) {
    r.decode_tok_s = static_cast<double>(times.size() - 1) / (times.back() - times.front());
    for (size_t i = 1; i < times.size(); ++i) r.gaps_s.push_back(times[i] - times[i - 1]);
  }
  return r;
}

Run run_engine(hearth::Engine& engine, const hearth::GenerationRequest& request) {
  std::vector<double> times;
  const Timer t;
  hearth::GenerationStream stream(engine, request);
  while (stream.next()) times.push_back(t.seconds());
  return from_times(times.empty() ? 0 : times.front(), times);
}

// One streamed /v1/completions request; times are taken as each SSE frame arrives.
Run run_http(int port, const json& body, std::string* text, int64_t* prompt_tokens, int64_t* completion_tokens) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(3600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buf, error;
  std::vector<double> times;
  Timer t;
  double headers_s = 0;
  req.response_handler = [&](const httplib::Response&) {
    headers_s = t.seconds();
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double now = t.seconds();
    buf.append(data, n);
    for (size_t end; (end = buf.find("\n\n")) != std::string::npos; buf.erase(0, end + 2)) {
      if (buf.rfind("data: ", 0) != 0 || buf.compare(6, end - 6, "[DONE]") == 0) continue;
      const json j = json::parse(buf.substr(6, end - 6));
      if (j.contains("error")) error = j["error"].dump();
      if (j.contains("usage") && j["usage"].is_object()) {
        *prompt_tokens = j["usage"]["prompt_tokens"];
        *completion_tokens = j["usage"]["completion_tokens"];
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const std::string piece = j["choices"][0]["text"];
      if (piece.empty()) continue;  // the finish frame
      times.push_back(now);
      *text += piece;
    }
    return true;
  };
  t.reset();
  const httplib::Result res = c.send(req);
  if (!res) throw std::runtime_error("HTTP request failed: " + httplib::to_string(res.error()));
  if (res->status != 200) throw std::runtime_error("HTTP " + std::to_string(res->status) + ": " + res->body);
  if (!error.empty()) throw std::runtime_error("error frame: " + error);
  Run r = from_times(times.empty() ? 0 : times.front(), times);
  r.headers_s = headers_s;
  return r;
}

// The server's hearth_time_to_first_token_seconds_sum (GET /metrics).
double server_ttft_sum(int port) {
  httplib::Client c("127.0.0.1", port);
  const httplib::Result r = c.Get("/metrics");
  if (!r || r->status != 200) throw std::runtime_error("GET /metrics failed");
  const std::string key = "\nhearth_time_to_first_token_seconds_sum ";
  const size_t at = r->body.find(key);
  if (at == std::string::npos) throw std::runtime_error("/metrics has no " + key.substr(1));
  return std::stod(r->body.substr(at + key.size()));
}

// A prompt of common words whose encoding (as /v1/completions encodes it) has exactly `n`
// tokens, or as close as word boundaries allow.
std::string prompt_text(const hearth::Tokenizer& tok, int64_t n, std::vector<int32_t>* ids) {
  static const char* const kWords[] = {"the", "quick", "brown", "fox",  "jumps", "over", "a",    "lazy", "dog",
                                       "and", "then",  "runs",  "back", "to",    "its",  "home", "in",   "town"};
  std::string text;
  for (int64_t words = 0;; ++words) {
    std::string next = text.empty() ? kWords[0] : text + " " + kWords[words % std::size(kWords)];
    const std::vector<int32_t> next_ids = tok.encode(next, /*add_special_tokens=*/true);
    if (static_cast<int64_t>(next_ids.size()) > n && !text.empty()) break;
    text = std::move(next);
    *ids = next_ids;
    if (static_cast<int64_t>(ids->size()) == n) break;
  }
  return text;
}

struct Args {
  std::string model, tokenizer;
  int threads = 0;
  int64_t prompt_tokens = 128, tokens = 64;
  int repeats = 5;
  int compute_nice = 0;
  bool json_out = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw hearth::InputError(s + " needs a value");
      return argv[++i];
    };
    if (s == "--tokenizer") {
      a.tokenizer = value();
    } else if (s == "--threads") {
      a.threads = std::stoi(value());
    } else if (s == "--prompt-tokens") {
      a.prompt_tokens = std::stoll(value());
    } else if (s == "--tokens") {
      a.tokens = std::stoll(value());
    } else if (s == "--repeats") {
      a.repeats = std::stoi(value());
    } else if (s == "--compute-nice") {
      a.compute_nice = std::stoi(value());
    } else if (s == "--json") {
      a.json_out = true;
    } else if (s == "-h" || s == "--help") {
      std::printf(
          "usage: server_overhead_bench MODEL_DIR [--tokenizer DIR] [--threads N] [--prompt-tokens 128]\n"
          "                             [--tokens 64] [--repeats 5] [--compute-nice N] [--json]\n"
          "Time to first token and decode speed of the engine directly vs streamed through the HTTP\n"
          "server (/v1/completions over loopback); medians over interleaved repeats.\n"
          "--tokenizer: where tokenizer.json is, when MODEL_DIR has none (random-weight models).\n"
          "--compute-nice: the pool workers and the server's engine thread run at this nice value, the\n"
          "  HTTP threads and the client at 0 (an experiment: does the first frame wait for a core?).\n");
      std::exit(0);
    } else if (s[0] != '-' && a.model.empty()) {
      a.model = s;
    } else {
      throw hearth::InputError("unknown argument " + s + " (--help)");
    }
  }
  if (a.model.empty()) throw hearth::InputError("give MODEL_DIR (--help)");
  if (a.tokenizer.empty()) a.tokenizer = a.model;
  if (a.prompt_tokens < 1 || a.tokens < 2 || a.repeats < 1) {
    throw hearth::InputError("--prompt-tokens >= 1, --tokens >= 2, --repeats >= 1");
  }
  return a;
}

int run(const Args& a) {
  const int main_tid = static_cast<int>(syscall(SYS_gettid));
  const std::set<int> before_pool = tids_of(thread_cpu());
  hearth::ThreadPool pool(a.threads);
  std::set<int> pool_tids;
  for (int tid : tids_of(thread_cpu()))
    if (before_pool.count(tid) == 0) pool_tids.insert(tid);
  auto model = hearth::load_model(a.model, hearth::LoadOptions{});
  const hearth::Tokenizer tok = hearth::Tokenizer::load(a.tokenizer);

  std::vector<int32_t> ids;
  const std::string text = prompt_text(tok, a.prompt_tokens, &ids);
  std::vector<int32_t> forced;
  for (const char* piece : {" the", " a", "a", "e"}) {
    forced = tok.encode(piece, /*add_special_tokens=*/false);
    if (forced.size() == 1) break;
  }
  if (forced.size() != 1) throw hearth::InputError("found no one-token word to force the decode onto");

  // Room for the prompt and the generation, no prompt cache: both engines alike.
  hearth::EngineOptions eo;
  eo.kv_tokens = (static_cast<int64_t>(ids.size()) + a.tokens + 64 + 15) / 16 * 16;
  eo.prompt_cache_bytes = 0;
  hearth::Engine direct(*model, hearth::Context{&pool, hearth::kCpu}, eo);
  hearth::Engine served(*model, hearth::Context{&pool, hearth::kCpu}, eo);

  hearth::GenerationRequest req;
  req.prompt = ids;
  req.max_tokens = a.tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  req.sampling.logit_bias = {{forced[0], 100.0f}};

  hearth::server::ServerOptions so;
  so.port = 0;
  so.model_id = "bench";
  const std::set<int> before_server = tids_of(thread_cpu());
  hearth::server::HttpServer server(served, tok, model->info().generation, so);
  std::set<int> compute_tids = pool_tids;  // in HTTP runs: the pool and the server's engine thread
  for (int tid : tids_of(thread_cpu()))
    if (before_server.count(tid) == 0) compute_tids.insert(tid);
  std::set<int> direct_tids = pool_tids;  // in engine runs: the pool and this thread
  direct_tids.insert(main_tid);
  std::set<int> not_server = compute_tids;
  not_server.insert(main_tid);
  const int port = server.bind();
  if (a.compute_nice != 0) {
    for (int tid : compute_tids) setpriority(PRIO_PROCESS, static_cast<id_t>(tid), a.compute_nice);
  }
  std::thread server_thread([&] { server.run(); });

  json body;
  body["prompt"] = text;
  body["max_tokens"] = a.tokens;
  body["temperature"] = 0;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["logit_bias"] = {{std::to_string(forced[0]), 100}};

  auto http = [&](int64_t max_tokens) {
    json b = body;
    b["max_tokens"] = max_tokens;
    std::string out;
    int64_t prompt_tokens = -1, completion_tokens = -1;
    const double ttft_sum = server_ttft_sum(port);
    const ThreadCpu before = thread_cpu();
    Run r = run_http(port, b, &out, &prompt_tokens, &completion_tokens);
    const ThreadCpu after = thread_cpu();
    r.server_ttft_s = server_ttft_sum(port) - ttft_sum;
    r.compute_ns = cpu_between(before, after, compute_tids);
    r.client_ns = cpu_between(before, after, {main_tid});
    r.server_ns = cpu_between(before, after, not_server, /*in_set=*/false);
    if (prompt_tokens != static_cast<int64_t>(ids.size()) || completion_tokens != max_tokens ||
        r.tokens != max_tokens) {
      throw std::runtime_error("HTTP run: prompt " + std::to_string(prompt_tokens) + " tokens (want " +
                               std::to_string(ids.size()) + "), " + std::to_string(completion_tokens) +
                               " generated in " + std::to_string(r.tokens) + " frames (want " +
                               std::to_string(max_tokens) + ")");
    }
    return r;
  };
  auto engine = [&](int64_t max_tokens) {
    hearth::GenerationRequest r = req;
    r.max_tokens = max_tokens;
    const ThreadCpu before = thread_cpu();
    Run run = run_engine(direct, r);
    run.compute_ns = cpu_between(before, thread_cpu(), direct_tids);
    return run;
  };

  // Warm-up: pages the weights in and sizes every buffer on both paths.
  engine(4);
  http(4);

  std::vector<Run> engine_runs, http_runs;
  for (int i = 0; i < a.repeats; ++i) {
    // Alternate the order so that a slow drift of the machine does not favour one side.
    if (i % 2 == 0) {
      engine_runs.push_back(engine(a.tokens));
      http_runs.push_back(http(a.tokens));
    } else {
      http_runs.push_back(http(a.tokens));
      engine_runs.push_back(engine(a.tokens));
    }
    if (!a.json_out) {
      std::fprintf(stderr,
                   "repeat %d: engine TTFT %.2f ms, %.3f tok/s | HTTP TTFT %.2f ms (headers at %.2f ms, %.2f ms "
                   "outside the handler), %.3f tok/s\n",
                   i + 1, engine_runs.back().ttft_s * 1e3, engine_runs.back().decode_tok_s,
                   http_runs.back().ttft_s * 1e3, http_runs.back().headers_s * 1e3,
                   (http_runs.back().ttft_s - http_runs.back().server_ttft_s) * 1e3, http_runs.back().decode_tok_s);
    }
  }
  server.stop(std::chrono::milliseconds(0));
  server_thread.join();

  auto med = [](const std::vector<Run>& runs, auto field) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(field(r));
    return median(v);
  };
  auto ttft = [](const Run& r) { return r.ttft_s; };
  auto server_ttft = [](const Run& r) { return r.server_ttft_s; };
  // Of the HTTP TTFT, the part outside the server's handler (connection, httplib reading and
  // routing the request, writing the headers and the first frame, the client reading it).
  auto outside = [](const Run& r) { return r.ttft_s - r.server_ttft_s; };
  auto rate = [](const Run& r) { return r.decode_tok_s; };
  auto gap = [](const Run& r) { return median(r.gaps_s); };
  const double n = static_cast<double>(a.tokens);
  auto compute_us = [n](const Run& r) { return static_cast<double>(r.compute_ns) / n / 1e3; };
  auto server_us = [n](const Run& r) { return static_cast<double>(r.server_ns) / n / 1e3; };
  auto client_us = [n](const Run& r) { return static_cast<double>(r.client_ns) / n / 1e3; };
  // Added TTFT and decode loss per interleaved pair, then the median of those: the pairs ran
  // next to each other, so machine drift mostly cancels within a pair.
  std::vector<double> added_ttft, loss;
  for (int i = 0; i < a.repeats; ++i) {
    added_ttft.push_back(http_runs[i].ttft_s - engine_runs[i].ttft_s);
    loss.push_back(1 - http_runs[i].decode_tok_s / engine_runs[i].decode_tok_s);
  }
  const double e_ttft = med(engine_runs, ttft), h_ttft = med(http_runs, ttft);
  const double e_rate = med(engine_runs, rate), h_rate = med(http_runs, rate);
  const double e_gap = med(engine_runs, gap), h_gap = med(http_runs, gap);
  // The server's HTTP threads' CPU per generated token (request handling amortized over the
  // tokens): what streaming costs whatever else runs on the machine. As a share of the engine's
  // time per token it bounds the decode loss from above (reached only when that work lands on
  // the engine's critical path, i.e. when the compute threads use every core).
  const double srv_us = med(http_runs, server_us);
  const double bound_pct = srv_us / (e_gap * 1e6) * 100;

  if (a.json_out) {
    json j;
    j["model"] = a.model;
    j["threads"] = pool.size();
    j["prompt_tokens"] = ids.size();
    j["tokens"] = a.tokens;
    j["repeats"] = a.repeats;
    j["engine"] = {{"ttft_ms", e_ttft * 1e3},
                   {"decode_tok_s", e_rate},
                   {"median_gap_ms", e_gap * 1e3},
                   {"compute_cpu_us_per_token", med(engine_runs, compute_us)}};
    j["http"] = {{"ttft_ms", h_ttft * 1e3},
                 {"server_ttft_ms", med(http_runs, server_ttft) * 1e3},
                 {"ttft_outside_handler_ms", med(http_runs, outside) * 1e3},
                 {"decode_tok_s", h_rate},
                 {"median_gap_ms", h_gap * 1e3},
                 {"compute_cpu_us_per_token", med(http_runs, compute_us)},
                 {"server_cpu_us_per_token", srv_us},
                 {"client_cpu_us_per_token", med(http_runs, client_us)}};
    j["added_ttft_ms"] = median(added_ttft) * 1e3;
    j["decode_loss_pct"] = median(loss) * 100;
    j["decode_loss_bound_pct"] = bound_pct;
    json runs = json::array();
    for (int i = 0; i < a.repeats; ++i) {
      runs.push_back({{"engine_ttft_ms", engine_runs[i].ttft_s * 1e3},
                      {"engine_tok_s", engine_runs[i].decode_tok_s},
                      {"http_ttft_ms", http_runs[i].ttft_s * 1e3},
                      {"http_tok_s", http_runs[i].decode_tok_s},
                      {"server_cpu_us_per_token", server_us(http_runs[i])}});
    }
    j["runs"] = runs;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %d threads, prompt %zu tokens, %lld generated, median of %d interleaved repeats\n", a.model.c_str(),
              pool.size(), ids.size(), static_cast<long long>(a.tokens), a.repeats);
  std::printf("%-13s %10s %10s %10s %13s %13s %13s\n", "", "TTFT", "decode", "token gap", "compute CPU", "server CPU",
              "client CPU");
  std::printf("%-13s %10s %10s %10s %13s %13s %13s\n", "", "(ms)", "(tok/s)", "(ms)", "(us/token)", "(us/token)",
              "(us/token)");
  std::printf("%-13s %10.2f %10.3f %10.2f %13.0f %13s %13s\n", "engine", e_ttft * 1e3, e_rate, e_gap * 1e3,
              med(engine_runs, compute_us), "-", "-");
  std::printf("%-13s %10.2f %10.3f %10.2f %13.0f %13.1f %13.1f\n", "HTTP stream", h_ttft * 1e3, h_rate, h_gap * 1e3,
              med(http_runs, compute_us), srv_us, med(http_runs, client_us));
  std::printf(
      "added TTFT %+.2f ms, decode loss %+.2f%% (medians of the pairs); server CPU per token = %.3f%% of "
      "the engine's token time\n",
      median(added_ttft) * 1e3, median(loss) * 100, bound_pct);
  std::printf(
      "HTTP TTFT = the server's own TTFT %.2f ms (handler start -> first token read, from /metrics) + %.2f ms "
      "outside the handler (medians)\n",
      med(http_runs, server_ttft) * 1e3, med(http_runs, outside) * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server_overhead_bench: %s\n", e.what());
    return 1;
  }
}
