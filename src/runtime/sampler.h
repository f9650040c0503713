// Turns a row of logits into a token: greedy at temperature 0, else temperature, top-k,
// top-p (in that order, as HF's warpers) and a draw from a per-sequence seeded RNG.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace hearth {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits: [vocab] f32
  int32_t sample(const float* logits, int64_t vocab);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace hearth
