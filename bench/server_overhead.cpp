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
// Usage: server_overhead_bench MODEL_DIR [--tokenizer DIR] [--threads N] [--prompt-tokens 128]
//        [--tokens 64] [--repeats 5] [--json]
#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
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
};

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
    } else if (s == "--json") {
      a.json_out = true;
    } else if (s == "-h" || s == "--help") {
      std::printf(
          "usage: server_overhead_bench MODEL_DIR [--tokenizer DIR] [--threads N] [--prompt-tokens 128]\n"
          "                             [--tokens 64] [--repeats 5] [--json]\n"
          "Time to first token and decode speed of the engine directly vs streamed through the HTTP\n"
          "server (/v1/completions over loopback); medians over interleaved repeats.\n"
          "--tokenizer: where tokenizer.json is, when MODEL_DIR has none (random-weight models).\n");
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
  hearth::ThreadPool pool(a.threads);
  auto model = hearth::load_model(a.model, hearth::LoadOptions{});
  const hearth::Tokenizer tok = hearth::Tokenizer::load(a.tokenizer);

  std::vector<int32_t> ids;
  const std::string text = prompt_text(tok, a.prompt_tokens, &ids);
  const std::vector<int32_t> forced = tok.encode(" the", /*add_special_tokens=*/false);
  if (forced.size() != 1) throw hearth::InputError("\" the\" is not one token in this tokenizer");

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
  hearth::server::HttpServer server(served, tok, model->info().generation, so);
  const int port = server.bind();
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
    Run r = run_http(port, b, &out, &prompt_tokens, &completion_tokens);
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
    return run_engine(direct, r);
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
                   "repeat %d: engine TTFT %.2f ms, %.3f tok/s | HTTP TTFT %.2f ms (headers at %.2f ms), %.3f tok/s\n",
                   i + 1, engine_runs.back().ttft_s * 1e3, engine_runs.back().decode_tok_s,
                   http_runs.back().ttft_s * 1e3, http_runs.back().headers_s * 1e3, http_runs.back().decode_tok_s);
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
  auto rate = [](const Run& r) { return r.decode_tok_s; };
  auto gap = [](const Run& r) { return median(r.gaps_s); };
  // Added TTFT and decode loss per interleaved pair, then the median of those: the pairs ran
  // next to each other, so machine drift cancels within a pair.
  std::vector<double> added_ttft, loss;
  for (int i = 0; i < a.repeats; ++i) {
    added_ttft.push_back(http_runs[i].ttft_s - engine_runs[i].ttft_s);
    loss.push_back(1 - http_runs[i].decode_tok_s / engine_runs[i].decode_tok_s);
  }
  const double e_ttft = med(engine_runs, ttft), h_ttft = med(http_runs, ttft);
  const double e_rate = med(engine_runs, rate), h_rate = med(http_runs, rate);
  const double e_gap = med(engine_runs, gap), h_gap = med(http_runs, gap);

  if (a.json_out) {
    json j;
    j["model"] = a.model;
    j["threads"] = pool.size();
    j["prompt_tokens"] = ids.size();
    j["tokens"] = a.tokens;
    j["repeats"] = a.repeats;
    j["engine"] = {{"ttft_ms", e_ttft * 1e3}, {"decode_tok_s", e_rate}, {"median_gap_ms", e_gap * 1e3}};
    j["http"] = {{"ttft_ms", h_ttft * 1e3}, {"decode_tok_s", h_rate}, {"median_gap_ms", h_gap * 1e3}};
    j["added_ttft_ms"] = median(added_ttft) * 1e3;
    j["decode_loss_pct"] = median(loss) * 100;
    json runs = json::array();
    for (int i = 0; i < a.repeats; ++i) {
      runs.push_back({{"engine_ttft_ms", engine_runs[i].ttft_s * 1e3},
                      {"engine_tok_s", engine_runs[i].decode_tok_s},
                      {"http_ttft_ms", http_runs[i].ttft_s * 1e3},
                      {"http_tok_s", http_runs[i].decode_tok_s}});
    }
    j["runs"] = runs;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %d threads, prompt %zu tokens, %lld generated, median of %d interleaved repeats\n", a.model.c_str(),
              pool.size(), ids.size(), static_cast<long long>(a.tokens), a.repeats);
  std::printf("%-16s %12s %14s %16s\n", "", "TTFT (ms)", "decode (tok/s)", "token gap (ms)");
  std::printf("%-16s %12.2f %14.3f %16.2f\n", "engine", e_ttft * 1e3, e_rate, e_gap * 1e3);
  std::printf("%-16s %12.2f %14.3f %16.2f\n", "HTTP stream", h_ttft * 1e3, h_rate, h_gap * 1e3);
  std::printf("%-16s %+12.2f %13.2f%% %+16.2f\n", "added / loss", median(added_ttft) * 1e3, median(loss) * 100,
              (h_gap - e_gap) * 1e3);
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
