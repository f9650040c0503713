// The sampler against straightforward scalar references written here: processed logits by
// hand, the kept set and its distribution by a full sort, logprobs by a double log_softmax.
// Distributions are checked on many seeded draws (fixed seeds: deterministic, chi-square bound).
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/ops.h"
#include "runtime/decode_graphs.h"

// Counting allocator, to check that sample() allocates nothing in steady state. Not under
// AddressSanitizer, which has its own operator new.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEARTH_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define HEARTH_TEST_ASAN 1
#endif

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

#ifndef HEARTH_TEST_ASAN
// Out of line, so that the compiler does not see free() meet operator new (-Wmismatched-new-delete).
[[gnu::noinline]] void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
[[gnu::noinline]] void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return ::operator new(n, t); }
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#endif

namespace hearth {
namespace {

// ---- References -------------------------------------------------------------------------

// The sampler as it was before this extension (temperature, top-k, top-p), verbatim in
// behaviour: the new one must draw the same tokens with the new fields at their defaults.
class LegacySampler {
 public:
  LegacySampler(float temperature, int64_t top_k, float top_p, uint64_t seed)
      : t_(temperature), k_(top_k), p_(top_p), rng_(seed) {}
  int32_t sample(const float* logits, int64_t vocab) {
    if (t_ == 0.0f) {
      int64_t best = 0;
      for (int64_t i = 1; i < vocab; ++i)
        if (logits[i] > logits[best]) best = i;
      return static_cast<int32_t>(best);
    }
    std::vector<std::pair<float, int32_t>> s(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) s[static_cast<size_t>(i)] = {logits[i] / t_, static_cast<int32_t>(i)};
    const size_t k = k_ > 0 ? std::min<size_t>(static_cast<size_t>(k_), s.size()) : s.size();
    auto by_logit = [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    std::partial_sort(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end(), by_logit);
    s.resize(k);
    const float mx = s.front().first;
    double sum = 0;
    for (auto& [v, id] : s) {
      v = std::exp(v - mx);
      sum += v;
    }
    size_t keep = s.size();
    if (p_ < 1.0f) {
      double cum = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        cum += s[i].first / sum;
        if (cum >= p_) {
          keep = i + 1;
          break;
        }
      }
    }
    double kept_sum = 0;
    for (size_t i = 0; i < keep; ++i) kept_sum += s[i].first;
    const double r = std::uniform_real_distribution<double>(0.0, kept_sum)(rng_);
    double acc = 0;
    for (size_t i = 0; i < keep; ++i) {
      acc += s[i].first;
      if (r < acc) return s[i].second;
    }
    return s[keep - 1].second;
  }

