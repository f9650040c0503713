// The f32 <-> f16/bf16 conversions in core/dtype: f16 against the F16C hardware conversions
// (exhaustive for f16 -> f32; every rounding midpoint plus random floats for f32 -> f16),
// bf16 against an independent round-to-nearest-even reference.
#include "core/dtype.h"

#include <cpuid.h>
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace hearth {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
bool has_f16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

TEST(dtype, F16ToF32ExhaustiveVsF16c) {
  if (!has_f16c()) GTEST_SKIP() << "no F16C";
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t got = bits_of(f16_to_f32(static_cast<uint16_t>(h)));
    const uint32_t want = bits_of(hw_f16_to_f32(static_cast<uint16_t>(h)));
    if (got != want && ++bad <= 10)
      ADD_FAILURE() << "f16_to_f32(" << hex(h) << ") = " << hex(got) << ", F16C " << hex(want);
  }
  EXPECT_EQ(bad, 0);
}

// Checks f32_to_f16(x) against F16C; NaNs must stay NaN (quiet, same sign), payload aside.
int check_f32_to_f16(float x, int& bad) {
  const uint16_t got = f32_to_f16(x), want = hw_f32_to_f16(x);
  const bool ok = std::isnan(x) ? f16_is_nan(got) && (got & 0x200) && (got & 0x8000) == (want & 0x8000) : got == want;
  if (!ok && ++bad <= 10) {
    ADD_FAILURE() << "f32_to_f16(" << hex(bits_of(x)) << " = " << x << ") = " << hex(got) << ", F16C " << hex(want);
  }
  return ok ? 0 : 1;
}

TEST(dtype, F32ToF16EdgeCasesVsF16c) {
  if (!has_f16c()) GTEST_SKIP() << "no F16C";
  int bad = 0;
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[] = {0.0f,
                         -0.0f,
                         inf,
                         -inf,
                         std::numeric_limits<float>::quiet_NaN(),
                         float_of(0x7f800001u),
                         float_of(0xff812345u),
                         float_of(0x7fffffffu),  // NaNs, signaling too
                         std::numeric_limits<float>::max(),
                         -std::numeric_limits<float>::max(),
                         std::numeric_limits<float>::denorm_min(),
                         std::numeric_limits<float>::min(),
                         65504.0f,
                         65519.0f,
                         65519.996f,
                         65520.0f,
                         65536.0f,
                         1e5f,
                         -65520.0f,  // overflow boundary
                         std::ldexp(1.0f, -24),
                         std::ldexp(1.0f, -25),
                         std::ldexp(1.5f, -25),
                         std::ldexp(3.0f, -25),
                         std::ldexp(1.0f, -26),
                         std::ldexp(1.0f, -14),
                         std::ldexp(1023.5f, -24),
                         std::ldexp(2047.0f, -25),  // midway between the largest subnormal and the smallest normal
                         1.0f,
                         1.0f + std::ldexp(1.0f, -11),
                         1.0f + std::ldexp(3.0f, -11),
                         2049.0f,
                         2051.0f};
  for (float x : edges) check_f32_to_f16(x, bad);
  EXPECT_EQ(bad, 0);
}

// Every f16 value and the exact midpoint to its successor (ties to even), plus the floats one
// ulp either side of each midpoint, both signs. Covers every subnormal and normal binade.
TEST(dtype, F32ToF16AllMidpointsVsF16c) {
  if (!has_f16c()) GTEST_SKIP() << "no F16C";
  int bad = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = f16_to_f32(static_cast<uint16_t>(h));
    const float hi = h + 1 == 0x7c00 ? 65536.0f : f16_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;  // exact: an f16 midpoint needs 12 significant bits
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      check_f32_to_f16(x, bad);
      check_f32_to_f16(-x, bad);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(dtype, F32ToF16RandomVsF16c) {
  if (!has_f16c()) GTEST_SKIP() << "no F16C";
  std::mt19937 rng(20);
  std::uniform_int_distribution<uint32_t> exp_near(100, 145);  // the f16 range and a little beyond
  int bad = 0;
  for (int i = 0; i < 1 << 21; ++i) {
    const uint32_t r = rng();
    check_f32_to_f16(float_of(r), bad);                                          // any bits
    check_f32_to_f16(float_of((r & 0x807fffffu) | (exp_near(rng) << 23)), bad);  // where rounding matters
  }
  EXPECT_EQ(bad, 0);
}

TEST(dtype, F16RoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = f32_to_f16(f16_to_f32(static_cast<uint16_t>(h)));
    if (f16_is_nan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(f16_is_nan(back)) << hex(h);
    } else {
      ASSERT_EQ(back, h) << hex(h);
    }
  }
}

// Independent bf16 reference: pick the nearer of the two neighbouring bf16 values in double,
// ties to the even one; beyond the largest finite value the upper neighbour is 2^128 (inf).
uint16_t ref_f32_to_bf16(float x) {
  const uint32_t b = bits_of(x);
  const auto down = static_cast<uint16_t>(b >> 16);  // truncation toward zero
  if (std::isinf(x) || (b & 0xffffu) == 0) return down;
  const auto up = static_cast<uint16_t>(down + 1);  // next magnitude away from zero, same sign
  const double lo = std::abs(double(bf16_to_f32(down)));
  const double hi = (up & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::abs(double(bf16_to_f32(up)));
  const double ax = std::abs(double(x));
  if (ax - lo < hi - ax) return down;
  if (ax - lo > hi - ax) return up;
  return (down & 1) == 0 ? down : up;
}

int check_f32_to_bf16(float x, int& bad) {
  const uint16_t got = f32_to_bf16(x);
  bool ok;
  if (std::isnan(x)) {
    ok = bf16_is_nan(got) && (got & 0x40) && (got & 0x8000) == ((bits_of(x) >> 16) & 0x8000);
  } else {
    ok = got == ref_f32_to_bf16(x);
  }
  if (!ok && ++bad <= 10) {
    ADD_FAILURE() << "f32_to_bf16(" << hex(bits_of(x)) << " = " << x << ") = " << hex(got) << ", want "
                  << hex(ref_f32_to_bf16(x));
  }
  return ok ? 0 : 1;
}

// Every bf16 value (high half) with the low halves that decide rounding: exact, just above
// zero, just below / at / just above the midpoint, just below the next value.
TEST(dtype, F32ToBf16AllBinadesVsReference) {
  int bad = 0;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      check_f32_to_bf16(float_of(hi << 16 | lo), bad);
  }
  EXPECT_EQ(bad, 0);
}

TEST(dtype, F32ToBf16RandomVsReference) {
  std::mt19937 rng(21);
  int bad = 0;
  for (int i = 0; i < 1 << 21; ++i) check_f32_to_bf16(float_of(rng()), bad);
  EXPECT_EQ(bad, 0);
}

TEST(dtype, Bf16RoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(h)));
    if (bf16_is_nan(static_cast<uint16_t>(h))) {
      ASSERT_TRUE(bf16_is_nan(back)) << hex(h);
    } else {
      ASSERT_EQ(back, h) << hex(h);
    }
  }
}

}  // namespace
}  // namespace hearth
