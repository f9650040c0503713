#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/knobs.h"

namespace hearth {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = knobs::threads();
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
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
constexpr int kChunksPerThread = 4;

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

// Where chunk i of `count` starts in [0, n). With at least count^2 items, chunk sizes shrink
// linearly (the first about 2/count of n, the last about 1/count^2, and none empty), so the
// threads that finish early share out the small chunks at the end and wait for one another by a
// small fraction of the loop, not half a chunk. With fewer, even chunks: a loop of one item per
// thread (the bandwidth probe's slices) must give each chunk one item.
int64_t chunk_begin(int64_t n, uint64_t i, uint64_t count) {
  const auto c = static_cast<__int128>(count);
  if (n < c * c) return static_cast<int64_t>(static_cast<__int128>(n) * i / c);
  const auto left = static_cast<__int128>(count - i);
  return n - static_cast<int64_t>(static_cast<__int128>(n) * left * left / (c * c));
}

}  // namespace

// Claims and runs chunks of job `job` until none is left. next_ packs the job id (bits
// 32..63), the chunk count (16..31) and the next chunk (0..15): a claim is valid only for the job
// it names, so a thread that wakes late cannot touch a finished job.
void ThreadPool::work(uint32_t job) {
  uint64_t v = next_.load();
  int done = 0;  // chunks this thread ran, counted into chunks_done_ once, as it leaves
  uint64_t count = 0;
  while (true) {
    const uint64_t index = v & 0xffff;
    count = (v >> 16) & 0xffff;
    if ((v >> 32) != job || index >= count) break;
    if (!next_.compare_exchange_weak(v, v + 1)) continue;
    // The job cannot finish before this chunk does, so fn_ and n_ stay valid.
    const int64_t begin = chunk_begin(n_, index, count), end = chunk_begin(n_, index + 1, count);
    if (begin < end) (*fn_)(begin, end);
    ++done;
    v = next_.load();
  }
  if (done > 0 && chunks_done_.fetch_add(done) + done == static_cast<int>(count)) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_.notify_one();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (true) {
    auto has_job = [&] { return stop_.load(std::memory_order_relaxed) || generation_.load() != seen; };
    if (!spin_until(has_job)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, has_job);
    }
    if (stop_) return;
    seen = generation_.load();
    work(static_cast<uint32_t>(seen));
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  // A few chunks per thread, claimed as threads come: a thread that the OS has descheduled
  // (other processes on the machine) holds up one chunk, not a fixed share of the loop.
  const int chunks =
      static_cast<int>(std::min<int64_t>(int64_t{n_threads_} * kChunksPerThread, (n + grain - 1) / grain));
  if (chunks <= 1 || n_threads_ == 1) {
    fn(0, n);
    return;
  }
  // The job's fields, published by the increment of generation_ below: a worker that loads the
  // new generation sees them. Relaxed stores, because sequentially consistent ones each wait for
  // their line to come back from the other core, where the last loop's claims and counts left it
  // (the worker's first chunk ~0.3 us sooner in the host's fast state; bench/RESULTS.md, stop 44).
  // No thread touches chunks_done_ or next_ for this job before it sees the new generation.
  fn_ = &fn;
  n_ = n;
  chunks_done_.store(0, std::memory_order_relaxed);
  uint32_t job = 0;
  {
    // Under the mutex, so that a worker between its check and its wait cannot miss it.
    std::lock_guard<std::mutex> lock(mutex_);
    job = static_cast<uint32_t>(generation_.load() + 1);
    next_.store((uint64_t{job} << 32) | (static_cast<uint64_t>(chunks) << 16), std::memory_order_relaxed);
    ++generation_;
  }
  wake_.notify_all();
  work(job);
  auto done = [&] { return chunks_done_.load() == chunks; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, done);
  }
  fn_ = nullptr;
}

}  // namespace hearth