 private:
  float t_;
  int64_t k_;
  float p_;
  std::mt19937_64 rng_;
};

// Logit processors by hand: bias, repetition (distinct tokens of the window), presence and
// frequency (generated tokens only).
std::vector<float> reference_processed(std::vector<float> l, const SamplingParams& p,
                                       const std::vector<int32_t>& tokens, size_t n_prompt) {
  for (const auto& [id, b] : p.logit_bias) l[static_cast<size_t>(id)] += b;
  if (p.repetition_penalty != 1.0f) {
    const size_t ctx = static_cast<size_t>(p.repetition_context_size);
    const size_t start = ctx == 0 || ctx >= tokens.size() ? 0 : tokens.size() - ctx;
    const std::set<int32_t> seen(tokens.begin() + static_cast<std::ptrdiff_t>(start), tokens.end());
    for (int32_t t : seen) {
      float& x = l[static_cast<size_t>(t)];
      x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    }
  }
  std::map<int32_t, int> count;
  for (size_t i = n_prompt; i < tokens.size(); ++i) count[tokens[i]]++;
  for (const auto& [t, c] : count)
    l[static_cast<size_t>(t)] -=
        p.presence_penalty * (c > 0 ? 1.0f : 0.0f) + p.frequency_penalty * static_cast<float>(c);
  return l;
}

std::vector<double> reference_log_softmax(const std::vector<float>& l) {
  double mx = -INFINITY;
  for (float x : l) mx = std::max(mx, double(x));
  double z = 0;
  for (float x : l) z += std::exp(double(x) - mx);
  std::vector<double> out;
  for (float x : l) out.push_back(double(x) - mx - std::log(z));
  return out;
}

// The distribution a draw follows: temperature, top-k, top-p (on the renormalised top-k), min-p
// (relative to the best token, tempered), by a full sort.
std::vector<double> reference_probs(const std::vector<float>& l, const SamplingParams& p) {
  const size_t v = l.size();
  std::vector<float> s(v);
  for (size_t i = 0; i < v; ++i) s[i] = l[i] / p.temperature;
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
  const size_t k = p.top_k > 0 ? std::min<size_t>(static_cast<size_t>(p.top_k), v) : v;
  const double smax = s[static_cast<size_t>(order[0])];
  std::vector<double> w(v, 0.0);
  double z = 0;
  for (size_t r = 0; r < k; ++r) {
    const size_t i = static_cast<size_t>(order[r]);
    w[i] = std::exp(double(s[i]) - smax);
    z += w[i];
  }
  std::vector<bool> keep(v, false);
  double cum = 0;
  for (size_t r = 0; r < k; ++r) {
    const size_t i = static_cast<size_t>(order[r]);
    const bool min_p_ok = double(s[i]) - smax >= std::log(double(p.min_p));
    if (min_p_ok) keep[i] = true;
    cum += w[i] / z;
    if (p.top_p < 1.0f && cum >= p.top_p) break;
  }
  std::vector<double> probs(v, 0.0);
  double kept = 0;
  for (size_t i = 0; i < v; ++i)
    if (keep[i]) kept += w[i];
  for (size_t i = 0; i < v; ++i)
    if (keep[i]) probs[i] = w[i] / kept;
  return probs;
}

// Draws n tokens and checks them against `expected`: never a token of probability 0, and a
// chi-square statistic under its 0.999 quantile (Wilson-Hilferty). Seeds are fixed, so this
// is deterministic.
void expect_distribution(Sampler& s, const std::vector<float>& logits, const std::vector<int32_t>& tokens,
                         size_t n_prompt, const std::vector<double>& expected, int n = 40000) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i)
    counts[static_cast<size_t>(s.sample(logits.data(), static_cast<int64_t>(logits.size()), tokens, n_prompt))]++;
  // Bins expected to get fewer than 10 draws are pooled into one.
  double chi2 = 0, pooled_e = 0, pooled_o = 0;
  int df = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = expected[i] * n;
    if (e < 10) {
      pooled_e += e;
      pooled_o += counts[i];
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  if (pooled_e > 0) {
    chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 10.0);
    ++df;
  }
  if (df <= 0) return;  // one possible token: checked above
  const double a = 2.0 / (9.0 * df);
  const double q = df * std::pow(1 - a + 3.09 * std::sqrt(a), 3);
  EXPECT_LT(chi2, q) << "df " << df;
}

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(n);
  for (float& x : l) x = d(g);
  return l;
}

// ---- Tests ------------------------------------------------------------------------------

TEST(Sampler, DefaultsDrawExactlyAsBefore) {
  const std::vector<float> logits = random_logits(1000, 7);
  const std::vector<int32_t> history{1, 2, 3, 2, 1, 999};
  for (float t : {0.0f, 0.5f, 1.0f, 1.3f})
    for (int64_t k : {0, 1, 5, 50, 5000})
      for (float p : {1.0f, 0.9f, 0.5f, 0.01f}) {
        LegacySampler legacy(t, k, p, 11);
        Sampler two_arg(SamplingParams{.temperature = t, .top_k = k, .top_p = p, .seed = 11});
        Sampler with_history(SamplingParams{.temperature = t, .top_k = k, .top_p = p, .seed = 11});
        TokenLogprobs lp;
        for (int i = 0; i < 100; ++i) {
          const int32_t want = legacy.sample(logits.data(), 1000);
          ASSERT_EQ(two_arg.sample(logits.data(), 1000), want) << t << " " << k << " " << p;
          ASSERT_EQ(with_history.sample(logits.data(), 1000, history, 3, &lp, 5), want) << t << " " << k << " " << p;
        }
      }
}

// A large vocab with many ties (quantised logits), both zeros and -inf: the sort is a radix sort
// there, and must order exactly as the comparison sort did (ties by lower id, -0 == +0).
std::vector<float> tied_logits(size_t n) {
  std::vector<float> l = random_logits(n, 77, 2.0f);
  for (float& x : l) x = std::round(x * 2.0f) / 2.0f;
  for (size_t i = 0; i < n; i += 97) l[i] = (i / 97) % 2 ? -0.0f : 0.0f;
  for (size_t i = 5; i < n; i += 1013) l[i] = -INFINITY;
  return l;
}

TEST(Sampler, LargeVocabDrawsExactlyAsBefore) {
  const std::vector<float> logits = tied_logits(20000);
  for (float t : {1.0f, 0.6f})
    for (int64_t k : {0, 300, 5000, 19999})
      for (float p : {1.0f, 0.9f, 0.3f}) {
        LegacySampler legacy(t, k, p, 5);
        Sampler s(SamplingParams{.temperature = t, .top_k = k, .top_p = p, .seed = 5});
        for (int i = 0; i < 30; ++i) ASSERT_EQ(s.sample(logits.data(), 20000), legacy.sample(logits.data(), 20000));
      }
}

