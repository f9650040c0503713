#include "server/openai_api.h"

#include <random>

#include "server/api_error.h"

namespace hearth::server {

namespace {

// A field counts as given when present and not null (clients send null for "default").
const ojson* field(const ojson& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) bad_field(name, "must be a number");
  return v->get<double>();
}

std::optional<int64_t> integer_field(const ojson& body, const char* name) {
  const ojson* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) bad_field(name, "must be an integer");
  return v->get<int64_t>();
}

bool bool_field(const ojson& body, const char* name, bool fallback) {
  const ojson* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) bad_field(name, "must be true or false");
  return v->get<bool>();
}

std::vector<std::string> stop_field(const ojson& body) {
  const ojson* v = field(body, "stop");
  if (v == nullptr) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad_field("stop", "must be a string or a list of strings");
  std::vector<std::string> out;
  for (const ojson& s : *v) {
    if (!s.is_string()) bad_field("stop", "must be a string or a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// Fields whose effect Hearth does not implement yet: refusing beats silently ignoring them.
void refuse_unsupported(const ojson& body) {
  if (auto n = integer_field(body, "n"); n && *n != 1) bad_field("n", "only n = 1 is supported");
  if (bool_field(body, "logprobs", false)) bad_field("logprobs", "logprobs are not supported yet");
}

// Everything both endpoints share: sampling, max_tokens, stop, stream.
void parse_common(const ojson& body, const ModelContext& ctx, ParsedRequest& out) {
  if (const ojson* m = field(body, "model"); m != nullptr && !m->is_string()) bad_field("model", "must be a string");
  refuse_unsupported(body);
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
  std::optional<double> temp = number_field(body, "temperature");
  if (temp && *temp < 0) bad_field("temperature", "must be >= 0");
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
  if (std::optional<int64_t> seed = integer_field(body, "seed")) {
    s.seed = static_cast<uint64_t>(*seed);
  } else {
    s.seed = std::random_device{}();  // without a seed, samples differ between requests
  }

  out.stop = stop_field(body);
  out.stream = bool_field(body, "stream", false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_field("stream_options", "must be an object");
    out.include_usage = bool_field(*so, "include_usage", false);
  }
  out.generation.eos_ids = ctx.eos_ids;
}

// A message's content as the template sees it: a string (list content is joined text parts,
// as mlx_lm.server does).
ojson message_content(const ojson& content, const std::string& where, bool may_be_null) {
  if (content.is_null()) {
    if (!may_be_null) bad_field(where, "must be a string or a list of text parts");
    return content;
  }
  if (content.is_string()) return content;
  if (!content.is_array()) bad_field(where, "must be a string or a list of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string pw = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) bad_field(pw, "must be an object {\"type\": \"text\", \"text\": ...}");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) bad_field(pw + ".type", "must be a string");
    if (*type != "text") bad_field(pw + ".type", "only \"text\" parts are supported, got " + type->dump());
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) bad_field(pw + ".text", "must be a string");
    text += t->get<std::string>();
  }
  return text;
}

ojson validated_messages(const ojson& body) {
  const ojson* msgs = field(body, "messages");
  if (msgs == nullptr) bad_field("messages", "is required");
  if (!msgs->is_array()) bad_field("messages", "must be a list");
  if (msgs->empty()) bad_field("messages", "must not be empty");
  ojson out = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_field(where, "must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad_field(where + ".role", "must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      bad_field(where + ".role", "unknown role '" + r + "' (expected system, developer, user, assistant or tool)");
    }
    ojson msg = m;  // other keys (name, tool_calls, tool_call_id, ...) go to the template as sent
    auto content = m.find("content");
    // An assistant turn that only calls tools has no content.
    const bool may_be_null = r == "assistant";
    if (content == m.end()) {
      if (!may_be_null) bad_field(where + ".content", "is required");
    } else {
      msg["content"] = message_content(*content, where + ".content", may_be_null);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

ParsedRequest parse_chat_request(const ojson& body, const ModelContext& ctx) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  ParsedRequest out;
  out.endpoint = Endpoint::kChat;
  // The template request: messages, tools, add_generation_prompt, then chat_template_kwargs,
  // the order transformers' apply_chat_template uses.
  ojson tmpl_req;
  tmpl_req["messages"] = validated_messages(body);
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) bad_field("tools", "must be a list");
    if (!tools->empty()) tmpl_req["tools"] = *tools;
  }
  tmpl_req["add_generation_prompt"] = true;
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad_field("chat_template_kwargs", "must be an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools") bad_field("chat_template_kwargs." + it.key(), "is reserved");
      tmpl_req[it.key()] = it.value();
    }
  }
  parse_common(body, ctx, out);
  std::lock_guard<std::mutex> lock(*ctx.prompt_mutex);
  if (!ctx.renderer->has_template()) throw ApiError(400, "the model has no chat template; use /v1/completions");
  out.generation.prompt = ctx.renderer->encode_chat(tmpl_req);
  return out;
}

ParsedRequest parse_completion_request(const ojson& body, const ModelContext& ctx) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  ParsedRequest out;
  out.endpoint = Endpoint::kCompletion;
  const ojson* prompt = field(body, "prompt");
  if (prompt == nullptr) bad_field("prompt", "is required");
  if (!prompt->is_string()) bad_field("prompt", "must be a string");
  if (prompt->get_ref<const std::string&>().empty()) bad_field("prompt", "must not be empty");
  parse_common(body, ctx, out);
  std::lock_guard<std::mutex> lock(*ctx.prompt_mutex);
  out.generation.prompt = ctx.tokenizer->encode(prompt->get<std::string>(), /*add_special_tokens=*/true);
  return out;
}

std::string finish_reason_text(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  ojson u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", 0}};  // no prompt cache yet
  return u;
}

namespace {

ojson envelope(const ResponseMeta& m, bool chunk) {
  ojson j;
  j["id"] = m.id;
  j["object"] =
      m.endpoint == Endpoint::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  j["created"] = m.created;
  j["model"] = m.model;
  return j;
}

}  // namespace

ojson response_body(const ResponseMeta& m, const std::string& text, FinishReason finish, int64_t prompt_tokens,
                    int64_t completion_tokens) {
  ojson j = envelope(m, false);
  ojson choice;
  choice["index"] = 0;
  if (m.endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish_reason_text(finish);
  j["choices"] = ojson::array({choice});
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

ojson chunk_body(const ResponseMeta& m, const std::string& text, bool first, std::optional<FinishReason> finish) {
  ojson j = envelope(m, true);
  ojson choice;
  choice["index"] = 0;
  if (m.endpoint == Endpoint::kChat) {
    ojson delta = ojson::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish ? ojson(finish_reason_text(*finish)) : ojson(nullptr);
  j["choices"] = ojson::array({choice});
  return j;
}

ojson usage_chunk(const ResponseMeta& m, int64_t prompt_tokens, int64_t completion_tokens) {
  ojson j = envelope(m, true);
  j["choices"] = ojson::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

}  // namespace hearth::server
