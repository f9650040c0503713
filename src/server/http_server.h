// The HTTP front: routes, API key, body limits, JSON errors, SSE streaming. Every request
// runs on an HTTP thread; generation goes through the EngineWorker. One bad request never
// takes the server down: each handler catches everything and answers with a JSON error.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/engine.h"
#include "server/request.h"

namespace hearth::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;        // 0 = any free port (tests)
  std::string api_key;    // "" = no key needed
  size_t max_queue = 16;  // requests waiting for the engine before 503
  size_t max_body_bytes = 8 << 20;
  int read_timeout_s = 30;   // a client that stalls while sending its request
  int write_timeout_s = 60;  // a client that stops reading a response
  std::string model_id;      // the id /v1/models lists and responses carry
  SamplingDefaults defaults;
};

class HttpServer {
 public:
  // The engine is used only from the server's engine thread from here on.
  HttpServer(Engine& engine, const Tokenizer& tokenizer, const GenerationConfig& generation, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and returns the port. Throws InputError when the address cannot be bound
  // (e.g. the port is taken).
  int bind();
  // Serves until stop(); call after bind().
  void run();
  // From any thread: stops accepting connections, lets the requests in flight finish for up
  // to `grace`, cancels what still runs at its next token; run() returns once every handler
  // is done.
  void stop(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth::server
