#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/knobs.h"

namespace hearth {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = knobs::threads();
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  shares_ = std::make_unique<Share[]>(static_cast<size_t>(n_threads_));
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

// Runs chunks of job `job` until none is left: its own share's from the front, then the other
// shares' from the back. A share's state packs the job id (bits 32..63), the next chunk from the
// front (16..31) and the end of the chunks left (0..15): a claim is valid only for the job it
// names, so a thread that wakes late cannot touch a finished job.
//
// Why shares: a thread's chunks are then neighbours, so its stream of weights runs on from one
// into the next (the decode kernels' page prefetch reaches past a chunk's end), and its claims
// land on a line that no other thread touches until one runs out of work. With one counter for
// all, the threads' chunks interleaved, each chunk started a cold stream and each claim fetched
// the counter's line from the other core, a round trip across the die when the host puts the
// two vCPUs on different CCDs. The decode's q+k+v and o/down loops got 2-3% shorter, pp512 the
// same (bench/RESULTS.md, stop 45).
void ThreadPool::work(uint32_t job, int self) {
  int done = 0;        // chunks this thread ran, counted into chunks_done_ once, as it leaves
  uint64_t count = 0;  // chunks per share, read once a claim has shown the job is this one
  for (int k = 0; k < n_threads_; ++k) {
    const int t = (self + k) % n_threads_;
    std::atomic<uint64_t>& state = shares_[static_cast<size_t>(t)].state;
    uint64_t v = state.load();
    while (true) {
      const uint64_t front = (v >> 16) & 0xffff, back = v & 0xffff;
      if ((v >> 32) != job || front >= back) break;
      const bool own = k == 0;
      if (!state.compare_exchange_weak(v, own ? v + (uint64_t{1} << 16) : v - 1)) continue;
      // The job cannot finish before this chunk does, so fn_, n_ and the count stay valid.
      count = static_cast<uint64_t>(chunks_per_share_);
      const uint64_t index = own ? front : back - 1;
      const int64_t first = n_ * t / n_threads_, size = n_ * (t + 1) / n_threads_ - first;
      const int64_t begin = first + chunk_begin(size, index, count);
      const int64_t end = first + chunk_begin(size, index + 1, count);
      if (begin < end) (*fn_)(begin, end);
      ++done;
      v = state.load();
    }
  }
  if (done > 0 && chunks_done_.fetch_add(done) + done == static_cast<int>(count) * n_threads_) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_.notify_one();
  }
}

void ThreadPool::worker_loop(int self) {
  uint64_t seen = 0;
  while (true) {
    auto has_job = [&] { return stop_.load(std::memory_order_relaxed) || generation_.load() != seen; };
    if (!spin_until(has_job)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, has_job);
    }
    if (stop_) return;
    seen = generation_.load();
    work(static_cast<uint32_t>(seen), self);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  // A few chunks per thread, so that a thread the OS has descheduled (other processes on the
  // machine) holds up one chunk, not its whole share: the others take the rest of its share.
  const int chunks =
      static_cast<int>(std::min<int64_t>(int64_t{n_threads_} * kChunksPerThread, (n + grain - 1) / grain));
  if (chunks <= 1 || n_threads_ == 1) {
    fn(0, n);
    return;
  }
  const int per_share = (chunks + n_threads_ - 1) / n_threads_;
  // The job's fields, published by the increment of generation_ below: a worker that loads the
  // new generation sees them. Relaxed stores, because sequentially consistent ones each wait for
  // their line to come back from the other core, where the last loop's claims and counts left it
  // (the worker's first chunk ~0.3 us sooner in the host's fast state; bench/RESULTS.md, stop 44).
  // No thread touches chunks_done_ or the shares for this job before it sees the new generation.
  fn_ = &fn;
  n_ = n;
  chunks_per_share_ = per_share;
  chunks_done_.store(0, std::memory_order_relaxed);
  uint32_t job = 0;
  {
    // Under the mutex, so that a worker between its check and its wait cannot miss it.
    std::lock_guard<std::mutex> lock(mutex_);
    job = static_cast<uint32_t>(generation_.load() + 1);
    for (int t = 0; t < n_threads_; ++t) {
      shares_[static_cast<size_t>(t)].state.store((uint64_t{job} << 32) | static_cast<uint64_t>(per_share),
                                                  std::memory_order_relaxed);
    }
    ++generation_;
  }
  wake_.notify_all();
  work(job, 0);
  auto done = [&] { return chunks_done_.load() == per_share * n_threads_; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, done);
  }
  fn_ = nullptr;
}

}  // namespace hearth
