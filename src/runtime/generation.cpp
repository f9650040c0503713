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
  if (request_.top_logprobs > 20) throw InputError("top_logprobs must be in 0..20");
  const int64_t vocab = engine_.model().info().vocab_size;
  for (int32_t t : request_.prompt) {
    if (t < 0 || t >= vocab)
      throw InputError("prompt token " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(vocab));
  }
  sampler_.validate(vocab);  // a bad logit_bias id is refused now, not at the first token
  seq_.tokens = request_.prompt;
  stats_.prompt_tokens = static_cast<int64_t>(request_.prompt.size());
  stats_.cached_tokens = engine_.attach_cached_prefix(seq_);
}

GenerationStream::~GenerationStream() { engine_.release(seq_); }

int32_t GenerationStream::sample(const Tensor& logits, std::optional<TokenLogprobs>* logprobs) {
  // Penalties see the whole sequence; its first prompt_tokens are the prompt.
  const auto n_prompt = static_cast<size_t>(stats_.prompt_tokens);
  if (request_.top_logprobs < 0) return sampler_.sample(logits.data<float>(), logits.dim(1), seq_.tokens, n_prompt);
  logprobs->emplace();
  return sampler_.sample(logits.data<float>(), logits.dim(1), seq_.tokens, n_prompt, &**logprobs,
                         request_.top_logprobs);
}

bool GenerationStream::samples_on_device() const { return engine_.context().device.type != DeviceType::kCpu; }

int32_t GenerationStream::step_on_device(int64_t n_tokens, std::optional<TokenLogprobs>* logprobs) {
  const SampleRow row = sampler_.device_row();
  const std::span<const LogitEdit> edits =
      sampler_.edits(engine_.model().info().vocab_size, seq_.tokens, static_cast<size_t>(stats_.prompt_tokens));
  Engine::Drawn drawn = engine_.step_draw({{&seq_, n_tokens}}, {{&row, 1}, edits, request_.top_logprobs});
  if (request_.top_logprobs >= 0) *logprobs = std::move(drawn.logprobs.at(0));
  return drawn.ids.at(0);
}

int32_t GenerationStream::prefill(std::optional<TokenLogprobs>* logprobs) {
  Tensor logits;
  const int64_t n = static_cast<int64_t>(seq_.tokens.size());
  while (seq_.n_cached < n) {
    const int64_t chunk = std::min(request_.prefill_chunk, n - seq_.n_cached);
    if (seq_.n_cached + chunk == n && samples_on_device()) return step_on_device(chunk, logprobs);
    logits = engine_.step({{&seq_, chunk}});
  }
  return sample(logits, logprobs);
}

std::optional<TokenEvent> GenerationStream::next() {
  if (finish_ != FinishReason::kNone) return std::nullopt;
  if (request_.max_tokens == 0) {
    finish_ = FinishReason::kLength;
    return std::nullopt;
  }
  const Timer timer;
  TokenEvent ev;
  if (!started_) {
    started_ = true;
    ev.token = prefill(&ev.logprobs);
    stats_.prefill_seconds = timer.seconds();
  } else if (samples_on_device()) {
    // Only the token (and its logprobs) cross from the GPU, not the logits.
    ev.token = step_on_device(1, &ev.logprobs);
    stats_.decode_seconds += timer.seconds();
  } else {
    const Tensor logits = engine_.step({{&seq_, 1}});
    ev.token = sample(logits, &ev.logprobs);
    stats_.decode_seconds += timer.seconds();
  }
  const int32_t token = ev.token;
  seq_.tokens.push_back(token);
  ++stats_.generated_tokens;
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
