#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <thread>

#include "base/error.h"
#include "base/timer.h"
#include "core/device_memory.h"
#include "runtime/prompt.h"
#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/engine_worker.h"
#include "server/generation_reader.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/ui_assets.h"

namespace hearth::server {

namespace {

constexpr const char* kJson = "application/json";

void send_json(httplib::Response& res, int status, const ojson& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, ojson::error_handler_t::replace), kJson);
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The request body as JSON, read here rather than by httplib: httplib caps bodies sent as
// application/x-www-form-urlencoded at 8 KB (413), and `curl -d` sends JSON with that type.
ojson read_json_body(const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader,
                     const ServerOptions& options) {
  std::string body;
  bool too_large = false;
  const bool ok = reader([&](const char* data, size_t n) {
    too_large = body.size() + n > options.max_body_bytes;
    if (!too_large) body.append(data, n);
    return !too_large;
  });
  if (too_large || res.status == 413) throw ApiError(413, "the request body is too large", "", "payload_too_large");
  if (!ok) throw ApiError(400, "could not read the request body", "", "bad_request");
  try {
    return parse_request_json(body, "the request body");
  } catch (const InputError& e) {
    throw ApiError(400, e.what(), "", "invalid_json");
  }
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%llx%06llx", prefix, static_cast<unsigned long long>(unix_now()),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

}  // namespace

struct HttpServer::Impl {
  Impl(Engine& engine, const Tokenizer& tok, const GenerationConfig& gen, ServerOptions opts)
      : options(std::move(opts)), tokenizer(tok), renderer(tok), worker(engine, options.max_queue) {
    model.tokenizer = &tokenizer;
    model.renderer = &renderer;
    model.generation = gen;
    model.eos_ids = stop_token_ids(gen.eos_token_ids, &tokenizer);
    model.defaults = options.defaults;
    model.model_id = options.model_id;
    model.tool_format = detect_tool_format(tok.config().chat_template);
    model.has_reasoning = tok.token_to_id("<think>").has_value() && tok.token_to_id("</think>").has_value();
    model.prompt_mutex = &prompt_mutex;
    // Read now, before the engine thread starts: afterwards only that thread touches the engine.
    kv_capacity = engine.pool().n_blocks() * engine.block_size();
    setup();
  }

  void setup();
  bool authorized(const httplib::Request& req) const;
  void handle(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader, Endpoint ep);
  void generate(const ojson& body, httplib::Response& res, Endpoint endpoint, Clock::time_point received,
                std::shared_ptr<void> ticket);
  // Counts a response in flight until the returned handle and its copies are gone.
  std::shared_ptr<void> response_ticket();
  void count_tokens(const ojson& body, httplib::Response& res);
  Gauges gauges() const;
  // Which API's error format a path's errors take: Anthropic's under /v1/messages, else OpenAI's.
  static Endpoint path_format(const std::string& path) {
    return path.rfind("/v1/messages", 0) == 0 ? Endpoint::kMessages : Endpoint::kChat;
  }
  void send_error(httplib::Response& res, const ApiError& e, Endpoint ep) const {
    send_json(res, e.status(), ep == Endpoint::kMessages ? anthropic_error_body(e.status(), e.what()) : error_body(e));
  }
  // Runs a handler; whatever it throws becomes a JSON error response in the route's format.
  template <typename F>
  void guarded(httplib::Response& res, Endpoint ep, F&& f);

  ServerOptions options;
  const Tokenizer& tokenizer;
  PromptRenderer renderer;
  std::mutex prompt_mutex;
  ModelContext model;
  int64_t kv_capacity = 0;  // tokens the KV cache holds
  Metrics metrics;
  httplib::Server http;
  std::atomic<bool> stop_requested{false}, in_run{false}, draining{false};
  int listen_socket = -1;  // set by the socket-options hook when bind() creates it
  // Responses not yet fully written. A chunked response (streamed or not) ends when httplib
  // destroys its provider, after the last byte went out. stop() waits for them: httplib stops
  // writing a chunked response as soon as its listening socket is closed.
  std::mutex active_mu;
  std::condition_variable active_cv;
  int64_t active = 0;
  EngineWorker worker;  // after everything the engine thread may read
};

template <typename F>
void HttpServer::Impl::guarded(httplib::Response& res, Endpoint ep, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    send_error(res, e, ep);
  } catch (const InputError& e) {
    send_error(res, ApiError(400, e.what()), ep);
  } catch (const std::bad_alloc&) {
    send_error(res, ApiError(500, "out of memory", "", "internal_error", "server_error"), ep);
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "internal_error", "server_error"),
               ep);
  } catch (...) {
    send_error(res, ApiError(500, "internal error", "", "internal_error", "server_error"), ep);
  }
}

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  if (options.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + options.api_key) return true;
  return req.has_header("x-api-key") && req.get_header_value("x-api-key") == options.api_key;
}

