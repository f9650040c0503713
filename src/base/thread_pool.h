// A fixed pool of worker threads for data-parallel loops. The calling thread takes part,
// so a pool of n threads has n-1 workers. Passed explicitly (no global pool).
// A decode step is a few hundred short parallel loops, so waiting threads spin for a moment
// (kSpin) before they sleep on a condition variable: a futex wake-up per loop cost more than
// many of the loops themselves.
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

  // Runs fn(begin, end) over [0, n) split into contiguous chunks of at least `grain` items
  // (a few per thread), each run once by whichever thread claims it. Returns when all chunks
  // are done. Not reentrant.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void work(uint32_t job);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};  // bumped (under mutex_) to publish a job
  std::atomic<bool> stop_{false};
  // The current job, written before generation_ is bumped.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  // Each on its own cache line: both threads write them in every loop, and the spinning
  // workers read generation_ (the line above) all the while.
  alignas(64) std::atomic<uint64_t> next_{0};  // job id | chunk count | next chunk (see work())
  alignas(64) std::atomic<int> chunks_done_{0};
};

}  // namespace hearth
