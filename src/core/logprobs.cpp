#include "core/logprobs.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "core/sample_row.h"

namespace hearth {
namespace {

// Keeps the n (> 0) smallest keys seen so far in best[0, have), ascending: a bounded insertion,
// one comparison for a key that is not among them.
void keep_smallest(uint64_t* best, int& have, int n, uint64_t key) {
  if (have == n && key >= best[n - 1]) return;
  int at = have < n ? have++ : n - 1;
  for (; at > 0 && best[at - 1] > key; --at) best[at] = best[at - 1];
  best[at] = key;
}

}  // namespace

int row_logprobs(const float* logits, int64_t V, int32_t chosen, int top_n, float* chosen_logprob, int32_t* top_ids,
                 float* top_logprobs) {
  HEARTH_CHECK(V > 0 && chosen >= 0 && chosen < V && top_n >= 0 && top_n <= kMaxTopLogprobs);
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i) mx = std::fmax(mx, logits[i]);  // fmax skips NaN
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) {
    const float e = std::exp(logits[i] - mx);
    if (!std::isnan(e)) sum += e;  // a NaN logit has no share
  }
  const double log_z = static_cast<double>(mx) + std::log(sum);
  auto logprob = [&](int64_t i) { return static_cast<float>(static_cast<double>(logits[i]) - log_z); };
  *chosen_logprob = logprob(chosen);

  const int n = static_cast<int>(std::min<int64_t>(top_n, V));
  uint64_t best[kMaxTopLogprobs];
  int have = 0;
  for (int64_t i = 0; i < V && n > 0; ++i)
    keep_smallest(best, have, n, sampling::full_key(sampling::order_key(logits[i]), i));
  for (int j = 0; j < n; ++j) {
    top_ids[j] = static_cast<int32_t>(best[j] & 0xffffffffu);
    top_logprobs[j] = logprob(top_ids[j]);
  }
  return n;
}

}  // namespace hearth
