#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "base/error.h"

namespace hearth {

namespace {

// Sorting keys: a float's bits mapped so that unsigned order is descending value order, with -0
// as +0. On non-NaN values this is exactly `a > b` / `a == b`; NaNs get a place too, so the
// comparisons below are a strict total order whatever the logits (std::sort and nth_element
// may run off the end of the range with a comparator that is not one).
inline uint32_t descending_key(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f + 0.0f);
  return (u & 0x80000000u) ? u : ~(u | 0x80000000u);
}

// Best first: higher logit, then lower id. by_logit is the fast one, for NaN-free ranges;
// by_logit_key orders any floats, and the same on NaN-free ones.
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

bool by_logit_key(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  const uint32_t ka = descending_key(a.first), kb = descending_key(b.first);
  return ka < kb || (ka == kb && a.second < b.second);
}

bool by_value(float a, float b) { return descending_key(a) < descending_key(b); }

}  // namespace

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  if (!(params.temperature >= 0) || !std::isfinite(params.temperature))
    throw InputError("temperature must be a finite number >= 0");
  if (!(params.top_p > 0 && params.top_p <= 1)) throw InputError("top_p must be in (0, 1]");
  if (params.top_k < 0) throw InputError("top_k must be >= 0");
  if (!(params.min_p >= 0 && params.min_p <= 1)) throw InputError("min_p must be in [0, 1]");
  if (!(params.repetition_penalty > 0) || !std::isfinite(params.repetition_penalty))
    throw InputError("repetition_penalty must be a finite number > 0");
  if (params.repetition_context_size < 0) throw InputError("repetition_context_size must be >= 0");
  if (!(params.presence_penalty >= -2 && params.presence_penalty <= 2))
    throw InputError("presence_penalty must be in [-2, 2]");
  if (!(params.frequency_penalty >= -2 && params.frequency_penalty <= 2))
    throw InputError("frequency_penalty must be in [-2, 2]");
  for (const auto& [id, bias] : params.logit_bias) {
    if (id < 0) throw InputError("logit_bias: token id " + std::to_string(id) + " is negative");
    if (!std::isfinite(bias))
      throw InputError("logit_bias: the bias of token " + std::to_string(id) + " must be finite");
  }
}

SampleRow Sampler::device_row() {
  SampleRow row;
  if (params_.temperature == 0.0f) return row;
  row.temperature = params_.temperature;
  row.top_k = static_cast<int32_t>(std::min<int64_t>(params_.top_k, std::numeric_limits<int32_t>::max()));
  row.top_p = params_.top_p;
  if (params_.min_p > 0.0f) row.log_min_p = std::log(params_.min_p);
  // draw_prefix's uniform_real_distribution(0, kept_sum) is canonical * kept_sum: the same
  // canonical number, whose 53 bits fit the fixed point exactly.
  const double canonical = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  row.u = canonical < 1.0 ? static_cast<uint64_t>(std::ldexp(canonical, 64)) : ~uint64_t{0};
  return row;
}

void Sampler::validate(int64_t vocab) const {
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || id >= vocab)
      throw InputError("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(vocab));
  }
}

std::span<const LogitEdit> Sampler::edits(int64_t vocab, std::span<const int32_t> tokens, size_t n_prompt,
                                          int32_t row) {
  HEARTH_CHECK(n_prompt <= tokens.size());
  edits_.clear();
  const std::span<const int32_t> generated = tokens.subspan(n_prompt);
  const auto context = static_cast<size_t>(params_.repetition_context_size);
  const std::span<const int32_t> window =
      context == 0 || context >= tokens.size() ? tokens : tokens.subspan(tokens.size() - context);
  const bool repetition = params_.repetition_penalty != 1.0f && !window.empty();
  const bool presence_frequency =
      (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) && !generated.empty();
  if (params_.logit_bias.empty() && !repetition && !presence_frequency) return {};

  // slot_[id]: the index of id's edit, -1 for none; back to all -1 before returning. Each
  // distinct token gets one edit, so each of its processors applies once.
  if (slot_.size() != static_cast<size_t>(vocab)) slot_.assign(static_cast<size_t>(vocab), -1);
  auto edit_of = [&](int32_t id) -> LogitEdit& {
    HEARTH_CHECK(id >= 0 && id < vocab);
    int32_t& s = slot_[static_cast<size_t>(id)];
    if (s < 0) {
      s = static_cast<int32_t>(edits_.size());
      edits_.push_back(LogitEdit{.row = row, .id = id});
    }
    return edits_[static_cast<size_t>(s)];
  };
  for (const auto& [id, bias] : params_.logit_bias) edit_of(id).bias += bias;  // from -0: the first is exact
  if (repetition) {
    for (int32_t t : window) edit_of(t).penalty = params_.repetition_penalty;
  }
  if (presence_frequency) {
    if (counts_.size() != static_cast<size_t>(vocab)) counts_.assign(static_cast<size_t>(vocab), 0);
    for (int32_t t : generated) {
      HEARTH_CHECK(t >= 0 && t < vocab);
      ++counts_[static_cast<size_t>(t)];
    }
    for (int32_t t : generated) {
      int32_t& c = counts_[static_cast<size_t>(t)];
      if (c == 0) continue;  // a repeat, already done
      edit_of(t).sub = params_.presence_penalty + params_.frequency_penalty * static_cast<float>(c);
      c = 0;
    }
  }
  for (const LogitEdit& e : edits_) slot_[static_cast<size_t>(e.id)] = -1;
  return edits_;
}

