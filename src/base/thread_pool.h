// A fixed pool of worker threads for data-parallel loops. The calling thread takes part,
// so a pool of n threads has n-1 workers. Passed explicitly (no global pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth {

class ThreadPool {
 public:
  // n_threads <= 0: one per online core (or the HEARTH_THREADS knob when set).
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(begin, end) over [0, n) split into contiguous chunks of at least `grain` items,
  // one chunk per thread at most. Returns when all chunks are done. Not reentrant.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_chunk(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // The current job.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int n_chunks_ = 0;
  int pending_ = 0;
};

}  // namespace hearth
