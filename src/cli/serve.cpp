// hearth serve: the OpenAI-compatible HTTP server (src/server) over one loaded model.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "cli/common.h"
#include "cli/model_choice.h"
#include "cli/verbs.h"
#include "runtime/engine.h"
#include "runtime/model_tokenizer.h"
#include "server/http_server.h"

namespace hearth::cli {

namespace {

// The model id responses carry: the model argument as given, without a trailing slash
// (mlx_lm.server also names the model by the path it was started with).
std::string served_id(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string exe_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// Opens URL with xdg-open, in the background; says so when there is no xdg-open or it fails.
void open_browser(const std::string& url) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);  // we say it ourselves
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;  // the stop signals are blocked in this thread; the child gets them back
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::string prog = "xdg-open";
  char* argv[] = {prog.data(), const_cast<char*>(url.c_str()), nullptr};
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, "xdg-open", &actions, &attr, argv, ::environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    std::fprintf(stderr, "hearth: --open: cannot start xdg-open (%s); open %s in a browser\n", std::strerror(err),
                 url.c_str());
    return;
  }
  std::thread([pid, url] {
    int status = 0;
    if (waitpid(pid, &status, 0) == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      std::fprintf(stderr, "hearth: --open: xdg-open found no browser; open %s yourself\n", url.c_str());
  }).detach();
}

}  // namespace

