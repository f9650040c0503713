// What every generation route shares: the loaded model's context, the parsed request, the
// sampling fields (request -> server flag -> generation_config.json -> built-in) and the chat
// prompt (template -> ids, plus what the output parser must know about it).
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
#include "server/generation_reader.h"

namespace hearth::server {

using ojson = nlohmann::ordered_json;

enum class Endpoint { kChat, kCompletion, kMessages };
const char* endpoint_label(Endpoint e);  // "chat", "completion", "messages" (metrics)

// The server's flags: used when a request leaves a field out.
struct SamplingDefaults {
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k, max_tokens;
  std::optional<bool> thinking;  // --thinking: enable_thinking for templates that read it
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
  ToolFormat tool_format = ToolFormat::kNone;  // from the chat template
  bool has_reasoning = false;                  // the vocabulary has <think> and </think>
  // Prompt rendering and encoding are cheap; one at a time keeps the tokenizer's and the
  // template's shared state out of any race.
  std::mutex* prompt_mutex = nullptr;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  GenerationRequest generation;
  ReaderOptions reader;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // report logprobs (generation.top_logprobs says how many alternatives)
};

// Sampling, max_tokens and seed from `body` into out.generation. `max_temperature`: 2 for
// OpenAI, 1 for Anthropic. `max_tokens_name` is the field tried after max_completion_tokens.
void parse_sampling(const ojson& body, const ModelContext& ctx, double max_temperature, ParsedRequest& out);

// Renders a template request ({"messages", "tools"?, ...kwargs}) and encodes it; sets the
// reader's tool and reasoning parsing from the model and the rendered prompt.
void render_chat_prompt(ojson template_request, const ModelContext& ctx, ParsedRequest& out);

}  // namespace hearth::server
