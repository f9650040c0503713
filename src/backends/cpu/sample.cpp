// ops::sample's scalar reference: the row's tokens sorted best first, then the kept prefix and
// the draw walked in that order. The CUDA kernel finds the same tokens by radix selection
// without sorting; both take the order and the weights from core/sample_row.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"

namespace hearth::cpu {
using sampling::order_key;
using sampling::weight;

int32_t sample_row(const float* logits, int64_t V, const SampleRow& row) {
  const bool greedy = !(row.temperature > 0.0f);
  struct Token {
    uint64_t key;  // order_key(t) << 32 | id: unique, ascending = best first
    float t;
  };
  std::vector<Token> order(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) {
    const float t = greedy ? logits[i] : logits[i] / row.temperature;
    order[static_cast<size_t>(i)] = {sampling::full_key(order_key(t), i), t};
  }
  std::sort(order.begin(), order.end(), [](const Token& a, const Token& b) { return a.key < b.key; });
  const auto id = [&](size_t i) { return static_cast<int32_t>(order[i].key & 0xffffffffu); };
  if (greedy) return id(0);

  const float best = order[0].t;
  std::vector<uint64_t> w(order.size());
  for (size_t i = 0; i < order.size(); ++i) w[i] = weight(order[i].t, best);
  const size_t k = row.top_k > 0 ? std::min(order.size(), static_cast<size_t>(row.top_k)) : order.size();
  size_t keep = k;
  size_t survivors = 0;  // min-p's: a prefix of the order
  while (survivors < order.size() && order[survivors].t - best >= row.log_min_p) ++survivors;
  keep = std::min(keep, survivors);
  if (row.top_p < 1.0f) {
    uint64_t top_k_sum = 0;
    for (size_t i = 0; i < k; ++i) top_k_sum += w[i];
    const auto target =
        static_cast<uint64_t>(std::ceil(static_cast<double>(row.top_p) * static_cast<double>(top_k_sum)));
    uint64_t cum = 0;
    for (size_t i = 0; i < k; ++i) {
      cum += w[i];
      if (cum >= target) {
        keep = std::min(keep, i + 1);
        break;
      }
    }
  }
  keep = std::max<size_t>(keep, 1);
  uint64_t kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += w[i];
  if (kept == 0) return id(0);
  const auto r = static_cast<uint64_t>((static_cast<unsigned __int128>(row.u) * kept) >> 64);
  uint64_t cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += w[i];
    if (cum > r) return id(i);
  }
  return id(0);  // not reached: cum ends at kept > r
}

}  // namespace hearth::cpu