const float* Sampler::process(const float* logits, int64_t vocab, std::span<const int32_t> tokens, size_t n_prompt) {
  const std::span<const LogitEdit> list = edits(vocab, tokens, n_prompt);
  if (list.empty()) return logits;
  processed_.assign(logits, logits + vocab);
  for (const LogitEdit& e : list) {
    float& l = processed_[static_cast<size_t>(e.id)];
    l = sampling::edit_logit(l, e);
  }
  return processed_.data();
}

// The first i with l[i] > l[j] for no j (NaNs never win; 0 where l[0] is NaN), as a scalar walk
// keeping the best so far finds it. In one pass over 16 independent lanes, each keeping its best
// value and where that first came, then the lanes merged (ties to the lower id): the walk's chain
// of dependent compares took ~0.5% of a CPU decode step at a vocabulary of 152k, and a second
// pass for the maximum's index took 0-40 us more per token (half of it on average).
int64_t Sampler::first_max(const float* l, int64_t n) {
  if (std::isnan(l[0])) return 0;
  HEARTH_CHECK(n <= std::numeric_limits<int32_t>::max());
  constexpr int kLanes = 16;
  float best[kLanes];
  int32_t at[kLanes];
  std::fill_n(best, kLanes, l[0]);
  std::fill_n(at, kLanes, 0);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const bool better = l[i + j] > best[j];
      best[j] = better ? l[i + j] : best[j];
      at[j] = better ? static_cast<int32_t>(i + j) : at[j];
    }
  }
  float m = best[0];
  int64_t k = at[0];
  for (int j = 1; j < kLanes; ++j) {
    if (best[j] > m || (best[j] == m && at[j] < k)) {
      m = best[j];
      k = at[j];
    }
  }
  for (; i < n; ++i) {
    if (l[i] > m) {
      m = l[i];
      k = i;
    }
  }
  return k;
}

int32_t Sampler::draw_prefix(size_t keep, double kept_sum) {
  const double r = std::uniform_real_distribution<double>(0.0, kept_sum)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += scratch_[i].first;
    if (r < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

// A stable LSD radix sort (3 passes of 11 bits) of scratch_[0, n) by descending value: from id
// order it gives exactly the by_logit order, in O(n) where std::sort is O(n log n).
void Sampler::radix_sort(size_t n) {
  constexpr int kBits = 11, kPasses = 3;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  uint32_t hist[kPasses][1u << kBits] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = descending_key(scratch_[i].first);
    for (int p = 0; p < kPasses; ++p) ++hist[p][(key >> (p * kBits)) & kMask];
  }
  radix_tmp_.resize(n);
  std::pair<float, int32_t>* src = scratch_.data();
  std::pair<float, int32_t>* dst = radix_tmp_.data();
  for (int p = 0; p < kPasses; ++p) {
    const int shift = p * kBits;
    uint32_t* h = hist[p];
    if (h[(descending_key(src[0].first) >> shift) & kMask] == n) continue;  // one bucket: nothing moves
    uint32_t offset = 0;
    for (uint32_t d = 0; d <= kMask; ++d) offset += std::exchange(h[d], offset);
    for (size_t i = 0; i < n; ++i) dst[h[(descending_key(src[i].first) >> shift) & kMask]++] = src[i];
    std::swap(src, dst);
  }
  if (src != scratch_.data()) std::copy(src, src + n, scratch_.data());
}

// Both comparators are strict total orders (ids differ), so every method gives the same first k. A heap
// selection (partial_sort) wins for a small k: at n = 256k, 0.3 ms for k = 256, 2 ms for 4k,
// 6 ms for 16k, against about 3 ms for the radix sort and 60 ms for partial_sort of all.
void Sampler::sort_best_first(size_t n, size_t k) {
  const auto first = scratch_.begin(), mid = first + static_cast<std::ptrdiff_t>(k),
             last = first + static_cast<std::ptrdiff_t>(n);
  if (k * 64 > n && n > 4096) return radix_sort(n);
  const bool nan = std::any_of(first, last, [](const auto& e) { return std::isnan(e.first); });
  if (k * 64 <= n) {
    nan ? std::partial_sort(first, mid, last, by_logit_key) : std::partial_sort(first, mid, last, by_logit);
  } else {
    nan ? std::sort(first, last, by_logit_key) : std::sort(first, last, by_logit);
  }
}

// The sampler as it was before min-p and the processors, kept bit-for-bit: the same draws for
// the same seed (the same order, sums and walk; only the sort is now O(vocab) for a large k).
int32_t Sampler::draw_sorted(const float* logits, int64_t vocab) {
  // Candidates sorted by logit, best first; top-k cuts the list.
  scratch_.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    scratch_[static_cast<size_t>(i)] = {logits[i] / params_.temperature, static_cast<int32_t>(i)};
  const size_t k =
      params_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(params_.top_k), scratch_.size()) : scratch_.size();
  sort_best_first(scratch_.size(), k);
  scratch_.resize(k);
  // Softmax over the kept candidates.
  const float mx = scratch_.front().first;
  double sum = 0;
  for (auto& [v, id] : scratch_) {
    v = std::exp(v - mx);
    sum += v;
  }
  return draw_top_p(scratch_.size(), sum);
}