Gauges HttpServer::Impl::gauges() const {
  const EngineWorker::EngineState st = worker.state();
  Gauges g;
  g.queue_depth = static_cast<int64_t>(worker.queued());
  g.requests_running = st.running;
  g.kv_blocks_used = st.kv_blocks_used;
  g.kv_blocks_total = st.kv_blocks_total;
  g.prompt_cache_bytes = st.prompt_cache_bytes;
  g.prompt_cache_entries = st.prompt_cache_entries;
  g.resident_memory_bytes = static_cast<int64_t>(current_rss_bytes());
  if (const Device d = worker.device(); d.type != DeviceType::kCpu) {
    const DeviceMemoryInfo m = device_memory(d.type).info(d);
    g.device = d.str();
    g.device_memory_total_bytes = static_cast<int64_t>(m.total_bytes);
    g.device_memory_free_bytes = static_cast<int64_t>(m.free_bytes);
    g.device_memory_held_bytes = static_cast<int64_t>(m.held_bytes);
    g.device_memory_in_use_bytes = static_cast<int64_t>(m.in_use_bytes);
  }
  return g;
}

void HttpServer::Impl::setup() {
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second
  // server bind a port that is already taken instead of refusing to start.
  http.set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket = sock;  // the listening socket (httplib calls this for it alone)
  });
  // A streamed response holds its HTTP thread until it ends, and so does a request waiting in
  // the engine's queue: size the pool for every queued request plus the running one, plus
  // headroom for quick routes (/health, /stats, refusals), instead of httplib's
  // max(8, cores - 1).
  const size_t http_threads = std::max<size_t>(32, options.max_queue + 16);
  http.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(options.read_timeout_s, 0);
  http.set_write_timeout(options.write_timeout_s, 0);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // The UI's static files hold no data; the page sends the key with its API calls.
    const bool ui = find_ui_asset(req.path) != nullptr;
    if (req.path == "/health" || ui || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res,
               ApiError(401, "missing or wrong API key (send Authorization: Bearer KEY or x-api-key: KEY)", "",
                        "invalid_api_key", "authentication_error"),
               path_format(req.path));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own failures (no route, body over the limit, unparseable request) come here
  // with an empty body; responses our handlers wrote already have one. Each is answered in
  // the format of the API its path belongs to, so an Anthropic client gets a not_found_error.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const Endpoint ep = path_format(req.path);
        if (res.status == 404) {
          send_error(res, ApiError(404, "no route " + req.method + " " + req.path, "", "not_found"), ep);
        } else if (res.status == 413) {
          send_error(res, ApiError(413, "the request body is too large", "", "payload_too_large"), ep);
        } else {
          send_error(res, ApiError(res.status, "bad request", "", "bad_request"), ep);
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError(500, "internal error", "", "internal_error", "server_error"), path_format(req.path));
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"status", "ok"}}); });
  // The chat UI (src/server/ui, compiled in). The content security policy allows only the
  // page's own scripts and styles: a second wall behind the renderer, which never parses model
  // output as HTML.
  http.Get(R"(/|/ui/[A-Za-z0-9_.-]+)", [](const httplib::Request& req, httplib::Response& res) {
    const UiAsset* asset = find_ui_asset(req.path);
    if (asset == nullptr) {
      send_json(res, 404, error_body("no route GET " + req.path, "invalid_request_error", "not_found"));
      return;
    }
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
                   "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    res.set_content(std::string(asset->body), std::string(asset->content_type));
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    ojson m;
    m["id"] = options.model_id;
    m["object"] = "model";
    m["created"] = unix_now();
    m["owned_by"] = "hearth";
    m["context_length"] = kv_capacity;
    send_json(res, 200, {{"object", "list"}, {"data", ojson::array({m})}});
  });
  http.Get("/stats", [this](const httplib::Request&, httplib::Response& res) {
    const EngineWorker::EngineState st = worker.state();
    ojson j;
    j["model"] = options.model_id;
    j["context_tokens"] = kv_capacity;
    const ojson stats = metrics.stats(gauges());
    for (auto it = stats.begin(); it != stats.end(); ++it) j[it.key()] = it.value();
    j["cache"]["max_bytes"] = st.prompt_cache_max_bytes;
    j["kv"] = {{"blocks_used", st.kv_blocks_used}, {"blocks_total", st.kv_blocks_total}};
    send_json(res, 200, j);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(metrics.prometheus(gauges()), "text/plain; version=0.0.4; charset=utf-8");
  });
  for (const auto& [path, endpoint] :
       {std::pair{"/v1/chat/completions", Endpoint::kChat}, std::pair{"/v1/completions", Endpoint::kCompletion},
        std::pair{"/v1/messages", Endpoint::kMessages}}) {
    const Endpoint ep = endpoint;
    http.Post(path, [this, ep](const httplib::Request& req, httplib::Response& res,
                               const httplib::ContentReader& reader) { handle(req, res, reader, ep); });
  }
  http.Post("/v1/messages/count_tokens",
            [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
              guarded(res, Endpoint::kMessages, [&] { count_tokens(read_json_body(req, res, reader, options), res); });
            });
}