int run_serve(const std::vector<std::string>& args) {
  ModelFlags mf;
  server::ServerOptions so;
  std::string host = so.host;
  int64_t port = so.port, max_queue = static_cast<int64_t>(so.max_queue), ctx_tokens = 0;
  std::optional<int64_t> max_tokens, top_k;
  std::optional<double> temp, top_p;
  double prompt_cache_gb = 4, shutdown_timeout_s = 10;
  std::string thinking;
  bool open = false;
  Flags f("serve", "[MODEL] [flags]",
          "Serves the model over OpenAI- and Anthropic-compatible HTTP APIs: /v1/chat/completions,\n"
          "/v1/completions, /v1/messages, /v1/models, /health, /stats, /metrics (docs/server-api.md),\n"
          "and a chat UI at /. Bare `hearth` (no verb) is `hearth serve`.");
  mf.declare(f, /*model_required=*/false,
             "Model: a directory (config.json + safetensors weights) or a GGUF file. Without one, the\n"
             "largest model in the Hugging Face cache ($HF_HOME/hub, else ~/.cache/huggingface/hub) whose\n"
             "weights + 10% + 1 GiB fit in available memory (/proc/meminfo MemAvailable), else the\n"
             "bundled demo model (models/hearth-demo; HEARTH_DEMO_MODEL overrides).");
  f.add("open", "Open the chat UI in a browser (xdg-open) once the server is ready.", &open);
  f.add("host", "Address to listen on (default 127.0.0.1).", &host);
  f.add("port", "Port to listen on (default 8080); the server refuses to start if it is taken.", &port);
  f.add("api-key",
        "Require this key (Authorization: Bearer KEY or x-api-key) on every route but /health and the chat UI's pages.",
        &so.api_key);
  f.add("max-queue", "Requests that may wait for the engine before new ones get 503 (default 16).", &max_queue);
  f.add("max-tokens", "Default max_tokens for requests that set none (default 512).", &max_tokens);
  f.add("temp", "Default temperature (default: generation_config.json, else 0 = greedy).", &temp);
  f.add("top-p", "Default top_p in (0, 1] (default: generation_config.json, else 1).", &top_p);
  f.add("top-k", "Default top_k; 0 = off (default: generation_config.json, else 0).", &top_k);
  f.add("ctx", "KV cache capacity in tokens (default: the model's context, at most 4096).", &ctx_tokens);
  f.add("prompt-cache",
        "Prompt cache size in GB of KV (default 4, at most the whole KV cache); 0 disables it. Requests that\n"
        "repeat a prefix (multi-turn chat, agents) reuse its KV instead of computing it again.",
        &prompt_cache_gb);
  f.add("thinking", "true|false: enable_thinking for chat templates that read it (default: the template's).",
        &thinking);
  f.add("shutdown-timeout", "Seconds requests in flight get to finish on SIGINT/SIGTERM (default 10).",
        &shutdown_timeout_s);
  if (!f.parse(args)) return 0;

  if (port < 0 || port > 65535) throw InputError("--port must be in 0..65535");
  if (max_queue < 1) throw InputError("--max-queue must be >= 1");
  if (max_tokens && *max_tokens < 1) throw InputError("--max-tokens must be >= 1");
  check_sampling_flags(temp, top_p, top_k);
  if (ctx_tokens < 0) throw InputError("--ctx must be >= 0");
  if (!(prompt_cache_gb >= 0 && prompt_cache_gb < 1e6)) {
    throw InputError("--prompt-cache: expected GB in [0, 1000000), got " + std::to_string(prompt_cache_gb));
  }
  if (!(shutdown_timeout_s >= 0 && shutdown_timeout_s <= 3600))
    throw InputError("--shutdown-timeout must be in 0..3600");
  std::optional<bool> thinking_default;
  if (thinking == "true") {
    thinking_default = true;
  } else if (thinking == "false") {
    thinking_default = false;
  } else if (!thinking.empty()) {
    throw InputError("--thinking must be true or false, got '" + thinking + "'");
  }
  so.host = host;
  so.port = static_cast<int>(port);
  so.max_queue = static_cast<size_t>(max_queue);
  so.defaults = {temp, top_p, top_k, max_tokens, thinking_default};
  if (mf.model.empty()) {
    const ModelChoice choice =
        choose_model({hf_hub_dir(), registered_model_types(), available_memory_bytes(), demo_model_dirs(exe_dir())});
    std::printf("hearth: model %s: %s\n", choice.dir.c_str(), choice.reason.c_str());
    std::fflush(stdout);
    mf.model = choice.dir;
    so.model_id = choice.name;
  } else {
    so.model_id = served_id(mf.model);
  }

  // SIGINT/SIGTERM are taken by one thread (sigwait) so that no other thread is interrupted
  // mid-request; they must be blocked before any thread starts. A write to a closed socket
  // is an error return, not a SIGPIPE.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto pool = mf.make_pool();
  auto model = load_model(mf.model, mf.load_options());
  const Tokenizer tokenizer = load_tokenizer(mf.model);
  EngineOptions eo = mf.engine_options();
  eo.kv_tokens = ctx_tokens;
  eo.prompt_cache_bytes = static_cast<int64_t>(prompt_cache_gb * 1e9);
  Engine engine(*model, Context{pool.get(), mf.device()}, eo);
  server::HttpServer server(engine, tokenizer, model->info().generation, so);
  const int bound = server.bind();  // throws (exit 1, one line) when the port is taken

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.stop(std::chrono::milliseconds(static_cast<int64_t>(shutdown_timeout_s * 1000)));
  });
  std::printf("hearth: serving %s at http://%s:%d (Ctrl-C to stop)\n", so.model_id.c_str(), host.c_str(), bound);
  // A server listening on every address is reached from this machine through loopback.
  const bool any = host == "0.0.0.0" || host == "::" || host == "[::]";
  const std::string ui_url = "http://" + (any ? std::string("127.0.0.1") : host) + ":" + std::to_string(bound) + "/";
  std::printf("hearth: chat UI: %s\n", ui_url.c_str());
  std::fflush(stdout);
  if (open) open_browser(ui_url);
  server.run();
  // run() also returns when listening fails; wake the signal thread so it can be joined.
  kill(getpid(), SIGTERM);
  signal_thread.join();
  std::fprintf(stderr, "hearth: stopped\n");
  return 0;
}

}  // namespace hearth::cli