TEST(Sampler, LargeVocabZerosTieByIdWhateverTheirSign) {
  // All logits +0 or -0: equal, so the kept tokens are the lowest ids.
  std::vector<float> zeros(6000);
  for (size_t i = 0; i < zeros.size(); ++i) zeros[i] = i % 3 ? 0.0f : -0.0f;
  for (auto [k, p] : {std::pair<int64_t, float>{300, 1.0f}, {0, 0.0499f}, {1000, 0.299f}}) {
    LegacySampler legacy(1.0f, k, p, 9);
    Sampler s(SamplingParams{.temperature = 1.0f, .top_k = k, .top_p = p, .seed = 9});
    Sampler m(SamplingParams{.temperature = 1.0f, .top_k = k, .top_p = p, .min_p = 0.5f, .seed = 9});
    for (int i = 0; i < 200; ++i) {
      const int32_t t = s.sample(zeros.data(), 6000);
      ASSERT_EQ(t, legacy.sample(zeros.data(), 6000));
      ASSERT_LT(t, 300);
      ASSERT_LT(m.sample(zeros.data(), 6000), 300);
    }
  }
}

TEST(Sampler, LargeVocabMinPFollowsTheReference) {
  // Thousands of survivors (radix-sorted), top-k cutting through a tie level, top-p on top.
  const std::vector<float> l = tied_logits(12000);
  for (int64_t k : {0, 5000}) {
    const SamplingParams p{.temperature = 1.0f, .top_k = k, .top_p = 0.99f, .min_p = 0.0005f, .seed = 31};
    const std::vector<double> want = reference_probs(l, p);
    // Mass per logit level (a level's tokens are exchangeable but for the cuts), and support.
    std::map<float, double> want_level, got_level;
    for (size_t i = 0; i < l.size(); ++i) want_level[l[i]] += want[i];
    Sampler s(p);
    const int n = 5000;
    for (int i = 0; i < n; ++i) {
      const auto t = static_cast<size_t>(s.sample(l.data(), 12000));
      ASSERT_GT(want[t], 0) << "token " << t << " (logit " << l[t] << ") is outside the kept set";
      got_level[l[t]] += 1.0 / n;
    }
    for (const auto& [level, w] : want_level)
      EXPECT_NEAR(got_level[level], w, 5 * std::sqrt(w * (1 - w) / n) + 1e-9) << "level " << level;
    const float best = *std::max_element(l.begin(), l.end());
    const auto survivors = std::count_if(l.begin(), l.end(), [&](float x) { return x - best >= std::log(p.min_p); });
    EXPECT_GT(survivors, 4096) << "the radix path is exercised";
  }
}

