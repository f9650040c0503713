// Every CPU kernel, every ISA this machine supports, against the scalar reference (and the
// scalar reference against straightforward double-precision math), over odd shapes and
// with and without a thread pool. Attention is also checked against a dense, un-paged
// reference so the paging and window logic itself is validated.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "base/knobs.h"
#include "base/thread_pool.h"
#include "core/dtype.h"

namespace hearth {
namespace {

using cpu::Isa;

// Odd and even sizes around the 8- and 16-lane vector widths and their unrolled multiples.
constexpr int64_t kSizes[] = {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257, 1000};

// The ISAs to compare against the scalar reference.
std::vector<Isa> simd_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (cpu::isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

// Every ISA including scalar (for multithreading checks).
std::vector<Isa> all_isas() {
  std::vector<Isa> out = {Isa::kScalar};
  for (Isa isa : simd_isas()) out.push_back(isa);
  return out;
}

// nullptr, a pool of 2 and a pool of 3 threads; created once.
std::vector<ThreadPool*> pools() {
  static ThreadPool two(2), three(3);
  return {nullptr, &two, &three};
}

std::string pool_name(const ThreadPool* p) { return p == nullptr ? "pool=null" : "pool=" + std::to_string(p->size()); }

// |got - want| <= atol + rtol * |want| for every element; NaN must match NaN. On failure
// reports the worst element (largest excess over its tolerance) with index, values and `what`.
bool expect_close(std::span<const float> got, std::span<const float> want, double atol, double rtol,
                  const std::string& what) {
  if (got.size() != want.size()) {
    ADD_FAILURE() << what << ": size " << got.size() << " != " << want.size();
    return false;
  }
  size_t worst = 0, bad = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    double excess;
    if (std::isnan(w) || std::isnan(g)) {
      excess = std::isnan(w) && std::isnan(g) ? 0.0 : std::numeric_limits<double>::infinity();
    } else if (std::isinf(w) || std::isinf(g)) {
      excess = g == w ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      excess = std::abs(g - w) - (atol + rtol * std::abs(w));
    }
    if (excess > 0.0) {
      ++bad;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return true;
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << bad << " of " << got.size() << " elements off; worst at index " << worst << ": got "
     << got[worst] << ", want " << want[worst] << " (|diff| " << std::abs(double(got[worst]) - double(want[worst]))
     << ", atol " << atol << ", rtol " << rtol << ")";
  ADD_FAILURE() << os.str();
  return false;
}

bool expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what) {
  std::vector<float> w(want.begin(), want.end());
  return expect_close(std::span<const float>(got), std::span<const float>(w), atol, rtol, what);
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Weights of a float dtype: the raw bytes and their exact f32 values.
struct Weights {
  DType type;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  const void* data() const { return bytes.data(); }
};

Weights make_weights(std::mt19937& rng, DType type, size_t n) {
  Weights w{type, {}, random_floats(rng, n)};
  w.bytes.resize(n * dtype_size(type));
  for (size_t i = 0; i < n; ++i) {
    if (type == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &w.values[i], 4);
      continue;
    }
    const uint16_t h = type == DType::kBF16 ? f32_to_bf16(w.values[i]) : f32_to_f16(w.values[i]);
    std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    w.values[i] = type == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
  return w;
}

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

double dot_ref(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

// Tolerances for f32 sums of K products of values in [-1, 1].
double dot_atol(int64_t k) { return 1e-5 * std::sqrt(double(k)); }
constexpr double kRtol = 1e-5;

// ---------------------------------------------------------------- dot, convert_row

TEST(ops_kernel, Dot) {
  std::mt19937 rng(1);
  for (DType bt : kFloatTypes) {
    for (int64_t n : kSizes) {
      const std::vector<float> a = random_floats(rng, size_t(n));
      const Weights b = make_weights(rng, bt, size_t(n));
      const std::string shape = "dot b=" + std::string(dtype_name(bt)) + " n=" + std::to_string(n);
      const float ref = cpu::dot(Isa::kScalar, a.data(), b.data(), bt, n);
      expect_close(std::vector<float>{ref}, std::vector<double>{dot_ref(a.data(), b.values.data(), n)}, dot_atol(n),
                   kRtol, shape + " scalar vs double");
      for (Isa isa : simd_isas()) {
        const float got = cpu::dot(isa, a.data(), b.data(), bt, n);
        expect_close(std::span<const float>(&got, 1), std::span<const float>(&ref, 1), dot_atol(n), kRtol,
                     shape + " " + std::string(cpu::isa_name(isa)));
      }
    }
  }
}

TEST(ops_kernel, ConvertRowIsExact) {
  std::mt19937 rng(2);
  for (DType st : kFloatTypes) {
    for (int64_t n : kSizes) {
      // Random bit patterns: every exponent, subnormals, inf and NaN included.
      std::vector<uint8_t> src(size_t(n) * dtype_size(st));
      for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
      std::vector<float> want(static_cast<size_t>(n));
      cpu::convert_row(Isa::kScalar, src.data(), st, n, want.data());
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = 0;
        if (st != DType::kF32) std::memcpy(&h, src.data() + 2 * i, 2);
        const float direct = st == DType::kF32    ? reinterpret_cast<const float*>(src.data())[i]
                             : st == DType::kBF16 ? bf16_to_f32(h)
                                                  : f16_to_f32(h);
        ASSERT_EQ(std::memcmp(&direct, &want[size_t(i)], 4), 0)
            << "convert_row scalar " << dtype_name(st) << " n=" << n << " index " << i;
      }
      for (Isa isa : simd_isas()) {
        std::vector<float> got(size_t(n) + 1, 12345.0f);  // one guard element
        cpu::convert_row(isa, src.data(), st, n, got.data());
        EXPECT_EQ(got.back(), 12345.0f) << "convert_row wrote past n=" << n;
        got.pop_back();
        // Bit for bit, NaN payloads included (F16C quiets NaNs; so must the scalar path).
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::memcmp(&got[size_t(i)], &want[size_t(i)], 4), 0)
              << "convert_row " << dtype_name(st) << " n=" << n << " " << cpu::isa_name(isa) << " index " << i
              << ": got " << got[size_t(i)] << ", want " << want[size_t(i)];
        }
      }
    }
  }
}

// ---------------------------------------------------------------- matmul

struct MatmulShape {
  int64_t T, K, N;
};

std::vector<MatmulShape> matmul_shapes() {
  std::vector<MatmulShape> shapes = {{1, 1, 1},     {1, 3, 5},      {3, 7, 4},     {2, 16, 8},   {5, 17, 9},
                                     {1, 33, 63},   {7, 65, 17},    {4, 100, 31},  {1, 257, 65}, {3, 1000, 7},
                                     {17, 257, 65}, {33, 64, 100},  {9, 128, 257},  // these three split over threads
                                     {1, 1024, 37}, {2, 96, 8},     {4, 67, 9},     // T <= 4: weight rows one at a time
                                     {5, 96, 8},    {6, 1024, 13},                  // T > 4: register tiles
                                     {37, 300, 70}, {8, 2048, 33},                  // tiles, panels and K tails
                                     {40, 64, 300}, {70, 128, 1000}};  // AMX: groups of panels, the last cut short
  std::mt19937 rng(3);
  std::uniform_int_distribution<size_t> pick(0, std::size(kSizes) - 1);
  for (int i = 0; i < 8; ++i) {
    shapes.push_back(
        {std::min<int64_t>(kSizes[pick(rng)], 17), kSizes[pick(rng)], std::min<int64_t>(kSizes[pick(rng)], 257)});
  }
  return shapes;
}

TEST(ops_kernel, Matmul) {
  std::mt19937 rng(4);
  for (DType wt : kFloatTypes) {
    for (const MatmulShape& s : matmul_shapes()) {
      const std::vector<float> x = random_floats(rng, size_t(s.T * s.K));
      const Weights w = make_weights(rng, wt, size_t(s.N * s.K));
      const std::vector<float> bias = random_floats(rng, size_t(s.N));
      for (bool with_bias : {false, true}) {
        const float* b = with_bias ? bias.data() : nullptr;
        const std::string shape = "matmul x[" + std::to_string(s.T) + ", " + std::to_string(s.K) + "] w " +
                                  std::string(dtype_name(wt)) + "[" + std::to_string(s.N) + ", " + std::to_string(s.K) +
                                  "]" + (with_bias ? " +bias" : "");
        std::vector<float> ref(size_t(s.T * s.N));
        cpu::matmul(Isa::kScalar, nullptr, x.data(), s.T, s.K, w.data(), wt, s.N, b, ref.data());
        std::vector<double> exact(ref.size());
        for (int64_t t = 0; t < s.T; ++t) {
          for (int64_t n = 0; n < s.N; ++n) {
            exact[size_t(t * s.N + n)] =
                dot_ref(x.data() + t * s.K, w.values.data() + n * s.K, s.K) + (b ? double(b[n]) : 0.0);
          }
        }
        expect_close(ref, exact, dot_atol(s.K), kRtol, shape + " scalar vs double");
        // The AVX512-BF16 prefill path rounds x to bf16 first: its reference is the exact
        // result for that rounded x, to the same bound (products are exact, sums f32).
        std::vector<float> x_bf16(x.size());
        for (size_t i = 0; i < x.size(); ++i) x_bf16[i] = bf16_to_f32(f32_to_bf16(x[i]));
        std::vector<double> exact_bf16_x(ref.size());
        for (int64_t t = 0; t < s.T; ++t) {
          for (int64_t n = 0; n < s.N; ++n) {
            exact_bf16_x[size_t(t * s.N + n)] =
                dot_ref(x_bf16.data() + t * s.K, w.values.data() + n * s.K, s.K) + (b ? double(b[n]) : 0.0);
          }
        }
        for (Isa isa : all_isas()) {
          std::vector<float> first;
          for (ThreadPool* pool : pools()) {
            std::vector<float> got(size_t(s.T * s.N), std::numeric_limits<float>::quiet_NaN());
            cpu::matmul(isa, pool, x.data(), s.T, s.K, w.data(), wt, s.N, b, got.data());
            const std::string what = shape + " " + std::string(cpu::isa_name(isa)) + " " + pool_name(pool);
            if (cpu::matmul_rounds_x_to_bf16(isa, wt, s.T)) {
              expect_close(got, exact_bf16_x, dot_atol(s.K), kRtol, what + " (x rounded to bf16)");
              // On a CPU with AMX the above ran on tiles where K % 32 == 0; the vdpbf16ps dots too.
              if (cpu::has_amx()) {
                KnobOverride no_amx("HEARTH_CPU_AMX", "0");
                std::vector<float> dots(got.size());
                cpu::matmul(isa, pool, x.data(), s.T, s.K, w.data(), wt, s.N, b, dots.data());
                expect_close(dots, exact_bf16_x, dot_atol(s.K), kRtol, what + " (AMX off)");
              }
              // What an AVX-512 CPU without AVX512-BF16 runs for bf16 weights.
              std::vector<float> fma(got.size());
              cpu::matmul_fma_tiles(isa, pool, x.data(), s.T, s.K, w.data(), wt, s.N, b, fma.data());
              expect_close(fma, ref, dot_atol(s.K), kRtol, what + " (FMA tiles)");
            } else {
              expect_close(got, ref, dot_atol(s.K), kRtol, what);
            }
            // Splitting over threads must not change a single bit.
            if (first.empty()) {
              first = got;
            } else {
              expect_close(got, first, 0.0, 0.0, what + " vs pool=null (bitwise)");
            }
          }
        }
      }
    }
  }
}

// x = 1 + 2^-10 lies between two bf16 values: the bf16 prefill path sees 1, every other path
// the exact value. So this shows which path ran, where the CPU has it.
TEST(ops_kernel, MatmulRoundsXToBf16OnlyOnTheBf16PrefillPath) {
  const float x_val = 1.0f + 0x1p-10f;
  const uint16_t one = f32_to_bf16(1.0f);
  for (Isa isa : all_isas()) {
    for (DType wt : kFloatTypes) {
      for (int64_t T : {1, 4, 5, 9}) {
        const std::vector<float> x(static_cast<size_t>(T), x_val);
        const std::vector<uint16_t> w16 = {wt == DType::kF16 ? f32_to_f16(1.0f) : one};
        const float w32 = 1.0f;
        const void* w = wt == DType::kF32 ? static_cast<const void*>(&w32) : w16.data();
        std::vector<float> y(static_cast<size_t>(T));
        cpu::matmul(isa, nullptr, x.data(), T, 1, w, wt, 1, nullptr, y.data());
        const bool rounds = cpu::matmul_rounds_x_to_bf16(isa, wt, T);
        EXPECT_EQ(rounds, isa == Isa::kAvx512 && wt == DType::kBF16 && T > 4 && cpu::has_avx512_bf16());
        for (float v : y)
          EXPECT_EQ(v, rounds ? 1.0f : x_val) << cpu::isa_name(isa) << " " << dtype_name(wt) << " T=" << T;
      }
    }
  }
}

// ---------------------------------------------------------------- rms_norm

TEST(ops_kernel, RmsNorm) {
  std::mt19937 rng(5);
  for (int64_t rows : {1, 3, 5}) {
    for (int64_t d : kSizes) {
      for (float eps : {1e-6f, 1e-5f}) {
        const std::vector<float> x = random_floats(rng, size_t(rows * d), -3.0f, 3.0f);
        const std::vector<float> w = random_floats(rng, size_t(d), 0.5f, 1.5f);
        const std::string shape =
            "rms_norm [" + std::to_string(rows) + ", " + std::to_string(d) + "] eps=" + std::to_string(eps);
        std::vector<float> ref(x.size());
        cpu::rms_norm(Isa::kScalar, x.data(), w.data(), rows, d, eps, ref.data());
        std::vector<double> exact(x.size());
        for (int64_t r = 0; r < rows; ++r) {
          const double ms = dot_ref(x.data() + r * d, x.data() + r * d, d) / double(d);
          for (int64_t i = 0; i < d; ++i) {
            exact[size_t(r * d + i)] = double(w[size_t(i)]) * double(x[size_t(r * d + i)]) / std::sqrt(ms + eps);
          }
        }
        expect_close(ref, exact, 1e-5, kRtol, shape + " scalar vs double");
        for (Isa isa : simd_isas()) {
          std::vector<float> got(x.size());
          cpu::rms_norm(isa, x.data(), w.data(), rows, d, eps, got.data());
          expect_close(got, ref, 1e-5, kRtol, shape + " " + std::string(cpu::isa_name(isa)));
          std::vector<float> inplace = x;  // y == x
          cpu::rms_norm(isa, inplace.data(), w.data(), rows, d, eps, inplace.data());
          expect_close(inplace, got, 0.0, 0.0, shape + " " + std::string(cpu::isa_name(isa)) + " in place");
        }
      }
    }
  }
}

// ---------------------------------------------------------------- rope

TEST(ops_kernel, Rope) {
  std::mt19937 rng(6);
  struct Case {
    int64_t T, H, Dh, half;
  };
  const Case cases[] = {{1, 1, 2, 1},    {3, 2, 8, 4},   {2, 3, 16, 8},    {5, 2, 17, 8},  {4, 1, 32, 16},
                        {2, 4, 33, 16},  {3, 2, 64, 32}, {1, 3, 64, 16},   {3, 2, 65, 32}, {2, 2, 128, 64},
                        {2, 1, 100, 33}, {3, 2, 128, 7}, {1, 1, 257, 100}, {2, 2, 80, 20}, {6, 1, 64, 1}};
  for (const Case& c : cases) {
    for (float af : {1.0f, 1.3f}) {
      std::vector<float> inv_freq(size_t(c.half));
      for (int64_t i = 0; i < c.half; ++i) {
        inv_freq[size_t(i)] = static_cast<float>(std::pow(10000.0, -double(i) / double(c.half)));
      }
      std::vector<int32_t> pos(size_t(c.T));
      std::uniform_int_distribution<int32_t> pd(0, 40000);
      for (int32_t& p : pos) p = pd(rng);
      pos[0] = 0;
      const std::vector<float> x = random_floats(rng, size_t(c.T * c.H * c.Dh));
      const std::string shape = "rope x[" + std::to_string(c.T) + ", " + std::to_string(c.H) + ", " +
                                std::to_string(c.Dh) + "] half=" + std::to_string(c.half) +
                                " attention_factor=" + std::to_string(af);
      std::vector<float> ref = x;
      cpu::rope(Isa::kScalar, ref.data(), c.T, c.H, c.Dh, pos.data(), inv_freq.data(), c.half, af);
      std::vector<double> exact(x.begin(), x.end());
      for (int64_t t = 0; t < c.T; ++t) {
        for (int64_t h = 0; h < c.H; ++h) {
          const size_t base = size_t((t * c.H + h) * c.Dh);
          for (int64_t i = 0; i < c.half; ++i) {
            const double angle = double(static_cast<float>(pos[size_t(t)]) * inv_freq[size_t(i)]);  // f32, as HF
            const double co = std::cos(angle) * af, si = std::sin(angle) * af;
            const double a = x[base + size_t(i)], b = x[base + size_t(i + c.half)];
            exact[base + size_t(i)] = a * co - b * si;
            exact[base + size_t(i + c.half)] = b * co + a * si;
          }
        }
      }
      // Dims past 2*half are untouched, bit for bit (exact holds x there).
      expect_close(ref, exact, 1e-6, kRtol, shape + " scalar vs double");
      for (Isa isa : simd_isas()) {
        std::vector<float> got = x;
        cpu::rope(isa, got.data(), c.T, c.H, c.Dh, pos.data(), inv_freq.data(), c.half, af);
        expect_close(got, ref, 1e-6, kRtol, shape + " " + std::string(cpu::isa_name(isa)));
      }
    }
  }
}

// ---------------------------------------------------------------- elementwise

TEST(ops_kernel, SiluMul) {
  std::mt19937 rng(7);
  for (int64_t n : kSizes) {
    std::vector<float> g = random_floats(rng, size_t(n), -12.0f, 12.0f);
    const std::vector<float> u = random_floats(rng, size_t(n), -2.0f, 2.0f);
    const float extremes[] = {0.0f, -0.0f, 90.0f, -90.0f, 200.0f, -200.0f, 1e-30f};
    for (size_t i = 0; i < std::size(extremes) && i < g.size(); i += 1) g[(i * 7919) % g.size()] = extremes[i];
    const std::string shape = "silu_mul n=" + std::to_string(n);
    std::vector<float> ref(static_cast<size_t>(n));
    cpu::silu_mul(Isa::kScalar, g.data(), u.data(), n, ref.data());
    std::vector<double> exact(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) exact[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * double(u[i]);
    expect_close(ref, exact, 1e-6, kRtol, shape + " scalar vs double");
    for (Isa isa : simd_isas()) {
      std::vector<float> got(static_cast<size_t>(n));
      cpu::silu_mul(isa, g.data(), u.data(), n, got.data());
      expect_close(got, ref, 1e-6, kRtol, shape + " " + std::string(cpu::isa_name(isa)));
      std::vector<float> inplace = g;  // out == gate
      cpu::silu_mul(isa, inplace.data(), u.data(), n, inplace.data());
      expect_close(inplace, got, 0.0, 0.0, shape + " " + std::string(cpu::isa_name(isa)) + " in place");
    }
  }
}

TEST(ops_kernel, AddIsExact) {
  std::mt19937 rng(8);
  for (int64_t n : kSizes) {
    const std::vector<float> a = random_floats(rng, size_t(n), -100.0f, 100.0f);
    const std::vector<float> b = random_floats(rng, size_t(n), -100.0f, 100.0f);
    std::vector<float> want(static_cast<size_t>(n));
    for (size_t i = 0; i < want.size(); ++i) want[i] = a[i] + b[i];
    for (Isa isa : all_isas()) {
      std::vector<float> got = a;
      got.push_back(7.0f);  // guard
      cpu::add(isa, got.data(), b.data(), n);
      EXPECT_EQ(got.back(), 7.0f) << "add wrote past n=" << n;
      got.pop_back();
      expect_close(got, want, 0.0, 0.0, "add n=" + std::to_string(n) + " " + std::string(cpu::isa_name(isa)));
    }
  }
}

// ---------------------------------------------------------------- softmax, argmax

TEST(ops_kernel, SoftmaxRow) {
  std::mt19937 rng(9);
  for (int64_t n : kSizes) {
    for (float spread : {1.0f, 30.0f}) {
      std::vector<float> x = random_floats(rng, size_t(n), -spread, spread);
      if (n > 2) x[size_t(n / 2)] = -std::numeric_limits<float>::infinity();  // a masked logit
      const std::string shape = "softmax_row n=" + std::to_string(n) + " spread=" + std::to_string(spread);
      std::vector<float> ref = x;
      cpu::softmax_row(Isa::kScalar, ref.data(), n);
      const double mx = *std::max_element(x.begin(), x.end());
      std::vector<double> exact(static_cast<size_t>(n));
      double sum = 0.0;
      for (size_t i = 0; i < exact.size(); ++i) sum += exact[i] = std::exp(double(x[i]) - mx);
      for (double& e : exact) e /= sum;
      expect_close(ref, exact, 1e-7, kRtol, shape + " scalar vs double");
      for (Isa isa : simd_isas()) {
        std::vector<float> got = x;
        got.push_back(3.0f);  // guard
        cpu::softmax_row(isa, got.data(), n);
        EXPECT_EQ(got.back(), 3.0f) << shape << " wrote past the row";
        got.pop_back();
        expect_close(got, ref, 1e-7, kRtol, shape + " " + std::string(cpu::isa_name(isa)));
      }
    }
  }
}

TEST(ops_kernel, ArgmaxRowFirstMaxWins) {
  std::mt19937 rng(10);
  for (int64_t n : kSizes) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> x = random_floats(rng, size_t(n), -5.0f, -1.0f);  // all negative
      std::uniform_int_distribution<int64_t> idx(0, n - 1);
      int64_t want = 0;
      switch (trial) {
        case 0: want = std::max_element(x.begin(), x.end()) - x.begin(); break;  // distinct values
        case 1:                                                                  // ties scattered: the first one wins
        case 2: {
          const int64_t a = idx(rng), b = idx(rng), c = n - 1;
          for (int64_t i : {a, b, c}) x[size_t(i)] = 2.0f;
          want = std::min({a, b, c});
          break;
        }
        case 3:  // all equal
          std::fill(x.begin(), x.end(), 0.5f);
          want = 0;
          break;
        case 4:  // the max sits in the tail, and again at the end
          want = n - 1 - (n - 1) % 16 + ((n - 1) % 16) / 2;
          x[size_t(want)] = 1.0f;
          x[size_t(n - 1)] = 1.0f;
          break;
        case 5:  // -inf entries and a tie at the very start
          for (size_t i = 1; i < x.size(); i += 2) x[i] = -std::numeric_limits<float>::infinity();
          x[0] = 4.0f;
          x[size_t(n - 1)] = 4.0f;
          want = 0;
          break;
      }
      for (Isa isa : all_isas()) {
        EXPECT_EQ(cpu::argmax_row(isa, x.data(), n), want)
            << "argmax_row n=" << n << " trial " << trial << " " << cpu::isa_name(isa);
      }
    }
  }
}

// ---------------------------------------------------------------- attention

struct AttentionCase {
  int64_t Hq, Hkv, Dh, block_size;
  int32_t window;
  std::vector<int32_t> q_lens, ctx_lens;
  DType kv_dtype = DType::kF32;
  std::string str() const {
    std::ostringstream os;
    os << "attention kv=" << dtype_name(kv_dtype) << " Hq=" << Hq << " Hkv=" << Hkv << " Dh=" << Dh
       << " block_size=" << block_size << " window=" << window << " seqs(q_len/ctx)=";
    for (size_t s = 0; s < q_lens.size(); ++s) os << (s ? "," : "") << q_lens[s] << "/" << ctx_lens[s];
    return os.str();
  }
};

// x rounded to `t` and back (the values a cache of that type holds).
float round_to(DType t, float x) {
  switch (t) {
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(x));
    case DType::kF16: return f16_to_f32(f32_to_f16(x));
    default: return x;
  }
}

