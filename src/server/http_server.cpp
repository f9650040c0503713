#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "server/api_error.h"
#include "server/engine_worker.h"
#include "server/stop_matcher.h"

namespace hearth::server {

namespace {

constexpr const char* kJson = "application/json";

void send_json(httplib::Response& res, int status, const ojson& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, ojson::error_handler_t::replace), kJson);
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), error_body(e)); }

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

std::string sse(const ojson& j) { return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n"; }

// The HTTP side of one generation: tokens from the engine -> streaming detokenizer -> stop
// strings. Destroying it cancels the engine's work for this request (client gone, stop found).
class TextReader {
 public:
  TextReader(const Tokenizer& tok, std::vector<std::string> stops, std::shared_ptr<RequestChannel> channel,
             ChannelItem first)
      : decoder_(tok, /*skip_special_tokens=*/true),
        stop_(std::move(stops)),
        channel_(std::move(channel)),
        pending_(std::move(first)) {}
  ~TextReader() { channel_->cancel(); }
  TextReader(const TextReader&) = delete;
  TextReader& operator=(const TextReader&) = delete;

  // The next piece of text (possibly empty); false once the generation has ended (then
  // finish() and error() are final).
  bool next(std::string* text) {
    text->clear();
    if (done_) return false;
    ChannelItem item;
    if (pending_) {
      item = std::move(*pending_);
      pending_.reset();
    } else {
      item = channel_->pop();
    }
    switch (item.kind) {
      case ChannelItem::Kind::kToken:
        ++completion_tokens_;
        *text = stop_.push(decoder_.push(item.token.token));
        if (stop_.stopped()) end(FinishReason::kStop);
        return true;
      case ChannelItem::Kind::kDone:
        *text = stop_.push(decoder_.flush());
        if (stop_.stopped()) {
          end(FinishReason::kStop);
        } else {
          *text += stop_.flush();
          end(item.finish == FinishReason::kStop ? FinishReason::kStop : FinishReason::kLength);
        }
        return true;
      case ChannelItem::Kind::kError:
        error_ = item.error;
        done_ = true;
        return false;
    }
    return false;
  }
  void cancel() { channel_->cancel(); }
  bool done() const { return done_; }
  FinishReason finish() const { return finish_; }
  const std::string& error() const { return error_; }
  int64_t completion_tokens() const { return completion_tokens_; }

 private:
  void end(FinishReason r) {
    finish_ = r;
    done_ = true;
    channel_->cancel();  // a stop string ends the generation: the engine need not go on
  }
  StreamingDecoder decoder_;
  StopMatcher stop_;
  std::shared_ptr<RequestChannel> channel_;
  std::optional<ChannelItem> pending_;
  bool done_ = false;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  int64_t completion_tokens_ = 0;
};

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
    model.prompt_mutex = &prompt_mutex;
    // Read now, before the engine thread starts: afterwards only that thread touches the engine.
    kv_capacity = engine.pool().n_blocks() * engine.block_size();
    setup();
  }

  void setup();
  bool authorized(const httplib::Request& req) const;
  void generate(const std::string& body, httplib::Response& res, Endpoint endpoint);
  // Runs a handler; whatever it throws becomes a JSON error response.
  template <typename F>
  void guarded(httplib::Response& res, F&& f);

  ServerOptions options;
  const Tokenizer& tokenizer;
  PromptRenderer renderer;
  std::mutex prompt_mutex;
  ModelContext model;
  int64_t kv_capacity = 0;  // tokens the KV cache holds
  httplib::Server http;
  std::atomic<bool> stop_requested{false}, in_run{false};
  EngineWorker worker;  // after everything the engine thread may read
};

template <typename F>
void HttpServer::Impl::guarded(httplib::Response& res, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const InputError& e) {
    send_error(res, ApiError(400, e.what()));
  } catch (const std::bad_alloc&) {
    send_error(res, ApiError(500, "out of memory", "", "internal_error", "server_error"));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, std::string("internal error: ") + e.what(), "", "internal_error", "server_error"));
  } catch (...) {
    send_error(res, ApiError(500, "internal error", "", "internal_error", "server_error"));
  }
}

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  if (options.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + options.api_key) return true;
  return req.has_header("x-api-key") && req.get_header_value("x-api-key") == options.api_key;
}

