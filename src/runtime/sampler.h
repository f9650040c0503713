// Turns a row of logits into a token, with the OpenAI / mlx_lm.server sampling set.
//
// Order, for one row of logits:
//   1. logit processors (on a private copy; the caller's buffer is never written), which give
//      the "processed logits":
//        a. logit_bias:         logit[id] += bias (a repeated id adds the sum of its biases, in
//                               request order, as mlx_lm's .at[].add adds them up)
//        b. repetition_penalty: HF / CTRL: for each distinct token in the last
//                               repetition_context_size tokens of the sequence (prompt and
//                               generated), logit > 0 ? logit / p : logit * p
//        c. presence_penalty,   OpenAI: over the GENERATED tokens only (whole generation, no
//           frequency_penalty:  window), logit -= presence * (count > 0) + frequency * count
//   2. temperature == 0: argmax of the processed logits (lowest id on ties); nothing below runs
//      and no random number is drawn.
//   3. else logit / temperature -> top-k -> top-p -> min-p -> one draw from a per-sequence
//      seeded RNG. Every truncation keeps a prefix of the tokens sorted by processed logit
//      (best first, ties by lower id) and always keeps the best token.
//        top-k: the k best.
//        top-p: the smallest prefix (of what top-k kept, renormalised) whose probability
//               reaches top_p.
//        min-p: tokens with prob >= min_p * max_prob on the tempered distribution (compared in
//               log space, logit / T - max >= log(min_p), as mlx_lm). min-p is relative to the
//               best token, so it commutes with top-k and top-p: the kept set is the
//               intersection.
//
// Warper order, HF transformers vs mlx_lm:
//   HF (_get_logits_processor): processors (repetition penalty, bias, ...), then temperature,
//   top-k, top-p, min-p ("applied after temperature scaling"). That is the order above.
//   mlx_lm (sample_utils.make_sampler since 2025-03): top-p, min-p, (xtc), top-k on the
//   temperature-1 log-probs, and temperature only at the draw. So mlx_lm's top-p and min-p see
//   the untempered distribution, and its top-p sees the full distribution rather than the top-k
//   one. We follow HF there, deliberately: the temperature/top-k/top-p behaviour predates this
//   file's extension and is kept bit-for-bit, and min-p follows the same (tempered)
//   distribution so that all truncations agree. The kept sets differ from mlx_lm only when
//   temperature != 1 (top-p, min-p), or top-k and top-p are both on. mlx_lm's logit processor
//   order (bias, repetition, presence, frequency) is ours. Its presence/frequency penalties
//   look at the last 20 tokens of prompt + generated; ours are OpenAI's (all generated tokens).
//
// The processors are per-token edits (core/sample_row.h's LogitEdit, one per distinct token),
// so that a device applies the same ones to its logits (ops::edit_logits) and draws there: only
// the chosen token crosses to the host.
//
// Logprobs (OpenAI `logprobs` / `top_logprobs`) are log_softmax of the processed logits, before
// temperature and truncation, as mlx_lm.server reports them (core/logprobs.h, which the device
// op ops::logprobs shares).
//
// Cost per token at vocab 256k (one core, Release): greedy 0.2 ms; logprobs add ~1 ms (an exp
// per token); temperature with top-k off ~4 ms (a radix sort: the same order the comparison sort
// gave, so the same draws, where partial_sort of the whole vocab took ~40 ms); small top-k ~1 ms;
// min-p sorts only its survivors, ~1.5 ms. NaN / inf logits give some token, never UB.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/logprobs.h"
#include "core/sample_row.h"

