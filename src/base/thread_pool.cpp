#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/knobs.h"

namespace hearth {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = knobs::threads();
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

namespace {

// How long a thread spins on a condition before it sleeps.
constexpr std::chrono::microseconds kSpin{200};

// Spins until ready() or kSpin has passed; returns ready().
template <typename Ready>
bool spin_until(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace

void ThreadPool::run_chunk(int index) {
  if (index >= n_chunks_) return;
  const int64_t begin = n_ * index / n_chunks_;
  const int64_t end = n_ * (index + 1) / n_chunks_;
  if (begin < end) (*fn_)(begin, end);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  while (true) {
    auto has_job = [&] { return stop_.load(std::memory_order_relaxed) || generation_.load() != seen; };
    if (!spin_until(has_job)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, has_job);
    }
    if (stop_) return;
    seen = generation_.load();
    run_chunk(index);
    if (pending_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int chunks = static_cast<int>(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  n_chunks_ = chunks;
  pending_ = n_threads_ - 1;
  {
    // Under the mutex, so that a worker between its check and its wait cannot miss it.
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(0);
  auto done = [&] { return pending_.load() == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, done);
  }
  fn_ = nullptr;
}

}  // namespace hearth