void HttpServer::Impl::setup() {
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second
  // server bind a port that is already taken instead of refusing to start.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(options.read_timeout_s, 0);
  http.set_write_timeout(options.write_timeout_s, 0);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/health" || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "missing or wrong API key (send Authorization: Bearer KEY)", "", "invalid_api_key",
                             "authentication_error"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own failures (no route, body over the limit, unparseable request) come here
  // with an empty body; responses our handlers wrote already have one.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (res.status == 404) {
      send_json(res, 404, error_body("no route " + req.method + " " + req.path, "invalid_request_error", "not_found"));
    } else if (res.status == 413) {
      send_json(res, 413, error_body("the request body is too large", "invalid_request_error", "payload_too_large"));
    } else {
      send_json(res, res.status, error_body("bad request", "invalid_request_error", "bad_request"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError(500, "internal error", "", "internal_error", "server_error"));
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"status", "ok"}}); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    ojson m;
    m["id"] = options.model_id;
    m["object"] = "model";
    m["created"] = unix_now();
    m["owned_by"] = "hearth";
    send_json(res, 200, {{"object", "list"}, {"data", ojson::array({m})}});
  });
  // The body is read by the handler rather than by httplib: httplib caps bodies sent as
  // application/x-www-form-urlencoded at 8 KB (413), and `curl -d` sends JSON with that type.
  for (const auto& [path, endpoint] :
       {std::pair{"/v1/chat/completions", Endpoint::kChat}, std::pair{"/v1/completions", Endpoint::kCompletion}}) {
    const Endpoint ep = endpoint;
    http.Post(path, [this, ep](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader) {
      guarded(res, [&] {
        std::string body;
        bool too_large = false;
        const bool ok = reader([&](const char* data, size_t n) {
          too_large = body.size() + n > options.max_body_bytes;
          if (!too_large) body.append(data, n);
          return !too_large;
        });
        if (too_large || res.status == 413) {
          throw ApiError(413, "the request body is too large", "", "payload_too_large");
        }
        if (!ok) throw ApiError(400, "could not read the request body", "", "bad_request");
        generate(body, res, ep);
      });
    });
  }
}

void HttpServer::Impl::generate(const std::string& text, httplib::Response& res, Endpoint endpoint) {
  ojson body;
  try {
    body = ojson::parse(text);
  } catch (const ojson::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  ParsedRequest pr =
      endpoint == Endpoint::kChat ? parse_chat_request(body, model) : parse_completion_request(body, model);
  const auto prompt_tokens = static_cast<int64_t>(pr.generation.prompt.size());
  // Refused up front rather than failing mid-generation once the KV cache is full. Requests
  // run one at a time, so the whole cache is this request's.
  if (prompt_tokens + pr.generation.max_tokens > kv_capacity) {
    throw ApiError(400,
                   "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus max_tokens (" +
                       std::to_string(pr.generation.max_tokens) + ") exceeds the context of " +
                       std::to_string(kv_capacity) + " tokens (--ctx)",
                   endpoint == Endpoint::kChat ? "messages" : "prompt", "context_over_budget");
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
  auto reader = std::make_shared<TextReader>(tokenizer, pr.stop, channel, std::move(first));
  ResponseMeta meta{endpoint, new_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-"), unix_now(),
                    options.model_id};

  if (!pr.stream) {
    std::string text, piece;
    while (reader->next(&piece)) text += piece;
    if (!reader->error().empty()) throw ApiError(500, reader->error(), "", "internal_error", "server_error");
    send_json(res, 200, response_body(meta, text, reader->finish(), prompt_tokens, reader->completion_tokens()));
    return;
  }

  const bool include_usage = pr.include_usage;
  auto sent_first = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [reader, meta, include_usage, prompt_tokens, sent_first](size_t, httplib::DataSink& sink) {
        // One token per call; returning false closes the connection (the client is gone).
        try {
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!*sent_first) {
            *sent_first = true;
            if (meta.endpoint == Endpoint::kChat && !write(sse(chunk_body(meta, "", true, std::nullopt)))) return false;
          }
          std::string piece;
          if (reader->next(&piece) && !piece.empty()) {
            if (!write(sse(chunk_body(meta, piece, false, std::nullopt)))) return false;
          }
          if (!reader->done()) return true;
          if (!reader->error().empty()) {
            // Headers are out: an error mid-stream is an error frame.
            if (!write(sse(error_body(reader->error(), "server_error", "internal_error")))) return false;
          } else {
            if (!write(sse(chunk_body(meta, "", false, reader->finish())))) return false;
            if (include_usage && !write(sse(usage_chunk(meta, prompt_tokens, reader->completion_tokens())))) {
              return false;
            }
          }
          if (!write("data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        } catch (...) {
          return false;
        }
      },
      // Called when the response ends, finished or not: stop the engine's work either way.
      [reader](bool) { reader->cancel(); });
}

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, const GenerationConfig& generation,
                       ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, generation, std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    if (port <= 0) throw InputError("cannot listen on " + o.host + ": no free port");
    return port;
  }
  if (!impl_->http.bind_to_port(o.host, o.port)) {
    throw InputError("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                     " (the port is taken or the address is not local)");
  }
  return o.port;
}

void HttpServer::run() {
  impl_->in_run = true;
  if (!impl_->stop_requested) impl_->http.listen_after_bind();
  impl_->in_run = false;
}

void HttpServer::stop() {
  // A stop() that lands between run()'s check and httplib's listen loop starting would be
  // lost (httplib's stop() ignores a server that is not running yet): wait for it to start.
  impl_->stop_requested = true;
  impl_->worker.shutdown();  // streams in flight end at their next token, so the HTTP pool can drain
  while (impl_->in_run && !impl_->http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->http.stop();
}

}  // namespace hearth::server