TEST(Sampler, ProcessedLogitsMatchTheReference) {
  // Through the logprobs of every token (top_n = vocab): log_softmax of the processed logits.
  const std::vector<float> logits{1.5f, -0.5f, 0.0f, 2.0f, -2.0f, 0.7f, 3.0f, -1.0f};
  const std::vector<int32_t> tokens{0, 1, 1, 4, 5, 3, 3, 1, 3, 7};  // prompt: the first 4
  const size_t n_prompt = 4;
  const std::vector<SamplingParams> cases{
      {.logit_bias = {{2, 5.0f}, {6, -100.0f}, {2, 1.0f}}},  // a repeated id adds up
      {.repetition_penalty = 1.3f},                          // window 20 covers everything
      {.repetition_penalty = 1.3f, .repetition_context_size = 3},
      {.repetition_penalty = 0.7f, .repetition_context_size = 0},
      {.presence_penalty = 0.5f},
      {.frequency_penalty = 0.25f},
      {.presence_penalty = -1.0f, .frequency_penalty = 2.0f},
      {.repetition_penalty = 1.2f,
       .repetition_context_size = 5,
       .presence_penalty = 0.4f,
       .frequency_penalty = 0.3f,
       .logit_bias = {{4, 3.0f}, {1, -0.5f}}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    for (float t : {0.0f, 0.8f}) {
      SamplingParams p = cases[c];
      p.temperature = t;
      Sampler s(p);
      const std::vector<double> want = reference_log_softmax(reference_processed(logits, p, tokens, n_prompt));
      TokenLogprobs lp;
      const int32_t tok = s.sample(logits.data(), 8, tokens, n_prompt, &lp, 20);
      ASSERT_EQ(lp.top.size(), 8u);
      for (const auto& [id, v] : lp.top) EXPECT_NEAR(v, want[static_cast<size_t>(id)], 1e-5) << "case " << c;
      EXPECT_NEAR(lp.logprob, want[static_cast<size_t>(tok)], 1e-5);
      if (t == 0.0f) {
        EXPECT_EQ(tok, std::max_element(want.begin(), want.end()) - want.begin()) << "case " << c;
      }
    }
  }
}

// The edits a device applies (ops::edit_logits on the CPU) are the hand reference's processors
// bit for bit, on awkward values too (-0, NaN, inf, denormals, the window's edge); a repeated
// logit_bias id adds the sum of its biases.
TEST(Sampler, EditsGiveTheReferenceProcessedLogitsBitForBit) {
  std::vector<float> logits = random_logits(300, 21);
  logits[0] = -0.0f, logits[1] = 0.0f, logits[2] = NAN, logits[3] = -INFINITY, logits[4] = 1e-40f;
  logits[5] = -1e-40f, logits[6] = INFINITY;
  std::vector<int32_t> tokens;
  std::mt19937 rng(5);
  for (int i = 0; i < 60; ++i) tokens.push_back(static_cast<int32_t>(rng() % 12));  // many repeats
  const size_t n_prompt = 25;
  const std::vector<SamplingParams> cases{
      {.repetition_penalty = 1.3f},
      {.repetition_penalty = 0.6f, .repetition_context_size = 0},
      {.presence_penalty = 0.5f, .frequency_penalty = -0.75f},
      {.repetition_penalty = 1.1f,
       .repetition_context_size = 7,
       .presence_penalty = -2.0f,
       .frequency_penalty = 0.3f,
       .logit_bias = {{0, 0.0f}, {1, -0.0f}, {2, 1.0f}, {200, 7.5f}, {5, -3.0f}}},
  };
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  Context ctx{nullptr, kCpu};
  for (size_t c = 0; c < cases.size(); ++c) {
    Sampler s(cases[c]);
    const std::vector<float> want = reference_processed(logits, cases[c], tokens, n_prompt);
    Tensor x = Tensor::from_f32({1, 300}, logits.data());
    const std::span<const LogitEdit> edits = s.edits(300, tokens, n_prompt);
    ops::edit_logits(ctx, x, logit_edits(edits));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(bits(x.data<float>()[i]), bits(want[i])) << "case " << c << ", token " << i;
    std::set<int32_t> ids;
    for (const LogitEdit& e : edits) EXPECT_TRUE(ids.insert(e.id).second) << "one edit per token";
  }
  Sampler none(SamplingParams{.temperature = 1.0f});
  EXPECT_TRUE(none.edits(300, tokens, n_prompt).empty());
  Sampler repeated(SamplingParams{.logit_bias = {{9, 0.1f}, {4, 1.0f}, {9, 0.2f}}});
  const std::span<const LogitEdit> r = repeated.edits(300, {}, 0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].id, 9);
  EXPECT_EQ(r[0].bias, 0.1f + 0.2f);
}

// Greedy takes the first maximum exactly as a walk keeping the best so far: ties by lower id
// (-0 == +0), NaNs never win (a NaN at 0 is kept), -inf, lengths around the 16 lanes and of many
// blocks of them, where ties fall in different lanes.
TEST(Sampler, GreedyIsTheFirstMaximumOfAScalarWalk) {
  std::mt19937 rng(21);
  const std::vector<float> specials{0.0f, -0.0f, 1.0f, -INFINITY, INFINITY, NAN};
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 1 + rng() % (trial % 2 == 0 ? 70 : 400);
    std::vector<float> l(n);
    for (float& v : l) {
      const uint32_t pick = rng() % 8;
      v = pick < specials.size() ? specials[pick] : static_cast<float>(static_cast<int>(rng() % 5) - 2);
    }
    if (trial % 4 == 0) l[rng() % n] = NAN;
    size_t best = 0;
    for (size_t i = 1; i < n; ++i) {
      if (l[i] > l[best]) best = i;
    }
    EXPECT_EQ(Sampler(SamplingParams{}).sample(l.data(), static_cast<int64_t>(n), {}, 0), static_cast<int32_t>(best))
        << "trial " << trial;
  }
}

