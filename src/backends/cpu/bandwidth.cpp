// Memory read bandwidth, measured the way decode reads weights: every thread of the pool
// streams its own contiguous slice with the widest loads the ISA has. The loads feed a 64-bit
// word sum (the checksum), which every ISA must agree on, so none can be dropped. A scalar loop
// reads about a third of what AVX-512 does on the same machine, and would flatter every
// "fraction of bandwidth" computed from it.
//
// Each pass reads the buffer twice, with and without asking for each 4 KiB page's first lines
// two pages ahead (page_prefetch.h, as the kernels do), and keeps the faster: which loop reads
// more depends on the CPU. On the Zen 5 EPYC of stop 36 the loop without it read 53-63 GB/s and
// with it 74-82, the 8-bit decode 71; on the Zen 4 EPYC of stop 49 the loop with it read 28-29
// GB/s, without it 34-37, and the 4-bit panel decode 35 (bench/RESULTS.md). Either loop alone
// would have flattered the decode on one of them.
#include "core/bandwidth.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/page_prefetch.h"
#include "backends/cpu/simd.h"
#include "base/error.h"
#include "base/timer.h"

namespace hearth::cpu {
namespace {

constexpr size_t kPage = 4096;

// Whole 64-bit words, then a zero-padded partial word.
uint64_t checksum_scalar(const uint8_t* p, size_t n) {
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    sum += w;
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    sum += w;
  }
  return sum;
}

// Four independent accumulators keep four loads in flight per iteration.
template <bool kPagePrefetch>
HEARTH_AVX2 uint64_t checksum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  uintptr_t last_page = 0;
  for (; i + 128 <= n; i += 128) {
    if constexpr (kPagePrefetch) prefetch_page_ahead(p + i, last_page);
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  for (; i + 32 <= n; i += 32) a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + checksum_scalar(p + i, n - i);
}

template <bool kPagePrefetch>
HEARTH_AVX512 uint64_t checksum_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  uintptr_t last_page = 0;
  for (; i + 256 <= n; i += 256) {
    if constexpr (kPagePrefetch) prefetch_page_ahead(p + i, last_page);
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
  }
  for (; i + 64 <= n; i += 64) a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t sum = 0;
  for (uint64_t l : lanes) sum += l;
  return sum + checksum_scalar(p + i, n - i);
}

// Slice t of T over n bytes; inner boundaries are page-aligned, so every slice starts on a
// word boundary of the whole buffer and the slice sums add up to the whole sum.
size_t slice_begin(size_t n, int t, int T) {
  if (t >= T) return n;
  return std::min(n, (n / kPage) * static_cast<size_t>(t) / static_cast<size_t>(T) * kPage);
}

// Largest cache the OS reports (sysfs), or glibc's L3 figure when that is larger.
size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string text;
    if (!(in >> text) || text.empty()) continue;
    size_t scale = 1;
    if (text.back() == 'K') scale = size_t{1} << 10;
    if (text.back() == 'M') scale = size_t{1} << 20;
    best = std::max(best, static_cast<size_t>(std::strtoull(text.c_str(), nullptr, 10)) * scale);
  }
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max(best, l3 > 0 ? static_cast<size_t>(l3) : size_t{0});
}

// An anonymous mapping, unmapped at scope exit.
class Buffer {
 public:
  explicit Buffer(size_t n) : n_(n) {
    p_ = mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p_ == MAP_FAILED) throw InputError("bandwidth probe: cannot map " + std::to_string(n_ >> 20) + " MiB");
    // Huge pages where the system grants them, as the loaded weights get (core/tensor.cpp): on
    // 4 KiB pages the probe would read slower than decode streams the weights, and flatter it.
    madvise(p_, n_, MADV_HUGEPAGE);
  }
  ~Buffer() { munmap(p_, n_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint64_t* words() const { return static_cast<uint64_t*>(p_); }

 private:
  void* p_;
  size_t n_;
};

}  // namespace

