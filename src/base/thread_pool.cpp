#include "base/thread_pool.h"

#include <algorithm>

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

void ThreadPool::run_chunk(int index) {
  if (index >= n_chunks_) return;
  const int64_t begin = n_ * index / n_chunks_;
  const int64_t end = n_ * (index + 1) / n_chunks_;
  if (begin < end) (*fn_)(begin, end);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunk(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    n_chunks_ = chunks;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  wake_.notify_all();
  run_chunk(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

}  // namespace hearth