namespace hearth {

struct SamplingParams {
  float temperature = 0.0f;              // 0 = greedy
  int64_t top_k = 0;                     // 0 = off
  float top_p = 1.0f;                    // 1 = off; (0, 1]
  float min_p = 0.0f;                    // 0 = off; [0, 1]
  float repetition_penalty = 1.0f;       // 1 = off; > 0
  int64_t repetition_context_size = 20;  // tokens of the sequence it looks at (mlx_lm.server's default); 0 = all
  float presence_penalty = 0.0f;         // [-2, 2]
  float frequency_penalty = 0.0f;        // [-2, 2]
  // (token id, bias) added to the logits (OpenAI: -100..100; -100 bans, +100 forces in effect).
  // Values must be finite and ids >= 0 (checked at construction); ids must be < vocab (checked by
  // validate(vocab), which sample() also runs).
  std::vector<std::pair<int32_t, float>> logit_bias = {};
  uint64_t seed = 0;
};

struct TokenLogprobs {                              // OpenAI logprobs for one sampled token
  float logprob = 0;                                // of the chosen token
  std::vector<std::pair<int32_t, float>> top = {};  // top_n (token, logprob), best first, ties by lower id
};

class Sampler {
 public:
  // Throws InputError naming the field for a parameter out of range.
  explicit Sampler(const SamplingParams& params);

  // The logit processors for the next token as edits of logits row `row` (empty when none
  // changes anything), for ops::edit_logits: sample() applies the same ones. Valid until the
  // next call. tokens, n_prompt: as sample's.
  std::span<const LogitEdit> edits(int64_t vocab, std::span<const int32_t> tokens, size_t n_prompt, int32_t row = 0);
  // The parameters of ops::sample for the next token, drawing its uniform number (when
  // temperature > 0) from this sampler's generator as sample() would: the same seed gives the
  // same tokens on the host and on a device, but for draws within the weights' rounding of a
  // boundary.
  SampleRow device_row();

  // Throws InputError naming the first logit_bias id outside [0, vocab). sample() calls it (once
  // per vocab size); call it early to reject a request before any work.
  void validate(int64_t vocab) const;

  // logits: [vocab] f32, read only. tokens: the whole sequence so far (prompt then generated);
  // n_prompt: how many of them are the prompt (<= tokens.size()); every token must be in
  // [0, vocab) (an invariant: HEARTH_CHECK). logprobs: when non-null, filled from log_softmax of
  // the processed logits with `top_n` (0..20, else InputError "top_logprobs ...") alternatives,
  // fewer when vocab < top_n. No allocation in steady state (same vocab, reused `logprobs`).
  int32_t sample(const float* logits, int64_t vocab, std::span<const int32_t> tokens, size_t n_prompt,
                 TokenLogprobs* logprobs = nullptr, int top_n = 0);
  // Empty history: logit_bias, temperature and the truncations apply, the penalties do not.
  int32_t sample(const float* logits, int64_t vocab) { return sample(logits, vocab, {}, 0); }

  const SamplingParams& params() const { return params_; }

 private:
  // Writes the processed logits into processed_ and returns them, or returns `logits` when no
  // processor changes anything for this history.
  const float* process(const float* logits, int64_t vocab, std::span<const int32_t> tokens, size_t n_prompt);
  static int64_t first_max(const float* l, int64_t n);      // greedy: the first maximum, NaNs never win
  int32_t draw_sorted(const float* logits, int64_t vocab);  // min_p == 0: the original algorithm
  int32_t draw_min_p(const float* logits, int64_t vocab);   // min_p > 0: sorts only the survivors
  int32_t draw_top_p(size_t n, double sum);                 // top-p over the first n of scratch_, then a draw
  int32_t draw_prefix(size_t keep, double kept_sum);        // from the first `keep` of scratch_ (weights)
  // Puts the best k of scratch_[0, n) first, in best-first order (logit desc, id asc). When it
  // radix-sorts (large k), scratch_[0, n) must be in id order.
  void sort_best_first(size_t n, size_t k);
  void radix_sort(size_t n);
  void fill_logprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n, TokenLogprobs* out);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_, radix_tmp_;
  std::vector<float> values_;     // [vocab] tempered logits, for min-p's top-k normaliser
  std::vector<float> processed_;  // [vocab] processed logits, when a processor is active
  std::vector<int32_t> counts_;   // [vocab] per-token counts; all zero between calls
  std::vector<int32_t> slot_;     // [vocab] a token's index in edits_; all -1 between calls
  std::vector<LogitEdit> edits_;
  int64_t validated_vocab_ = -1;
};

}  // namespace hearth