TEST(Sampler, GreedyWithPenaltiesPicksTheExpectedToken) {
  const std::vector<float> pos{2.0f, 1.9f, 0.5f};
  const std::vector<int32_t> hist{0};
  EXPECT_EQ(Sampler(SamplingParams{}).sample(pos.data(), 3, hist, 1), 0);
  // 2.0 / 1.2 = 1.67 < 1.9
  EXPECT_EQ(Sampler(SamplingParams{.repetition_penalty = 1.2f}).sample(pos.data(), 3, hist, 1), 1);
  // Negative logits are multiplied: -1.0 * 1.2 = -1.2 < -1.1.
  const std::vector<float> neg{-1.0f, -1.1f, -3.0f};
  EXPECT_EQ(Sampler(SamplingParams{.repetition_penalty = 1.2f}).sample(neg.data(), 3, hist, 1), 1);
  // Outside the window: not penalised (token 0 is 3 tokens back, the window is 2).
  const std::vector<int32_t> old{0, 2, 2};
  EXPECT_EQ(
      Sampler(SamplingParams{.repetition_penalty = 1.2f, .repetition_context_size = 2}).sample(pos.data(), 3, old, 3),
      0);
  EXPECT_EQ(
      Sampler(SamplingParams{.repetition_penalty = 1.2f, .repetition_context_size = 0}).sample(pos.data(), 3, old, 3),
      1);
  // Presence / frequency see generated tokens only: token 0 in the prompt is not penalised.
  EXPECT_EQ(Sampler(SamplingParams{.presence_penalty = 0.5f}).sample(pos.data(), 3, old, 1), 0);
  EXPECT_EQ(Sampler(SamplingParams{.presence_penalty = 0.5f}).sample(pos.data(), 3, old, 0), 1);
  // Frequency counts: token 0 generated 3 times, token 1 once: 2.0 - 0.3*3 = 1.1 < 1.9 - 0.3 = 1.6.
  const std::vector<int32_t> gen{0, 0, 1, 0};
  EXPECT_EQ(Sampler(SamplingParams{.frequency_penalty = 0.3f}).sample(pos.data(), 3, gen, 0), 1);
  // Presence counts once: 2.0 - 0.15 vs 1.9 - 0.15.
  EXPECT_EQ(Sampler(SamplingParams{.presence_penalty = 0.15f}).sample(pos.data(), 3, gen, 0), 0);
  // A negative presence penalty encourages repeats.
  const std::vector<int32_t> one{1};
  EXPECT_EQ(Sampler(SamplingParams{.presence_penalty = -0.5f}).sample(pos.data(), 3, one, 0), 1);
}

TEST(Sampler, LogitBiasBansAndForces) {
  const std::vector<float> flat{0.0f, 0.1f, 0.2f, 0.3f, 0.4f};
  Sampler ban(SamplingParams{.temperature = 1.0f, .logit_bias = {{4, -100.0f}}, .seed = 5});
  Sampler force(SamplingParams{.temperature = 1.0f, .logit_bias = {{1, 100.0f}}, .seed = 5});
  for (int i = 0; i < 5000; ++i) {
    EXPECT_NE(ban.sample(flat.data(), 5), 4);
    EXPECT_EQ(force.sample(flat.data(), 5), 1);
  }
  EXPECT_EQ(Sampler(SamplingParams{.logit_bias = {{4, -100.0f}}}).sample(flat.data(), 5), 3);
  EXPECT_EQ(Sampler(SamplingParams{.logit_bias = {{0, 100.0f}}}).sample(flat.data(), 5), 0);
}

TEST(Sampler, CallersLogitsAreNotWritten) {
  const std::vector<float> logits = random_logits(50, 3);
  std::vector<float> copy = logits;
  const std::vector<int32_t> hist{1, 2, 3, 4, 1, 2};
  Sampler s(SamplingParams{.temperature = 0.9f,
                           .min_p = 0.05f,
                           .repetition_penalty = 1.5f,
                           .presence_penalty = 1.0f,
                           .frequency_penalty = 1.0f,
                           .logit_bias = {{7, 3.0f}}});
  TokenLogprobs lp;
  for (int i = 0; i < 10; ++i) s.sample(copy.data(), 50, hist, 2, &lp, 5);
  EXPECT_EQ(copy, logits);
}

TEST(Sampler, MinPKeepsTokensWithinAFactorOfTheBest) {
  const std::vector<float> l{3.0f, 2.0f, 1.0f, 0.0f, -5.0f};
  // min_p 0.3 on the tempered distribution: ratios to the best are exp(-d / T) for d = 1, 2, 3.
  for (float t : {0.5f, 1.0f, 2.0f}) {
    SamplingParams p{.temperature = t, .min_p = 0.3f, .seed = 17};
    const std::vector<double> want = reference_probs(l, p);
    const size_t kept = static_cast<size_t>(std::count_if(want.begin(), want.end(), [](double x) { return x > 0; }));
    EXPECT_EQ(kept, t == 0.5f ? 1u : t == 1.0f ? 2u : 3u) << "the reference itself, T " << t;
    Sampler s(p);
    expect_distribution(s, l, {}, 0, want);
  }
  // min_p 1 keeps only the best (and ties with it, by logit).
  const std::vector<float> tie{1.0f, 2.0f, 2.0f, 0.5f};
  SamplingParams one{.temperature = 1.0f, .min_p = 1.0f, .seed = 2};
  Sampler s1(one);
  expect_distribution(s1, tie, {}, 0, {0, 0.5, 0.5, 0});
}

