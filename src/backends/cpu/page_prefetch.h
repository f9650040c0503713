// A software prefetch at 4 KiB page boundaries only, for kernels that stream weights.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace hearth::cpu {

// Why only at page boundaries: the hardware's stream prefetcher stops at each 4 KiB page and must
// see misses in the next one to start again; a decode loop does so much work per line that its
// own misses come late, and the stream stalls at every page boundary. On the 2-core EPYC: the
// 4-bit panel decode +8%, the Q6_K LM head of a GGUF Q4_0 model +3-5% over a prefetch of every
// block four blocks ahead, the decode attention's K pass +14-30% (bench/RESULTS.md, 2026-12-05,
// stop 32). Prefetching every line at a fixed distance lost 5-10% of the panel decode; three or
// more pages ahead, or four lines, gained less.
constexpr uintptr_t kPagePrefetchAhead = 8192;

// The first two lines of the page that holds `ahead`, unless that page was the last one.
inline void prefetch_page(const void* ahead, uintptr_t& last_page) {
  const uintptr_t page = reinterpret_cast<uintptr_t>(ahead) & ~uintptr_t{4095};
  if (page == last_page) return;
  last_page = page;
  _mm_prefetch(reinterpret_cast<const char*>(page), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(page) + 64, _MM_HINT_T0);
}

// Every line of a small buffer (a decode matvec's x) into L1 at once: the calling thread has just
// written it, so on another core each line would miss where the kernel first reads it, one after
// another in its first row's loop. Asked for together they arrive together: a decode layer's
// 4-bit panel matvecs 0-7% faster per call (bench/RESULTS.md, 2026-12-05, stop 34).
template <typename T>
inline void prefetch_buffer(const T* data, size_t count) {
  const char* p = reinterpret_cast<const char*>(data);
  for (size_t byte = 0; byte < count * sizeof(T); byte += 64) _mm_prefetch(p + byte, _MM_HINT_T0);
}

// The first two lines of the 4 KiB page kPagePrefetchAhead past src, once per page (last_page:
// the caller's state, 0 to start), for a stream that goes on in ascending addresses.
inline void prefetch_page_ahead(const void* src, uintptr_t& last_page) {
  prefetch_page(static_cast<const char*>(src) + kPagePrefetchAhead, last_page);
}

// The same for a stream of steps of about `step_bytes` each, without a test of the page at every
// step (five instructions in a 4-bit panel group of ~60): every 4096 / step_bytes steps, so
// that no page goes without, the first two lines of the page kPagePrefetchAhead past the step.
// A page now and then gets its lines asked for twice; they are in flight by then.
class PagePrefetchCadence {
 public:
  explicit PagePrefetchCadence(int64_t step_bytes) : every_(std::max<int64_t>(1, 4096 / step_bytes)) {}
  void step(const void* src) {
    if (--left_ > 0) return;
    left_ = every_;
    const uintptr_t page = (reinterpret_cast<uintptr_t>(src) + kPagePrefetchAhead) & ~uintptr_t{4095};
    _mm_prefetch(reinterpret_cast<const char*>(page), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(page) + 64, _MM_HINT_T0);
  }

 private:
  int64_t every_, left_ = 1;
};

}  // namespace hearth::cpu