// A flat batch with a paged cache whose blocks are handed out in shuffled order and whose
// unused slots hold NaN, so reading a wrong slot poisons the output. A cache of f16 or bf16
// holds the dense K/V rounded to it; the dense reference uses the same rounded values.
struct AttentionSetup {
  AttentionCase c;
  int64_t T = 0, max_blocks = 0;
  std::vector<int32_t> seq_starts, block_tables;
  std::vector<std::vector<float>> k_dense, v_dense;  // per sequence [L, Hkv, Dh]
  std::vector<float> q, k_cache, v_cache;
  std::vector<uint16_t> k_cache16, v_cache16;  // k_cache, v_cache as f16 or bf16

  AttentionSetup(const AttentionCase& ac, std::mt19937& rng) : c(ac) {
    const size_t S = c.q_lens.size();
    const int64_t row = c.Hkv * c.Dh;
    seq_starts.push_back(0);
    std::vector<int64_t> n_blocks(S);
    int64_t total_blocks = 0;
    for (size_t s = 0; s < S; ++s) {
      seq_starts.push_back(seq_starts.back() + c.q_lens[s]);
      const int64_t L = c.ctx_lens[s] + c.q_lens[s];
      n_blocks[s] = (L + c.block_size - 1) / c.block_size;
      total_blocks += n_blocks[s];
      max_blocks = std::max(max_blocks, n_blocks[s]);
      k_dense.push_back(random_floats(rng, size_t(L * row)));
      v_dense.push_back(random_floats(rng, size_t(L * row)));
      for (auto* dense : {&k_dense.back(), &v_dense.back()}) {
        for (float& x : *dense) x = round_to(c.kv_dtype, x);
      }
    }
    T = seq_starts.back();
    max_blocks += 1;    // a padding column, never read
    total_blocks += 3;  // spare blocks nobody owns
    std::vector<int32_t> perm(static_cast<size_t>(total_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    block_tables.assign(S * size_t(max_blocks), -1);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    k_cache.assign(size_t(total_blocks * c.block_size * row), nan);
    v_cache.assign(k_cache.size(), nan);
    size_t next = 0;
    for (size_t s = 0; s < S; ++s) {
      for (int64_t b = 0; b < n_blocks[s]; ++b) block_tables[s * size_t(max_blocks) + size_t(b)] = perm[next++];
      const int64_t L = c.ctx_lens[s] + c.q_lens[s];
      for (int64_t j = 0; j < L; ++j) {
        const int64_t slot =
            int64_t(block_tables[s * size_t(max_blocks) + size_t(j / c.block_size)]) * c.block_size + j % c.block_size;
        std::copy_n(k_dense[s].begin() + j * row, row, k_cache.begin() + slot * row);
        std::copy_n(v_dense[s].begin() + j * row, row, v_cache.begin() + slot * row);
      }
    }
    q = random_floats(rng, size_t(T * c.Hq * c.Dh), -2.0f, 2.0f);
    if (c.kv_dtype != DType::kF32) {
      // NaN stays NaN in both types.
      for (float x : k_cache) k_cache16.push_back(c.kv_dtype == DType::kBF16 ? f32_to_bf16(x) : f32_to_f16(x));
      for (float x : v_cache) v_cache16.push_back(c.kv_dtype == DType::kBF16 ? f32_to_bf16(x) : f32_to_f16(x));
    }
    // Built slot-major above; the kernels read each block in the CPU's order.
    const cpu::KvOrder order{c.block_size, c.Hkv, c.Dh};
    const int64_t slots = total_blocks * c.block_size;
    auto reorder = [&](auto& cache, bool keys) {
      auto slot_major = cache;
      cpu::kv_to_cpu_order(slot_major.data(), cache.data(), sizeof(cache[0]), slots, order, keys);
    };
    reorder(k_cache, true), reorder(v_cache, false);
    if (c.kv_dtype != DType::kF32) reorder(k_cache16, true), reorder(v_cache16, false);
  }

  float scale() const { return 1.0f / std::sqrt(float(c.Dh)); }

  std::vector<float> run(Isa isa, ThreadPool* pool) const {
    std::vector<float> out(q.size(), std::numeric_limits<float>::quiet_NaN());
    cpu::AttentionArgs a{};
    a.q = q.data();
    a.out = out.data();
    a.T = T;
    a.Hq = c.Hq;
    a.Hkv = c.Hkv;
    a.Dh = c.Dh;
    a.kv_dtype = c.kv_dtype;
    a.k_cache = c.kv_dtype == DType::kF32 ? static_cast<const void*>(k_cache.data()) : k_cache16.data();
    a.v_cache = c.kv_dtype == DType::kF32 ? static_cast<const void*>(v_cache.data()) : v_cache16.data();
    a.block_size = c.block_size;
    a.seq_starts = seq_starts.data();
    a.context_lens = c.ctx_lens.data();
    a.block_tables = block_tables.data();
    a.n_seqs = int64_t(c.q_lens.size());
    a.max_blocks = max_blocks;
    a.scale = scale();
    a.window = c.window;
    cpu::attention(isa, pool, a);
    return out;
  }

  // Dense reference in double: full softmax over the allowed keys of the un-paged K/V.
  std::vector<double> reference() const {
    std::vector<double> out(q.size());
    const int64_t group = c.Hq / c.Hkv;
    for (size_t s = 0; s < c.q_lens.size(); ++s) {
      for (int64_t i = 0; i < c.q_lens[s]; ++i) {
        const int64_t t = seq_starts[s] + i;
        const int64_t pos = c.ctx_lens[s] + i;  // this token's index in the sequence
        for (int64_t h = 0; h < c.Hq; ++h) {
          const int64_t kvh = h / group;
          const float* qv = q.data() + (t * c.Hq + h) * c.Dh;
          std::vector<int64_t> keys;
          for (int64_t j = 0; j <= pos; ++j) {
            if (c.window <= 0 || pos - j < c.window) keys.push_back(j);
          }
          std::vector<double> p(keys.size());
          double mx = -std::numeric_limits<double>::infinity();
          for (size_t k = 0; k < keys.size(); ++k) {
            p[k] = dot_ref(qv, k_dense[s].data() + (keys[k] * c.Hkv + kvh) * c.Dh, c.Dh) * double(scale());
            mx = std::max(mx, p[k]);
          }
          double sum = 0.0;
          for (double& v : p) sum += v = std::exp(v - mx);
          double* o = out.data() + (t * c.Hq + h) * c.Dh;
          for (size_t k = 0; k < keys.size(); ++k) {
            const float* vv = v_dense[s].data() + (keys[k] * c.Hkv + kvh) * c.Dh;
            for (int64_t d = 0; d < c.Dh; ++d) o[d] += p[k] / sum * double(vv[d]);
          }
        }
      }
    }
    return out;
  }
};

TEST(ops_kernel, Attention) {
  std::mt19937 rng(11);
  const int64_t head_dims[] = {1, 3, 8, 16, 17, 33, 64, 128};  // 64, 128: the in-register AVX-512 path
  std::uniform_int_distribution<size_t> pick_dh(0, std::size(head_dims) - 1);
  std::uniform_int_distribution<int> n_seqs(1, 4), q_len(1, 6), ctx_len(0, 30), kind(0, 2);
  int cases = 0;
  for (int64_t group : {1, 2, 4}) {
    for (int64_t block_size : {1, 3, 16}) {
      for (int32_t window : {0, 1, 2, 5, 1000}) {
        AttentionCase c;
        c.Hkv = 1 + (cases % 2);
        c.Hq = c.Hkv * group;
        c.Dh = head_dims[pick_dh(rng)];
        c.block_size = block_size;
        c.window = window;
        c.kv_dtype = std::array{DType::kF32, DType::kF16, DType::kBF16}[size_t(cases % 3)];
        const int S = n_seqs(rng);
        for (int s = 0; s < S; ++s) {
          switch (kind(rng)) {
            case 0: c.q_lens.push_back(q_len(rng) + 3), c.ctx_lens.push_back(0); break;          // fresh prefill
            case 1: c.q_lens.push_back(1), c.ctx_lens.push_back(ctx_len(rng) + 1); break;        // decode
            default: c.q_lens.push_back(q_len(rng)), c.ctx_lens.push_back(ctx_len(rng)); break;  // chunked prefill
          }
        }
        ++cases;
        const AttentionSetup setup(c, rng);
        const std::vector<float> ref = setup.run(Isa::kScalar, nullptr);
        expect_close(ref, setup.reference(), 1e-5, kRtol, c.str() + " scalar vs dense reference");
        for (Isa isa : all_isas()) {
          for (ThreadPool* pool : pools()) {
            const std::string what = c.str() + " " + std::string(cpu::isa_name(isa)) + " " + pool_name(pool);
            const std::vector<float> got = setup.run(isa, pool);
            // Every (row, head) is computed independently: the scalar kernel is bit-identical with threads.
            expect_close(got, ref, isa == Isa::kScalar ? 0.0 : 1e-5, isa == Isa::kScalar ? 0.0 : kRtol, what);
          }
        }
      }
    }
  }
}

// The scalar kernel against the dense reference, then every SIMD ISA, with and without
// threads, against the scalar kernel.
void expect_simd_matches_scalar(const AttentionCase& c, std::mt19937& rng) {
  const AttentionSetup setup(c, rng);
  const std::vector<float> ref = setup.run(Isa::kScalar, nullptr);
  expect_close(ref, setup.reference(), 1e-5, kRtol, c.str() + " scalar vs dense reference");
  for (Isa isa : simd_isas()) {
    for (ThreadPool* pool : pools()) {
      expect_close(setup.run(isa, pool), ref, 1e-5, kRtol,
                   c.str() + " " + std::string(cpu::isa_name(isa)) + " " + pool_name(pool));
    }
  }
}

// A long decode context (several hundred keys) with a window, in one sequence among short ones.
TEST(ops_kernel, AttentionLongContext) {
  std::mt19937 rng(12);
  for (int32_t window : {0, 128, 700}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) {
      expect_simd_matches_scalar({8, 2, 64, 16, window, {1, 5, 1}, {600, 0, 37}, kv}, rng);
    }
  }
}

// Decode rows split into spans of positions on AVX-512 (one span per thread where the context
// has room), merged afterwards: two rows of 1500 and 900 keys (Dh 128, query heads in pairs);
// one row of 2000 keys under a window of 1000 in blocks of 3 (spans start mid-block, Dh 64, one
// query head per KV head); a row in a batch with prefill rows; blocks of 32 and 40; the last
// row of a prompt.
TEST(ops_kernel, AttentionDecodeSpans) {
  std::mt19937 rng(15);
  expect_simd_matches_scalar({4, 2, 128, 16, 0, {1, 1}, {1500, 900}, DType::kF16}, rng);
  expect_simd_matches_scalar({3, 3, 64, 3, 1000, {1}, {2000}, DType::kBF16}, rng);
  expect_simd_matches_scalar({8, 2, 128, 16, 0, {7, 1, 20}, {0, 777, 300}, DType::kF32}, rng);
  // Blocks longer than the kernel's 16 rows, a multiple of them and not.
  expect_simd_matches_scalar({4, 2, 128, 32, 0, {1}, {700}, DType::kF16}, rng);
  expect_simd_matches_scalar({4, 4, 64, 40, 300, {1, 1}, {650, 90}, DType::kBF16}, rng);
  // Prompts of 17 and 33 rows: a lone last row after the tiles of 16 goes as a decode row.
  expect_simd_matches_scalar({4, 2, 64, 16, 0, {17, 33}, {0, 500}, DType::kF16}, rng);
  // The K pass's query heads four, two and one at a time (groups of 2, 4, 1, 16, 7 and 10; spans
  // that start mid-block under a window; runs of 3 rows, an odd end).
  expect_simd_matches_scalar({16, 8, 128, 16, 0, {1, 1}, {700, 45}, DType::kF16}, rng);
  expect_simd_matches_scalar({32, 8, 64, 16, 300, {1}, {650}, DType::kBF16}, rng);
  expect_simd_matches_scalar({16, 16, 64, 3, 0, {1}, {400}, DType::kF32}, rng);
  expect_simd_matches_scalar({16, 1, 128, 16, 0, {1, 5}, {333, 0}, DType::kF16}, rng);
  expect_simd_matches_scalar({28, 4, 128, 16, 0, {1}, {500}, DType::kF16}, rng);
  expect_simd_matches_scalar({20, 2, 64, 16, 100, {1}, {300}, DType::kBF16}, rng);
  // Long spans (with 2 and 3 threads too): query heads in pairs and alone, blocks of 16 and of 3
  // (runs of an odd length), a window.
  expect_simd_matches_scalar({16, 8, 128, 16, 0, {1, 1}, {3300, 100}, DType::kF16}, rng);
  expect_simd_matches_scalar({4, 4, 64, 3, 0, {1}, {3500}, DType::kBF16}, rng);
  expect_simd_matches_scalar({8, 2, 128, 16, 3200, {1}, {3401}, DType::kF32}, rng);
}

// Prefill long enough for full 16-row tiles and several 16-key blocks per row, fresh and chunked
// (rows starting mid-block), with windows shorter than a block and longer than one.
TEST(ops_kernel, AttentionLongPrefill) {
  std::mt19937 rng(14);
  for (int64_t Dh : {64, 128}) {
    for (int64_t group : {1, 2, 4}) {
      for (int32_t window : {0, 7, 33}) {
        const DType kv = std::array{DType::kF32, DType::kF16, DType::kBF16}[size_t(window % 3)];
        expect_simd_matches_scalar({2 * group, 2, Dh, window == 7 ? 3 : 16, window, {40, 1, 23}, {0, 9, 30}, kv}, rng);
      }
    }
  }
}

// ---------------------------------------------------------------- kv_write

// Rows written to slots land where KvOrder says, rounded as store_f32_as rounds, every ISA the
// same: against the slot-major cache put in the CPU's order by kv_to_cpu_order.
// Head dims 24 and 300 (kv_write rounds K in pieces of 256).
TEST(ops_kernel, KvWriteStoresInTheCpuOrder) {
  std::mt19937 rng(16);
  for (const int64_t Dh : {24, 300}) {
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
      const int64_t blocks = 3, bs = 5, Hkv = 2, T = 4, row = Hkv * Dh;
      const std::vector<float> k = random_floats(rng, size_t(T * row)), v = random_floats(rng, size_t(T * row));
      const std::vector<int32_t> slots = {14, 0, 7, 5};
      const cpu::KvOrder order{bs, Hkv, Dh};
      const size_t elem = dtype_size(type), bytes = size_t(blocks * bs * row) * elem;
      std::vector<char> want_k(bytes, 0), want_v(bytes, 0);
      {
        std::vector<char> slot_k(bytes, 0), slot_v(bytes, 0);
        for (int64_t t = 0; t < T; ++t) {
          cpu::store_f32_as(Isa::kScalar, k.data() + t * row, type,
                            slot_k.data() + size_t(slots[size_t(t)] * row) * elem, row);
          cpu::store_f32_as(Isa::kScalar, v.data() + t * row, type,
                            slot_v.data() + size_t(slots[size_t(t)] * row) * elem, row);
        }
        cpu::kv_to_cpu_order(slot_k.data(), want_k.data(), elem, blocks * bs, order, true);
        cpu::kv_to_cpu_order(slot_v.data(), want_v.data(), elem, blocks * bs, order, false);
      }
      for (Isa isa : all_isas()) {
        std::vector<char> got_k(bytes, 0), got_v(bytes, 0);
        cpu::kv_write(isa, {k.data(), v.data(), T, slots.data(), blocks * bs, order, got_k.data(), got_v.data(), type});
        EXPECT_EQ(got_k, want_k) << dtype_name(type) << " " << cpu::isa_name(isa) << " Dh=" << Dh;
        EXPECT_EQ(got_v, want_v) << dtype_name(type) << " " << cpu::isa_name(isa) << " Dh=" << Dh;
      }
    }
  }
}