std::shared_ptr<void> HttpServer::Impl::response_ticket() {
  {
    std::lock_guard<std::mutex> lock(active_mu);
    ++active;
  }
  return std::shared_ptr<void>(nullptr, [this](void*) {
    std::lock_guard<std::mutex> lock(active_mu);
    --active;
    active_cv.notify_all();
  });
}

void HttpServer::Impl::handle(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                              Endpoint ep) {
  const Clock::time_point received = Clock::now();
  std::shared_ptr<void> ticket = response_ticket();  // kept by the response's provider, if any
  guarded(res, ep, [&] {
    if (draining) {
      throw ApiError(503, "the server is shutting down", "", "shutting_down", "server_error");
    }
    generate(read_json_body(req, res, reader, options), res, ep, received, ticket);
  });
  // A stream counts as a 200 once its headers are set; its end is recorded by the stream.
  metrics.count_request(endpoint_label(ep), res.status == -1 ? 200 : res.status);
}

void HttpServer::Impl::count_tokens(const ojson& body, httplib::Response& res) {
  ojson b = body;
  if (b.is_object() && !b.contains("max_tokens")) b["max_tokens"] = 1;
  const ParsedRequest pr = parse_messages_request(b, model);
  send_json(res, 200, {{"input_tokens", static_cast<int64_t>(pr.generation.prompt.size())}});
}

