#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace hearth {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  if (!(params.temperature >= 0) || !std::isfinite(params.temperature)) throw InputError("temperature must be >= 0");
  if (!(params.top_p > 0 && params.top_p <= 1)) throw InputError("top_p must be in (0, 1]");
  if (params.top_k < 0) throw InputError("top_k must be >= 0");
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (params_.temperature == 0.0f) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  // Candidates sorted by logit, best first; top-k cuts the list.
  scratch_.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    scratch_[static_cast<size_t>(i)] = {logits[i] / params_.temperature, static_cast<int32_t>(i)};
  const size_t k =
      params_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(params_.top_k), scratch_.size()) : scratch_.size();
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::partial_sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(k), scratch_.end(), by_logit);
  scratch_.resize(k);
  // Softmax over the kept candidates.
  const float mx = scratch_.front().first;
  double sum = 0;
  for (auto& [v, id] : scratch_) {
    v = std::exp(v - mx);
    sum += v;
  }
  // Top-p: smallest prefix whose probability reaches p (always at least one token).
  size_t keep = scratch_.size();
  if (params_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < scratch_.size(); ++i) {
      cum += scratch_[i].first / sum;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0;
  for (size_t i = 0; i < keep; ++i) kept_sum += scratch_[i].first;
  const double r = std::uniform_real_distribution<double>(0.0, kept_sum)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += scratch_[i].first;
    if (r < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

}  // namespace hearth