// f32 -> f16/bf16 as the cache stores it: every ISA rounds exactly as f32_to_f16 / f32_to_bf16
// do, on random values and on the edges (ties, subnormals, overflow, infinities, NaN).
TEST(ops_kernel, StoreF32As) {
  std::mt19937 rng(13);
  std::vector<float> x = random_floats(rng, 1000, -70000.0f, 70000.0f);
  for (float v : random_floats(rng, 200, -1e-3f, 1e-3f)) x.push_back(v);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.0f,
                  65519.0f, 65520.0f, 6.0e-8f, 3.0e-8f, 1e-40f, -1e-45f, 3.4e38f, inf, -inf,
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(v);
  }
  for (DType to : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = to == DType::kF16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
    for (Isa isa : all_isas()) {
      for (int64_t n : kSizes) {
        std::vector<uint16_t> got(size_t(n) + 1, 0xabcd);
        cpu::store_f32_as(isa, x.data() + x.size() - size_t(n), to, got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t w = want[x.size() - size_t(n) + size_t(i)];
          const bool both_nan = to == DType::kF16 ? (w & 0x7fff) > 0x7c00 && (got[size_t(i)] & 0x7fff) > 0x7c00
                                                  : (w & 0x7fff) > 0x7f80 && (got[size_t(i)] & 0x7fff) > 0x7f80;
          ASSERT_TRUE(got[size_t(i)] == w || both_nan) << dtype_name(to) << " " << cpu::isa_name(isa) << " n=" << n
                                                       << " x=" << x[x.size() - size_t(n) + size_t(i)] << ": got 0x"
                                                       << std::hex << got[size_t(i)] << " want 0x" << w;
        }
        EXPECT_EQ(got[size_t(n)], 0xabcd) << "wrote past n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace hearth