void HttpServer::Impl::generate(const ojson& body, httplib::Response& res, Endpoint endpoint,
                                Clock::time_point received, std::shared_ptr<void> ticket) {
  ParsedRequest pr = endpoint == Endpoint::kChat         ? parse_chat_request(body, model)
                     : endpoint == Endpoint::kCompletion ? parse_completion_request(body, model)
                                                         : parse_messages_request(body, model);
  const auto prompt_tokens = static_cast<int64_t>(pr.generation.prompt.size());
  // Refused up front rather than failing mid-generation once the KV cache is full. Requests
  // run one at a time, so the whole cache is this request's.
  if (pr.generation.max_tokens > kv_capacity - prompt_tokens) {  // not a sum: max_tokens may be near INT64_MAX
    throw ApiError(400,
                   "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus max_tokens (" +
                       std::to_string(pr.generation.max_tokens) + ") exceeds the context of " +
                       std::to_string(kv_capacity) + " tokens (--ctx)",
                   endpoint == Endpoint::kCompletion ? "prompt" : "messages", "context_over_budget");
  }
  std::shared_ptr<RequestChannel> channel = worker.submit(pr.generation);
  if (!channel) {
    throw ApiError(503, "the server is busy (" + std::to_string(options.max_queue) + " requests queued); retry later",
                   "", "queue_full", "server_error");
  }
  // The first item decides the status: a prompt the engine refuses (e.g. longer than the
  // KV cache) is still a plain 400, even for a streaming request.
  ChannelItem first = channel->pop();
  if (first.kind == ChannelItem::Kind::kError) {
    channel->cancel();
    if (first.bad_input) throw ApiError(400, first.error);
    throw ApiError(500, first.error, "", "internal_error", "server_error");
  }
  metrics.observe_time_to_first_token(seconds_since(received));
  metrics.count_prompt_cache_lookup(first.stats.cached_tokens);
  metrics.add_prompt_tokens(prompt_tokens);
  auto reader = std::make_shared<GenerationReader>(tokenizer, pr.reader, channel, std::move(first), &metrics);
  const char* prefix = endpoint == Endpoint::kChat ? "chatcmpl-" : endpoint == Endpoint::kCompletion ? "cmpl-" : "msg_";
  ResponseMeta meta{endpoint,      new_id(prefix),   unix_now(), options.model_id,
                    prompt_tokens, pr.include_usage, pr.logprobs};
  Metrics* m = &metrics;
  // Called once the response has ended, finished or not (client gone): stop the engine's
  // work and record the request.
  auto finished = [reader, m, received, ticket](bool) {
    if (!reader->done()) m->count_cancelled();
    reader->cancel();
    m->add_generated_tokens(reader->completion_tokens());
    m->observe_request_duration(seconds_since(received));
  };

  if (!pr.stream) {
    // The status and headers go out now; the JSON follows when the generation ends, after
    // leading spaces (valid JSON whitespace) written while it runs: a write to a client that
    // has gone away fails, and that cancels the generation.
    auto out = std::make_shared<GenerationOutput>();
    auto last_write = std::make_shared<Clock::time_point>(Clock::now());
    res.set_chunked_content_provider(
        "application/json",
        [this, reader, out, meta, last_write](size_t, httplib::DataSink& sink) {
          try {
            ReaderStep step;
            const bool more = reader->next(&step);
            accumulate(step, out.get());
            if (!reader->done()) {
              if (more && Clock::now() - *last_write > std::chrono::milliseconds(100)) {
                *last_write = Clock::now();
                return sink.write(" ", 1);
              }
              return true;
            }
            const ojson body = !reader->error().empty()
                                   ? (meta.endpoint == Endpoint::kMessages
                                          ? anthropic_error_body(500, reader->error())
                                          : error_body(reader->error(), "server_error", "internal_error"))
                               : meta.endpoint == Endpoint::kMessages ? anthropic_response(meta, *out, *reader)
                                                                      : openai_response(meta, *out, *reader, tokenizer);
            const std::string text = body.dump(-1, ' ', false, ojson::error_handler_t::replace);
            if (!sink.write(text.data(), text.size())) return false;
            sink.done();
            return true;
          } catch (...) {
            return false;
          }
        },
        finished);
    return;
  }

  std::shared_ptr<StreamWriter> writer =
      endpoint == Endpoint::kMessages ? anthropic_stream_writer(meta) : openai_stream_writer(meta, tokenizer);
  auto started = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [reader, writer, started](size_t, httplib::DataSink& sink) {
        // One token per call; returning false closes the connection (the client is gone).
        try {
          auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
          if (!*started) {
            *started = true;
            if (!write(writer->begin())) return false;
          }
          ReaderStep step;
          reader->next(&step);
          if (!write(writer->step(step))) return false;
          if (!reader->done()) return true;
          if (!write(reader->error().empty() ? writer->end(*reader) : writer->error(reader->error()))) return false;
          sink.done();
          return true;
        } catch (...) {
          return false;
        }
      },
      finished);
}

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, const GenerationConfig& generation,
                       ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, generation, std::move(options))) {}

HttpServer::~HttpServer() { stop(std::chrono::milliseconds(0)); }

int HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  int port = o.port;
  if (o.port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    if (port <= 0) throw InputError("cannot listen on " + o.host + ": no free port");
  } else if (!impl_->http.bind_to_port(o.host, o.port)) {
    throw InputError("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                     " (the port is taken or the address is not local)");
  }
  // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the shared
  // library). When more clients connect at once than the accept thread takes in, the kernel
  // drops their handshakes and some connections are reset (64 concurrent clients on 2 cores:
  // tests/server/load_test.cpp). listen() again on the bound socket raises the backlog.
  if (impl_->listen_socket >= 0) ::listen(impl_->listen_socket, SOMAXCONN);
  return port;
}

void HttpServer::run() {
  impl_->in_run = true;
  if (!impl_->stop_requested) impl_->http.listen_after_bind();
  impl_->in_run = false;
}

void HttpServer::stop(std::chrono::milliseconds grace) {
  Impl& i = *impl_;
  const bool first = !i.stop_requested.exchange(true);
  i.draining = true;  // requests that still arrive (kept-alive connections) get 503
  // A stop() that lands between run()'s check and httplib's listen loop starting would be
  // lost (httplib's stop() ignores a server that is not running yet): wait for it to start.
  while (i.in_run && !i.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (first && grace.count() > 0) {
    // Let the responses in flight end (generation and last bytes) before closing the listening
    // socket: httplib cuts every chunked response short once that socket is closed.
    std::unique_lock<std::mutex> lock(i.active_mu);
    if (!i.active_cv.wait_for(lock, grace, [&] { return i.active == 0; })) {
      std::fprintf(stderr, "hearth: requests still running after %lld ms; cancelling them\n",
                   static_cast<long long>(grace.count()));
    }
  }
  i.http.stop();        // closes the listening socket; run() returns once the handlers are done
  i.worker.shutdown();  // whatever still runs ends at its next token
}

}  // namespace hearth::server
