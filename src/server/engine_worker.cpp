#include "server/engine_worker.h"

#include <exception>

namespace hearth::server {

void RequestChannel::push(ChannelItem item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(std::move(item));
  }
  cv_.notify_one();
}

ChannelItem RequestChannel::pop() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !items_.empty(); });
  ChannelItem item = std::move(items_.front());
  items_.pop_front();
  return item;
}

EngineWorker::EngineWorker(Engine& engine, size_t max_queue)
    : engine_(engine), max_queue_(max_queue), thread_([this] { loop(); }) {
  publish_state(false);
}

void EngineWorker::publish_state(bool running) {
  EngineState st;
  st.running = running ? 1 : 0;
  st.kv_blocks_total = engine_.pool().n_blocks();
  st.kv_blocks_used = st.kv_blocks_total - engine_.pool().n_free();
  st.prompt_cache_entries = engine_.prefix_cache().n_entries();
  st.prompt_cache_bytes = st.prompt_cache_entries * engine_.block_bytes();
  st.prompt_cache_max_bytes = engine_.prefix_cache().max_blocks() * engine_.block_bytes();
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = st;
  }
  idle_cv_.notify_all();
}

EngineWorker::EngineState EngineWorker::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

bool EngineWorker::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return queue_.empty() && state_.running == 0; });
}

EngineWorker::~EngineWorker() {
  shutdown();
  thread_.join();
}

void EngineWorker::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Waiting HTTP threads must not block forever on a request that will never run.
    for (Job& job : queue_) job.channel->push({ChannelItem::Kind::kError, {}, {}, {}, "the server is shutting down"});
    queue_.clear();
  }
  cv_.notify_all();
}

std::shared_ptr<RequestChannel> EngineWorker::submit(GenerationRequest request) {
  auto channel = std::make_shared<RequestChannel>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queue_) return nullptr;
    queue_.push_back({std::move(request), channel});
  }
  cv_.notify_one();
  return channel;
}

size_t EngineWorker::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void EngineWorker::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
      state_.running = 1;  // before the lock drops, so wait_idle never sees a gap
    }
    run(job);
    publish_state(false);
  }
}

void EngineWorker::run(Job& job) {
  RequestChannel& ch = *job.channel;
  if (ch.cancelled()) return;  // the client left while it waited
  try {
    // The stream's destructor releases the sequence's blocks, on every exit path.
    GenerationStream stream(engine_, std::move(job.request));
    while (!ch.cancelled()) {
      std::optional<TokenEvent> ev = stream.next();
      if (!ev) break;
      ChannelItem item;
      item.token = std::move(*ev);
      item.stats = stream.stats();  // the reader knows cached_tokens even if it stops reading early
      ch.push(std::move(item));
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping = stopping_;
      }
      if (stopping) break;
    }
    ChannelItem done;
    done.kind = ChannelItem::Kind::kDone;
    done.stats = stream.stats();
    done.finish = stream.finish_reason();
    ch.push(std::move(done));
  } catch (const InputError& e) {
    ch.push({ChannelItem::Kind::kError, {}, {}, {}, e.what(), true});
  } catch (const std::exception& e) {
    ch.push({ChannelItem::Kind::kError, {}, {}, {}, e.what(), false});
  }
}

}  // namespace hearth::server
