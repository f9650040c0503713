// An in-process server over the tiny model (qwen3 parity weights + tiny tokenizer) on a free
// port, and helpers to talk to it and to the hearth binary.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/thread_pool.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server::testing {

using json = nlohmann::ordered_json;

using hearth::testing::make_tiny_model_dir;
using hearth::testing::run_hearth;

class InProcessServer {
 public:
  // chat_template: when set, written as chat_template.jinja (which wins over the tokenizer's).
  explicit InProcessServer(ServerOptions options = {}, const std::string& chat_template = "",
                           EngineOptions engine_options = {})
      : dir_(make_tiny_model_dir()) {
    if (!chat_template.empty()) std::ofstream(dir_->file("chat_template.jinja")) << chat_template;
    pool_ = std::make_unique<ThreadPool>(1);
    model_ = load_model(dir_->path(), LoadOptions{});
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(dir_->path()));
    engine_ = std::make_unique<Engine>(*model_, Context{pool_.get(), kCpu}, engine_options);
    options.port = 0;
    if (options.model_id.empty()) options.model_id = "tiny";
    server_ = std::make_unique<HttpServer>(*engine_, *tokenizer_, model_->info().generation, options);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~InProcessServer() {
    server_->stop(std::chrono::milliseconds(0));
    thread_.join();
  }
  int port() const { return port_; }
  HttpServer& server() { return *server_; }
  std::string model_dir() const { return dir_->path(); }
  Engine& engine() { return *engine_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }

 private:
  std::unique_ptr<hearth::testing::TempDir> dir_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

// The `data:` payloads of an SSE body, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end == std::string::npos ? body.size() : end + 2;
  }
  return out;
}

}  // namespace hearth::server::testing
