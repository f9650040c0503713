// The bandwidth probe's read kernel: every ISA and every thread split sums the same buffer to
// the same checksum as the scalar reference (so the probe reads every byte), and the probe
// itself checks its buffer's known sum.
#include "core/bandwidth.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace hearth {
namespace {

using cpu::Isa;

// Byte by byte, as the definition reads: byte i weighs 2^(8 * (i mod 8)), mod 2^64.
uint64_t reference_checksum(const uint8_t* p, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<uint64_t>(p[i]) << (8 * (i % 8));
  return sum;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(ReadChecksum, EveryIsaMatchesTheScalarReference) {
  const std::vector<uint8_t> buf = random_bytes(100003, 7);
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{31}, size_t{32}, size_t{63}, size_t{64},
        size_t{65}, size_t{127}, size_t{128}, size_t{255}, size_t{256}, size_t{257}, size_t{4097}, size_t{99999}}) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {  // unaligned starts too
      const uint8_t* p = buf.data() + offset;
      const uint64_t want = reference_checksum(p, n);
      EXPECT_EQ(cpu::read_checksum(Isa::kScalar, p, n), want) << "n=" << n << " offset=" << offset;
      for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
        if (!cpu::isa_supported(isa)) continue;
        for (bool page_prefetch : {true, false}) {
          EXPECT_EQ(cpu::read_checksum(isa, p, n, page_prefetch), want)
              << cpu::isa_name(isa) << " n=" << n << " offset=" << offset << " page prefetch " << page_prefetch;
        }
      }
    }
  }
}

TEST(ReadChecksum, ThreadSlicesAddUpToTheWholeSum) {
  const std::vector<uint8_t> buf = random_bytes((size_t{1} << 20) + 13, 11);
  const uint64_t want = cpu::read_checksum(Isa::kScalar, buf.data(), buf.size());
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t n : {size_t{5}, size_t{4096 * 3 + 1}, buf.size()}) {
      EXPECT_EQ(cpu::read_checksum(cpu::best_isa(), &pool, buf.data(), n),
                cpu::read_checksum(Isa::kScalar, buf.data(), n))
          << threads << " threads, n=" << n;
    }
    EXPECT_EQ(cpu::read_checksum(cpu::best_isa(), &pool, buf.data(), buf.size()), want);
    EXPECT_EQ(cpu::read_checksum(cpu::best_isa(), &pool, buf.data(), buf.size(), false), want);
  }
}

TEST(ReadBandwidth, ReadsTheWholeBufferEveryPass) {
  ThreadPool pool(2);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!cpu::isa_supported(isa)) continue;
    const size_t n = (size_t{8} << 20) + 100;  // rounded up to whole pages
    const cpu::ReadBandwidth r = cpu::read_bandwidth(isa, &pool, n, 2);
    EXPECT_EQ(r.bytes % 4096, 0u);
    EXPECT_GE(r.bytes, n);
    const uint64_t words = r.bytes / 8;
    EXPECT_EQ(r.checksum, words / 2 * (words - 1)) << cpu::isa_name(isa);  // word i holds i
    EXPECT_GT(r.bytes_per_second, 0);
    EXPECT_EQ(r.threads, 2);
    EXPECT_EQ(r.passes, 2);
  }
}

TEST(ReadBandwidth, ReachableThroughCore) {
  ThreadPool pool(2);
  Context ctx{&pool, kCpu};
  BandwidthProbe probe;
  probe.bytes = size_t{4} << 20;
  probe.passes = 1;
  const BandwidthResult r = measure_read_bandwidth(ctx, probe);
  EXPECT_GT(r.bytes_per_second, 0);
  EXPECT_EQ(r.bytes, probe.bytes);
  EXPECT_EQ(r.threads, 2);
  EXPECT_FALSE(r.isa.empty());
  probe.passes = 0;
  EXPECT_THROW(measure_read_bandwidth(ctx, probe), InputError);
}

}  // namespace
}  // namespace hearth
