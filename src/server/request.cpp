#include "server/request.h"

#include <random>

#include "server/request_fields.h"

namespace hearth::server {

const char* endpoint_label(Endpoint e) {
  switch (e) {
    case Endpoint::kChat: return "chat";
    case Endpoint::kCompletion: return "completion";
    case Endpoint::kMessages: return "messages";
  }
  return "unknown";
}

namespace {

std::vector<std::pair<int32_t, float>> logit_bias_field(const ojson& body, int64_t vocab) {
  std::vector<std::pair<int32_t, float>> out;
  const ojson* v = field(body, "logit_bias");
  if (v == nullptr) return out;
  if (!v->is_object()) bad_field("logit_bias", "must be an object of token id -> bias");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    const std::string where = "logit_bias[\"" + key + "\"]";
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || key.empty()) bad_field(where, "the key must be a token id (an integer)");
    if (id < 0 || id >= vocab)
      bad_field(where, "token id " + key + " is outside the vocabulary of " + std::to_string(vocab));
    if (!it.value().is_number()) bad_field(where, "the bias must be a number");
    const double bias = it.value().get<double>();
    if (!(bias >= -100 && bias <= 100)) bad_field(where, "the bias must be between -100 and 100");
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return out;
}

}  // namespace

void parse_sampling(const ojson& body, const ModelContext& ctx, double max_temperature, ParsedRequest& out) {
  const SamplingDefaults& d = ctx.defaults;
  const GenerationConfig& gen = ctx.generation;
  const bool model_samples = gen.do_sample.value_or(false);

  std::optional<int64_t> max_tokens = integer_field(body, "max_completion_tokens");
  const char* max_name = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = integer_field(body, "max_tokens");
    max_name = "max_tokens";
  }
  if (max_tokens && *max_tokens < 1) bad_field(max_name, "must be >= 1");
  out.generation.max_tokens = max_tokens.value_or(d.max_tokens.value_or(kDefaultMaxTokens));

  // Request field, then the server's flag, then generation_config.json (when it samples),
  // then greedy, as mlx_lm.server (temperature 0.0 by default).
  std::optional<double> temp = number_field(body, "temperature", 0, max_temperature);
  std::optional<double> top_p = number_field(body, "top_p");
  if (top_p && !(*top_p > 0 && *top_p <= 1)) bad_field("top_p", "must be in (0, 1]");
  std::optional<int64_t> top_k = integer_field(body, "top_k");
  if (top_k && *top_k < -1) bad_field("top_k", "must be >= 0 (0 or -1 = off)");
  SamplingParams& s = out.generation.sampling;
  s.temperature =
      static_cast<float>(temp.value_or(d.temperature.value_or(model_samples ? gen.temperature.value_or(1.0) : 0.0)));
  s.top_p = static_cast<float>(top_p.value_or(d.top_p.value_or(model_samples ? gen.top_p.value_or(1.0) : 1.0)));
  const int64_t k = top_k.value_or(d.top_k.value_or(model_samples ? gen.top_k.value_or(0) : 0));
  s.top_k = k < 0 ? 0 : k;
  s.min_p = static_cast<float>(number_field(body, "min_p", 0, 1).value_or(0.0));
  if (auto rp = number_field(body, "repetition_penalty")) {
    if (!(*rp > 0 && *rp <= 10)) bad_field("repetition_penalty", "must be in (0, 10]");
    s.repetition_penalty = static_cast<float>(*rp);
  }
  if (auto rc = integer_field(body, "repetition_context_size")) {
    if (*rc < 0) bad_field("repetition_context_size", "must be >= 0 (0 = the whole sequence)");
    s.repetition_context_size = *rc;
  }
  s.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", -2, 2).value_or(0.0));
  s.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", -2, 2).value_or(0.0));
  s.logit_bias = logit_bias_field(body, ctx.tokenizer->vocab_size());
  if (const ojson* seed = field(body, "seed")) {
    // Any 64-bit pattern: negative seeds and ones past int64 (unsigned in JSON) alike.
    if (!seed->is_number_integer()) bad_field("seed", "must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    s.seed = std::random_device{}();  // without a seed, samples differ between requests
  }
  out.generation.eos_ids = ctx.eos_ids;
}

void render_chat_prompt(ojson template_request, const ModelContext& ctx, ParsedRequest& out) {
  const bool tools = template_request.contains("tools");
  if (ctx.defaults.thinking && !template_request.contains("enable_thinking")) {
    template_request["enable_thinking"] = *ctx.defaults.thinking;
  }
  std::lock_guard<std::mutex> lock(*ctx.prompt_mutex);
  if (!ctx.renderer->has_template()) throw ApiError(400, "the model has no chat template; use /v1/completions");
  const std::string text = ctx.renderer->render(template_request);
  out.generation.prompt = ctx.tokenizer->encode(text, /*add_special_tokens=*/false);
  out.reader.tool_format = tools ? ctx.tool_format : ToolFormat::kNone;
  if (tools) out.reader.tools = template_request["tools"];
  out.reader.parse_reasoning = ctx.has_reasoning;
  out.reader.starts_in_reasoning = ctx.has_reasoning && prompt_opens_reasoning(text);
}

}  // namespace hearth::server
