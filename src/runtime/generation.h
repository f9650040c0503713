// A pull-style generation stream: each next() yields one token. The CLI (and later the
// server) consume the same stream, so there is one generation path.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace hearth {

enum class FinishReason { kNone, kStop, kLength };
std::string_view finish_reason_name(FinishReason r);

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 256;
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;  // stop tokens (the model's, usually)
  int64_t prefill_chunk = 512;   // prompt tokens per forward
  int top_logprobs = -1;         // -1: no logprobs; 0..20: the chosen token's and this many alternatives
};

struct TokenEvent {
  int32_t token = 0;
  FinishReason finish = FinishReason::kNone;  // set on the last token
  std::optional<TokenLogprobs> logprobs;      // when the request asked for them
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose K/V came from the prompt cache
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;  // prompt forward(s) + first sample: time to first token
  double decode_seconds = 0;   // everything after the first token
};

class GenerationStream {
 public:
  // Throws InputError for an empty prompt or one longer than the KV cache.
  GenerationStream(Engine& engine, GenerationRequest request);
  ~GenerationStream();
  GenerationStream(const GenerationStream&) = delete;
  GenerationStream& operator=(const GenerationStream&) = delete;

  // The next token, or nullopt once finished.
  std::optional<TokenEvent> next();
  const GenerationStats& stats() const { return stats_; }
  FinishReason finish_reason() const { return finish_; }

 private:
  // Whether tokens are drawn on the engine's device (a GPU), the logit processors and logprobs
  // there too, so that only the token and its logprobs cross to the host; on the CPU the host
  // Sampler draws from the logits.
  bool samples_on_device() const;
  int32_t prefill(std::optional<TokenLogprobs>* logprobs);
  // The step of n_tokens that ends with the next token's logits, its token drawn on the device.
  int32_t step_on_device(int64_t n_tokens, std::optional<TokenLogprobs>* logprobs);
  int32_t sample(const Tensor& logits, std::optional<TokenLogprobs>* logprobs);
  Engine& engine_;
  GenerationRequest request_;
  Sampler sampler_;
  Sequence seq_;
  GenerationStats stats_;
  FinishReason finish_ = FinishReason::kNone;
  bool started_ = false;
};

}  // namespace hearth
