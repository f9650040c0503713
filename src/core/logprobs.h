// OpenAI logprobs of one row of logits: log_softmax, for the chosen token and the best few.
// The scalar reference of ops::logprobs, and what the host Sampler reports.
//
// log_z = max + log(sum_i exp(l_i - max)), the max and the sum over the row's numbers (a NaN
// logit has no share; its own logprob is NaN), each exp in float and the sum in double; a
// token's logprob is float(double(l) - log_z). The best are
// the tokens with the smallest sampling::full_key: descending logit, ties by lower id, -0 as
// +0, NaN last (core/sample_row.h), as ops::sample orders them.
#pragma once

#include <cstdint>

namespace hearth {

constexpr int kMaxTopLogprobs = 20;  // OpenAI's top_logprobs limit

// logits: [V]. Writes the chosen token's logprob and the first n = min(top_n, V) best tokens'
// ids and logprobs (top_n in 0..kMaxTopLogprobs); returns n.
int row_logprobs(const float* logits, int64_t V, int32_t chosen, int top_n, float* chosen_logprob, int32_t* top_ids,
                 float* top_logprobs);

}  // namespace hearth