uint64_t read_checksum(Isa isa, const void* data, size_t n_bytes, bool page_prefetch) {
  const auto* p = static_cast<const uint8_t*>(data);
  switch (isa) {
    case Isa::kAvx512: return page_prefetch ? checksum_avx512<true>(p, n_bytes) : checksum_avx512<false>(p, n_bytes);
    case Isa::kAvx2: return page_prefetch ? checksum_avx2<true>(p, n_bytes) : checksum_avx2<false>(p, n_bytes);
    case Isa::kScalar: return checksum_scalar(p, n_bytes);
  }
  return 0;
}

uint64_t read_checksum(Isa isa, ThreadPool* pool, const void* data, size_t n_bytes, bool page_prefetch) {
  if (pool == nullptr) return read_checksum(isa, data, n_bytes, page_prefetch);
  const int T = pool->size();
  std::vector<uint64_t> sums(static_cast<size_t>(T));
  const auto* p = static_cast<const uint8_t*>(data);
  // One item per thread: thread t always reads slice t.
  pool->parallel_for(T, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const size_t lo = slice_begin(n_bytes, static_cast<int>(t), T),
                   hi = slice_begin(n_bytes, static_cast<int>(t) + 1, T);
      sums[static_cast<size_t>(t)] = read_checksum(isa, p + lo, hi - lo, page_prefetch);
    }
  });
  uint64_t sum = 0;
  for (uint64_t s : sums) sum += s;
  return sum;
}

ReadBandwidth read_bandwidth(Isa isa, ThreadPool* pool, size_t n_bytes, int passes) {
  HEARTH_CHECK(pool != nullptr && passes >= 1);
  if (n_bytes == 0) n_bytes = std::max(size_t{1} << 30, 4 * last_level_cache_bytes());
  n_bytes = (n_bytes + kPage - 1) / kPage * kPage;
  const Buffer buffer(n_bytes);
  const size_t n_words = n_bytes / 8;
  // Word i holds i: the thread that will read a slice writes it first (first-touch placement),
  // and the expected sum is n(n-1)/2 mod 2^64.
  const int T = pool->size();
  pool->parallel_for(T, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const size_t lo = slice_begin(n_bytes, static_cast<int>(t), T) / 8,
                   hi = slice_begin(n_bytes, static_cast<int>(t) + 1, T) / 8;
      for (size_t i = lo; i < hi; ++i) buffer.words()[i] = i;
    }
  });
  const uint64_t expected = n_words % 2 == 0 ? (n_words / 2) * (n_words - 1) : n_words * ((n_words - 1) / 2);

  ReadBandwidth r;
  r.bytes = n_bytes;
  r.passes = passes;
  r.threads = T;
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    for (bool page_prefetch : {true, false}) {  // the faster of the two loops (top of the file)
      const Timer timer;
      r.checksum = read_checksum(isa, pool, buffer.words(), n_bytes, page_prefetch);
      const double seconds = timer.seconds();
      HEARTH_CHECK_MSG(r.checksum == expected, "bandwidth probe: checksum mismatch (a load was skipped)");
      best = std::max(best, static_cast<double>(n_bytes) / seconds);
    }
  }
  r.bytes_per_second = best;
  return r;
}

namespace {

// The machine's bandwidth, so the widest loads the CPU has even when HEARTH_ISA forces
// narrower kernels: a roofline measured with scalar loads would flatter the scalar kernels.
BandwidthResult probe(Context& ctx, const BandwidthProbe& options) {
  const Isa isa = best_isa();
  ThreadPool one(1);
  const ReadBandwidth r = read_bandwidth(isa, ctx.pool ? ctx.pool : &one, options.bytes, options.passes);
  return {r.bytes_per_second, r.bytes, r.passes, r.threads, std::string(isa_name(isa)), r.checksum};
}

struct Registrar {
  Registrar() { register_bandwidth_probe(DeviceType::kCpu, &probe); }
} registrar;

}  // namespace
}  // namespace hearth::cpu
