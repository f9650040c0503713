// The OpenAI request and response formats: /v1/chat/completions and /v1/completions bodies
// -> a validated GenerationRequest; generated text -> response bodies and SSE chunks.
// Validation errors are ApiErrors (400) that name the field.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/generation_config.h"
#include "runtime/generation.h"
#include "runtime/prompt.h"

namespace hearth::server {

using ojson = nlohmann::ordered_json;

enum class Endpoint { kChat, kCompletion };

// The server's --temp/--top-p/--top-k/--max-tokens: used when a request leaves a field out.
struct SamplingDefaults {
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k, max_tokens;
};

// Built-in max_tokens when neither the request nor the server sets one (mlx_lm.server's).
inline constexpr int64_t kDefaultMaxTokens = 512;

// What request parsing needs from the loaded model.
struct ModelContext {
  const Tokenizer* tokenizer = nullptr;
  const PromptRenderer* renderer = nullptr;
  GenerationConfig generation;
  std::vector<int32_t> eos_ids;
  SamplingDefaults defaults;
  std::string model_id;
  // Prompt rendering and encoding are cheap; one at a time keeps the tokenizer's and the
  // template's shared state out of any race.
  std::mutex* prompt_mutex = nullptr;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  GenerationRequest generation;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
};

ParsedRequest parse_chat_request(const ojson& body, const ModelContext& ctx);
ParsedRequest parse_completion_request(const ojson& body, const ModelContext& ctx);

// The finished (or, for chunks, ongoing) generation as the response formats need it.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
};

std::string finish_reason_text(FinishReason r);
ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens);
// Non-streaming body.
ojson response_body(const ResponseMeta& m, const std::string& text, FinishReason finish, int64_t prompt_tokens,
                    int64_t completion_tokens);
// One streamed chunk: the first chat chunk has role (and empty content); `finish` is set on the last.
ojson chunk_body(const ResponseMeta& m, const std::string& text, bool first, std::optional<FinishReason> finish);
// The chunk after the last one when stream_options.include_usage: no choices, only usage.
ojson usage_chunk(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace hearth::server
