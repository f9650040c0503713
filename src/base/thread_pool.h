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
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth {

// The most threads a pool may be asked for (--threads, HEARTH_THREADS): far past any machine's
// cores, well short of what would exhaust the process creating them.
inline constexpr int kMaxThreads = 4096;

class ThreadPool {
 public:
  // n_threads <= 0: one per online core (or the HEARTH_THREADS knob when set).
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(begin, end) over [0, n) split into contiguous chunks of at least `grain` items,
  // each run once. Thread t (the caller is 0) owns the t-th of n_threads equal shares of [0, n),
  // a few chunks that shrink along it, and runs them front to back; a thread whose share is done
  // takes chunks from the back of the others'. Returns when all chunks are done. Not reentrant.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int self);
  void work(uint32_t job, int self);

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
  int chunks_per_share_ = 0;
  // Each on its own cache line: chunks_done_ is written by every thread in every loop, and each
  // share by its owner alone until it runs out of work, while the spinning workers read
  // generation_ (the line above) all the while.
  alignas(64) std::atomic<int> chunks_done_{0};
  struct alignas(64) Share {
    std::atomic<uint64_t> state{0};  // job id | next chunk from the front | end of those left (work())
  };
  std::unique_ptr<Share[]> shares_;  // one per thread
};

}  // namespace hearth
