// The engine thread. It alone owns the Engine (the model and the KV cache); HTTP threads
// submit GenerationRequests to a bounded queue and read TokenEvents back from a per-request
// channel. Requests run one at a time for now; a cancelled request stops at its next token
// and its KV blocks go back to the pool when its GenerationStream is destroyed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/generation.h"

namespace hearth::server {

// One item on a request's channel: a token, the end of the generation, or an error.
struct ChannelItem {
  enum class Kind { kToken, kDone, kError };
  Kind kind = Kind::kToken;
  TokenEvent token;                           // kToken
  GenerationStats stats;                      // so far (kToken), final (kDone)
  FinishReason finish = FinishReason::kNone;  // kDone
  std::string error;                          // kError: the message
  bool bad_input = false;                     // kError: an InputError (HTTP 400), else an internal error (500)
};

// A single-producer (engine thread), single-consumer (HTTP thread) queue.
class RequestChannel {
 public:
  void push(ChannelItem item);
  ChannelItem pop();  // blocks until an item arrives
  // Set by the HTTP side (client gone, stop string found); the engine stops at the next token.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChannelItem> items_;
  std::atomic<bool> cancelled_{false};
};

class EngineWorker {
 public:
  // max_queue: requests waiting (not counting the one running) before submit() refuses.
  EngineWorker(Engine& engine, size_t max_queue);
  ~EngineWorker();  // shutdown(), then joins the engine thread
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // The request's channel, or nullptr when the queue is full (the caller answers 503).
  std::shared_ptr<RequestChannel> submit(GenerationRequest request);
  size_t queued() const;
  // Waits until no request is queued or running, or the timeout passes; true when idle.
  bool wait_idle(std::chrono::milliseconds timeout);

  // Engine state for /stats and /metrics, published by the engine thread after each request
  // (other threads must not touch the engine).
  struct EngineState {
    int64_t running = 0;  // requests being generated (0 or 1 for now)
    int64_t kv_blocks_used = 0, kv_blocks_total = 0;
    int64_t prompt_cache_entries = 0, prompt_cache_bytes = 0, prompt_cache_max_bytes = 0;
  };
  EngineState state() const;
  // The device the engine runs on (fixed at construction).
  Device device() const { return engine_.context().device; }
  // Refuses new requests, answers queued ones with an error and stops the running one at its
  // next token (it ends with FinishReason::kNone). Does not wait.
  void shutdown();

 private:
  struct Job {
    GenerationRequest request;
    std::shared_ptr<RequestChannel> channel;
  };
  void loop();
  void run(Job& job);
  void publish_state(bool running);

  Engine& engine_;
  const size_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  EngineState state_;                // guarded by mu_
  std::condition_variable idle_cv_;  // signalled when a request ends
  std::thread thread_;               // last: starts after everything above is initialized
};

}  // namespace hearth::server