// min-p on: only the tokens with prob >= min_p * max_prob can be drawn, so only those are sorted
// (usually a handful); top-p's normaliser (over the top-k set) is an O(vocab) sum.
int32_t Sampler::draw_min_p(const float* logits, int64_t vocab) {
  const auto v = static_cast<size_t>(vocab);
  scratch_.resize(v);
  float mx = -INFINITY;
  for (size_t i = 0; i < v; ++i) {
    scratch_[i] = {logits[i] / params_.temperature, static_cast<int32_t>(i)};
    mx = std::max(mx, scratch_[i].first);
  }
  // The survivors (prob / max_prob >= min_p, in log space as mlx_lm), moved to the front in id
  // order. The best token always survives.
  const float log_min_p = std::log(params_.min_p);
  size_t m = 0;
  for (size_t i = 0; i < v; ++i)
    if (!(scratch_[i].first - mx < log_min_p)) scratch_[m++] = scratch_[i];  // NaN (inf - inf) stays
  if (m == 0) return draw_sorted(logits, vocab);  // not reached: the best token's difference is 0 or NaN
  const size_t k = params_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(params_.top_k), v) : v;
  const size_t n = std::min(k, m);  // min-p's survivors are a best-first prefix: so are top-k's
  sort_best_first(m, n);
  // Top-p's normaliser is over the top-k set, which may reach past the survivors.
  double sum = 0;
  if (params_.top_p < 1.0f) {
    if (k == v) {
      for (size_t i = 0; i < v; ++i) sum += std::exp(logits[i] / params_.temperature - mx);
    } else if (m >= k) {
      for (size_t i = 0; i < k; ++i) sum += std::exp(scratch_[i].first - mx);
    } else {
      values_.resize(v);
      for (size_t i = 0; i < v; ++i) values_[i] = logits[i] / params_.temperature;
      std::nth_element(values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(k - 1), values_.end(), by_value);
      for (size_t i = 0; i < k; ++i) sum += std::exp(values_[i] - mx);
    }
  }
  for (size_t i = 0; i < n; ++i) scratch_[i].first = std::exp(scratch_[i].first - mx);
  // When top-p's cut falls past the kept tokens, min-p's (or top-k's) wins.
  return draw_top_p(n, sum);
}

// Top-p over the first n weights of scratch_ (best first), normalised by `sum`: the smallest
// prefix whose probability reaches p (always at least one token); then one draw from it.
int32_t Sampler::draw_top_p(size_t n, double sum) {
  size_t keep = n;
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += scratch_[i].first / sum;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0;
  for (size_t i = 0; i < keep; ++i) kept_sum += scratch_[i].first;
  return draw_prefix(keep, kept_sum);
}

void Sampler::fill_logprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n, TokenLogprobs* out) {
  int32_t ids[kMaxTopLogprobs];
  float values[kMaxTopLogprobs];
  const int n = row_logprobs(logits, vocab, chosen, top_n, &out->logprob, ids, values);
  out->top.clear();
  for (int j = 0; j < n; ++j) out->top.emplace_back(ids[j], values[j]);
}

int32_t Sampler::sample(const float* logits, int64_t vocab, std::span<const int32_t> tokens, size_t n_prompt,
                        TokenLogprobs* logprobs, int top_n) {
  if (top_n < 0 || top_n > kMaxTopLogprobs) throw InputError("top_logprobs must be in [0, 20]");
  HEARTH_CHECK(vocab > 0);
  if (vocab != validated_vocab_) {
    validate(vocab);
    validated_vocab_ = vocab;
  }
  const float* l = process(logits, vocab, tokens, n_prompt);
  int32_t token;
  if (params_.temperature == 0.0f) {
    token = static_cast<int32_t>(first_max(l, vocab));
  } else if (params_.min_p > 0.0f) {
    token = draw_min_p(l, vocab);
  } else {
    token = draw_sorted(l, vocab);
  }
  if (logprobs) fill_logprobs(l, vocab, token, top_n, logprobs);
  return token;
}

}  // namespace hearth
