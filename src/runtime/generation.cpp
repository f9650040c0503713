#include "runtime/generation.h"

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"

namespace hearth {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kNone: break;
  }
  return "none";
}

GenerationStream::GenerationStream(Engine& engine, GenerationRequest request)
    : engine_(engine), request_(std::move(request)), sampler_(request_.sampling) {
  if (request_.prompt.empty()) throw InputError("the prompt is empty");
  if (request_.max_tokens < 0) throw InputError("max_tokens must be >= 0");
  if (request_.prefill_chunk <= 0) throw InputError("prefill chunk must be positive");
  const int64_t vocab = engine_.model().info().vocab_size;
  for (int32_t t : request_.prompt) {
    if (t < 0 || t >= vocab)
      throw InputError("prompt token " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(vocab));
  }
  seq_.tokens = request_.prompt;
  stats_.prompt_tokens = static_cast<int64_t>(request_.prompt.size());
}

GenerationStream::~GenerationStream() { engine_.release(seq_); }

int32_t GenerationStream::prefill() {
  Tensor logits;
  const int64_t n = static_cast<int64_t>(seq_.tokens.size());
  while (seq_.n_cached < n) {
    const int64_t chunk = std::min(request_.prefill_chunk, n - seq_.n_cached);
    logits = engine_.step({{&seq_, chunk}});
  }
  return sampler_.sample(logits.data<float>(), logits.dim(1));
}

std::optional<TokenEvent> GenerationStream::next() {
  if (finish_ != FinishReason::kNone) return std::nullopt;
  if (request_.max_tokens == 0) {
    finish_ = FinishReason::kLength;
    return std::nullopt;
  }
  const Timer timer;
  int32_t token;
  if (!started_) {
    started_ = true;
    token = prefill();
    stats_.prefill_seconds = timer.seconds();
  } else {
    const Tensor logits = engine_.step({{&seq_, 1}});
    token = sampler_.sample(logits.data<float>(), logits.dim(1));
    stats_.decode_seconds += timer.seconds();
  }
  seq_.tokens.push_back(token);
  ++stats_.generated_tokens;
  TokenEvent ev{token, FinishReason::kNone};
  const bool is_eos = std::find(request_.eos_ids.begin(), request_.eos_ids.end(), token) != request_.eos_ids.end();
  if (is_eos && !request_.ignore_eos) {
    ev.finish = FinishReason::kStop;
  } else if (stats_.generated_tokens >= request_.max_tokens) {
    ev.finish = FinishReason::kLength;
  }
  finish_ = ev.finish;
  return ev;
}

}  // namespace hearth