TEST(Sampler, TopPNormalisesOverTheTopKSetNotTheMinPSurvivors) {
  // Ratios to the best: e^-1 = .37 for tokens 1-3, e^-1.2 = .30 for tokens 4-9. min_p 1/3 keeps
  // tokens 0-3. Top-k 7's set (0-6) has mass 1 + 3(.37) + 3(.30) = 3.01, so p(0) = .33 >= top_p
  // .3 and top-p keeps token 0 alone; normalising over all ten (3.91, p(0) = .26) would keep two.
  const std::vector<float> l{0.0f, -1.0f, -1.0f, -1.0f, -1.2f, -1.2f, -1.2f, -1.2f, -1.2f, -1.2f};
  const SamplingParams p{.temperature = 1.0f, .top_k = 7, .top_p = 0.3f, .min_p = 1.0f / 3, .seed = 3};
  EXPECT_EQ(reference_probs(l, p), (std::vector<double>{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  Sampler s(p);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(s.sample(l.data(), 10), 0);
  // Without top-k the normaliser is the whole vocab: p(0) = .26 < .3, so token 1 joins.
  SamplingParams all = p;
  all.top_k = 0;
  Sampler s2(all);
  expect_distribution(s2, l, {}, 0, reference_probs(l, all));
  EXPECT_GT(reference_probs(l, all)[1], 0);
  // Top-k 2 inside the survivors: normaliser 1.37, p(0) = .73 >= .3.
  all.top_k = 2;
  Sampler s3(all);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(s3.sample(l.data(), 10), 0);
}

TEST(Sampler, TruncationsCombinedFollowTheReference) {
  const std::vector<float> l = random_logits(12, 99, 1.5f);
  const std::vector<float> ties{1.0f, 1.0f, 1.0f, 0.5f, 0.5f, 2.0f, -1.0f, 0.5f};
  std::vector<SamplingParams> cases{
      {.temperature = 1.0f},
      {.temperature = 0.7f, .top_k = 5},
      {.temperature = 1.2f, .top_p = 0.8f},
      {.temperature = 1.0f, .min_p = 0.1f},
      {.temperature = 1.5f, .top_k = 6, .min_p = 0.2f},
      {.temperature = 0.9f, .top_p = 0.9f, .min_p = 0.05f},
      {.temperature = 1.1f, .top_k = 7, .top_p = 0.85f, .min_p = 0.1f},
      {.temperature = 2.0f, .top_k = 3, .top_p = 0.99f, .min_p = 0.01f},
      {.temperature = 1.0f, .top_k = 40, .min_p = 0.02f},  // k above vocab
  };
  uint64_t seed = 100;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    SamplingParams p = cases[c];
    p.seed = ++seed;
    Sampler s(p);
    expect_distribution(s, l, {}, 0, reference_probs(l, p));
    // Ties at the top-k / min-p boundaries go to the lower id.
    SamplingParams q = p;
    q.top_k = std::min<int64_t>(p.top_k, 3);
    Sampler st(q);
    expect_distribution(st, ties, {}, 0, reference_probs(ties, q));
  }
}

TEST(Sampler, PenaltiesShapeTheSampledDistribution) {
  const std::vector<float> l = random_logits(10, 5, 1.0f);
  const std::vector<int32_t> tokens{3, 3, 7, 1, 3, 9, 9, 2};
  const size_t n_prompt = 3;
  SamplingParams p{.temperature = 0.8f,
                   .top_k = 8,
                   .top_p = 0.95f,
                   .min_p = 0.02f,
                   .repetition_penalty = 1.4f,
                   .repetition_context_size = 6,
                   .presence_penalty = 0.3f,
                   .frequency_penalty = 0.6f,
                   .logit_bias = {{0, 1.0f}},
                   .seed = 8};
  Sampler s(p);
  expect_distribution(s, l, tokens, n_prompt, reference_probs(reference_processed(l, p, tokens, n_prompt), p));
  p.min_p = 0;  // the sorted path, on processed logits
  Sampler s2(p);
  expect_distribution(s2, l, tokens, n_prompt, reference_probs(reference_processed(l, p, tokens, n_prompt), p));
}

TEST(Sampler, LogprobsSumToOneAndListTheBestFirst) {
  const std::vector<float> l{0.5f, 2.0f, -1.0f, 2.0f, 0.5f, 3.0f, 0.5f};
  Sampler s(SamplingParams{.temperature = 1.3f, .top_k = 2, .seed = 4});
  TokenLogprobs lp;
  const int32_t tok = s.sample(l.data(), 7, {}, 0, &lp, 7);
  double total = 0;
  for (const auto& [id, v] : lp.top) total += std::exp(double(v));
  EXPECT_NEAR(total, 1.0, 1e-6);
  // Before temperature and truncation: token 2 (-1.0) is listed though top-k 2 excludes it.
  const std::vector<int32_t> order{5, 1, 3, 0, 4, 6, 2};
  ASSERT_EQ(lp.top.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(lp.top[i].first, order[i]) << i;
  for (size_t i = 1; i < 7; ++i) EXPECT_GE(lp.top[i - 1].second, lp.top[i].second);
  EXPECT_EQ(lp.top[1].second, lp.top[2].second);
  const auto want = reference_log_softmax(l);
  EXPECT_NEAR(lp.logprob, want[static_cast<size_t>(tok)], 1e-6);
  EXPECT_TRUE(tok == 5 || tok == 1) << tok;
  // Ties across the cut go to the lower id; top_n 0 gives none; more than vocab gives vocab.
  s.sample(l.data(), 7, {}, 0, &lp, 4);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[3].first, 0);
  s.sample(l.data(), 7, {}, 0, &lp, 0);
  EXPECT_TRUE(lp.top.empty());
  s.sample(l.data(), 7, {}, 0, &lp, 20);
  EXPECT_EQ(lp.top.size(), 7u);
  // Sum to one on a larger vocab too, and the chosen token's logprob is its entry.
  const std::vector<float> big = random_logits(5000, 1);
  Sampler g(SamplingParams{});
  const int32_t gt = g.sample(big.data(), 5000, {}, 0, &lp, 20);
  const auto bw = reference_log_softmax(big);
  double bt = 0;
  for (double v : bw) bt += std::exp(v);
  EXPECT_NEAR(bt, 1.0, 1e-9);
  EXPECT_EQ(lp.top.front().first, gt);
  EXPECT_NEAR(lp.logprob, bw[static_cast<size_t>(gt)], 1e-5);
  std::vector<int32_t> ids(5000);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + 20, ids.end(), [&](int32_t a, int32_t b) {
    return big[static_cast<size_t>(a)] > big[static_cast<size_t>(b)] ||
           (big[static_cast<size_t>(a)] == big[static_cast<size_t>(b)] && a < b);
  });
  ASSERT_EQ(lp.top.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(lp.top[i].first, ids[i]);
    EXPECT_NEAR(lp.top[i].second, bw[static_cast<size_t>(ids[i])], 1e-5);
  }
}

TEST(Sampler, SameSeedSameDraws) {
  const std::vector<float> l = random_logits(300, 12);
  const std::vector<int32_t> hist{5, 6, 7, 5, 100, 200, 5};
  for (float min_p : {0.0f, 0.01f}) {
    const SamplingParams p{.temperature = 1.1f,
                           .top_k = 50,
                           .top_p = 0.95f,
                           .min_p = min_p,
                           .repetition_penalty = 1.1f,
                           .presence_penalty = 0.2f,
                           .frequency_penalty = 0.1f,
                           .logit_bias = {{9, 2.0f}},
                           .seed = 1234};
    Sampler a(p), b(p);
    std::vector<int32_t> ta, tb;
    for (int i = 0; i < 200; ++i) {
      ta.push_back(a.sample(l.data(), 300, hist, 2));
      tb.push_back(b.sample(l.data(), 300, hist, 2));
    }
    EXPECT_EQ(ta, tb);
    EXPECT_GT(std::set<int32_t>(ta.begin(), ta.end()).size(), 1u) << "it does sample";
    SamplingParams other = p;
    other.seed = 1235;
    Sampler c(other);
    std::vector<int32_t> tc;
    for (int i = 0; i < 200; ++i) tc.push_back(c.sample(l.data(), 300, hist, 2));
    EXPECT_NE(ta, tc);
  }
}

TEST(Sampler, NoAllocationInSteadyState) {
#ifdef HEARTH_TEST_ASAN
  GTEST_SKIP() << "the counting operator new is off under AddressSanitizer";
#endif
  {
    const int64_t before = g_allocations.load();
    ::operator delete(::operator new(16));  // a direct call: never elided
    EXPECT_EQ(g_allocations.load() - before, 1) << "the counting operator new is in use";
  }
  const std::vector<float> l = random_logits(4096, 21);
  const std::vector<int32_t> hist{1, 2, 3, 4, 5, 1, 2, 3, 60, 70, 60};
  for (float min_p : {0.0f, 0.05f}) {
    Sampler s(SamplingParams{.temperature = 0.9f,
                             .top_k = 100,
                             .top_p = 0.9f,
                             .min_p = min_p,
                             .repetition_penalty = 1.2f,
                             .presence_penalty = 0.5f,
                             .frequency_penalty = 0.5f,
                             .logit_bias = {{3, 1.0f}}});
    TokenLogprobs lp;
    s.sample(l.data(), 4096, hist, 4, &lp, 20);  // warm-up: buffers sized
    const int64_t before = g_allocations.load();
    for (int i = 0; i < 50; ++i) s.sample(l.data(), 4096, hist, 4, &lp, 20);
    EXPECT_EQ(g_allocations.load() - before, 0) << "min_p " << min_p;
  }
}

TEST(Sampler, NonFiniteLogitsGiveSomeTokenAndNoCrash) {
  // Garbage in (a NaN from a broken model, +-inf, a temperature so small that logits overflow):
  // any in-range token, never undefined behaviour (run under the sanitizers too).
  std::vector<float> l = random_logits(5000, 4);
  l[10] = NAN;
  l[20] = INFINITY;
  l[30] = -INFINITY;
  l[40] = -NAN;
  for (float t : {0.0f, 1.0f, 1e-38f})
    for (int64_t k : {0, 3, 300, 4999})
      for (float p : {1.0f, 0.5f})
        for (float min_p : {0.0f, 0.1f}) {
          Sampler s(SamplingParams{.temperature = t, .top_k = k, .top_p = p, .min_p = min_p, .seed = 1});
          TokenLogprobs lp;
          for (int i = 0; i < 3; ++i) {
            const int32_t tok = s.sample(l.data(), 5000, {}, 0, &lp, 5);
            EXPECT_TRUE(tok >= 0 && tok < 5000);
            for (const auto& [id, v] : lp.top) EXPECT_TRUE(id >= 0 && id < 5000);
          }
          const std::vector<float> small(l.begin(), l.begin() + 50);
          EXPECT_LT(s.sample(small.data(), 50), 50);
        }
}

TEST(Sampler, BadParametersThrowNamingTheField) {
  auto message = [](const SamplingParams& p) -> std::string {
    try {
      Sampler s(p);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({.temperature = -1.0f}).find("temperature"), std::string::npos);
  EXPECT_NE(message({.top_p = 0.0f}).find("top_p"), std::string::npos);
  EXPECT_NE(message({.top_k = -1}).find("top_k"), std::string::npos);
  EXPECT_NE(message({.min_p = -0.1f}).find("min_p"), std::string::npos);
  EXPECT_NE(message({.min_p = 1.5f}).find("min_p"), std::string::npos);
  EXPECT_NE(message({.min_p = NAN}).find("min_p"), std::string::npos);
  EXPECT_NE(message({.repetition_penalty = 0.0f}).find("repetition_penalty"), std::string::npos);
  EXPECT_NE(message({.repetition_penalty = -1.0f}).find("repetition_penalty"), std::string::npos);
  EXPECT_NE(message({.repetition_penalty = INFINITY}).find("repetition_penalty"), std::string::npos);
  EXPECT_NE(message({.repetition_context_size = -1}).find("repetition_context_size"), std::string::npos);
  EXPECT_NE(message({.presence_penalty = 2.5f}).find("presence_penalty"), std::string::npos);
  EXPECT_NE(message({.presence_penalty = NAN}).find("presence_penalty"), std::string::npos);
  EXPECT_NE(message({.frequency_penalty = -2.01f}).find("frequency_penalty"), std::string::npos);
  EXPECT_NE(message({.logit_bias = {{1, INFINITY}}}).find("logit_bias"), std::string::npos);
  EXPECT_NE(message({.logit_bias = {{1, NAN}}}).find("logit_bias"), std::string::npos);
  EXPECT_NE(message({.logit_bias = {{-3, 1.0f}}}).find("-3"), std::string::npos);
  // In range, at the bounds: fine.
  EXPECT_EQ(message({.min_p = 1.0f, .presence_penalty = -2.0f, .frequency_penalty = 2.0f}), "");
  EXPECT_EQ(message({.repetition_context_size = 0, .logit_bias = {{0, -100.0f}}}), "");

  // Ids are checked against the vocab by validate() and by sample().
  const std::vector<float> l{0.0f, 1.0f, 2.0f};
  Sampler s(SamplingParams{.logit_bias = {{1, 1.0f}, {3, 1.0f}}});
  EXPECT_THROW(s.validate(3), InputError);
  EXPECT_NO_THROW(s.validate(4));
  try {
    s.sample(l.data(), 3);
    ADD_FAILURE() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 3"), std::string::npos) << e.what();
  }
  // top_n in [0, 20].
  Sampler ok(SamplingParams{});
  TokenLogprobs lp;
  EXPECT_THROW(ok.sample(l.data(), 3, {}, 0, &lp, 21), InputError);
  EXPECT_THROW(ok.sample(l.data(), 3, {}, 0, &lp, -1), InputError);
  EXPECT_NO_THROW(ok.sample(l.data(), 3, {}, 0, &lp, 20));
}

}  // namespace
}  // namespace hearth
