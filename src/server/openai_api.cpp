#include "server/openai_api.h"

#include "server/request_fields.h"

namespace hearth::server {

namespace {

// Fields whose effect Hearth does not implement: refusing beats silently ignoring them.
void refuse_unsupported(const ojson& body) {
  if (auto n = integer_field(body, "n"); n && *n != 1) bad_field("n", "only n = 1 is supported");
  if (bool_field(body, "echo").value_or(false)) bad_field("echo", "echo is not supported");
}

// Everything both OpenAI endpoints share: sampling, max_tokens, stop, stream.
void parse_common(const ojson& body, const ModelContext& ctx, ParsedRequest& out) {
  if (const ojson* m = field(body, "model"); m != nullptr && !m->is_string()) bad_field("model", "must be a string");
  refuse_unsupported(body);
  parse_sampling(body, ctx, 2.0, out);
  out.reader.stops = string_list_field(body, "stop");
  out.stream = bool_field(body, "stream").value_or(false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_field("stream_options", "must be an object");
    out.include_usage = bool_field(*so, "include_usage").value_or(false);
  }
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
    const std::string& type = required_string(part, "type", pw);
    if (type != "text") bad_field(pw + ".type", "only \"text\" parts are supported, got " + ojson(type).dump());
    text += required_string(part, "text", pw);
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
    const std::string& r = required_string(m, "role", where);
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
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null() && !tc->is_array()) {
      bad_field(where + ".tool_calls", "must be a list");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// tools + tool_choice -> the tools the template sees ("none" hides them, as the model must
// not call any).
std::optional<ojson> tools_field(const ojson& body) {
  const ojson* tools = field(body, "tools");
  if (tools == nullptr) return std::nullopt;
  if (!tools->is_array()) bad_field("tools", "must be a list");
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad_field(where, "must be an object {\"type\": \"function\", \"function\": {...}}");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) bad_field(where + ".function", "must be an object");
    required_string(*fn, "name", where + ".function");
  }
  if (const ojson* choice = field(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") return std::nullopt;
      if (c != "auto" && c != "required") bad_field("tool_choice", "must be none, auto, required or a function");
    } else if (!choice->is_object()) {
      bad_field("tool_choice", "must be a string or an object");
    }
  }
  if (tools->empty()) return std::nullopt;
  return *tools;
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
  if (std::optional<ojson> tools = tools_field(body)) tmpl_req["tools"] = std::move(*tools);
  tmpl_req["add_generation_prompt"] = true;
  if (std::optional<std::string> effort = string_field(body, "reasoning_effort")) {
    static const char* const kEfforts[] = {"none", "minimal", "low", "medium", "high"};
    if (std::find(std::begin(kEfforts), std::end(kEfforts), *effort) == std::end(kEfforts)) {
      bad_field("reasoning_effort", "must be none, minimal, low, medium or high");
    }
    // Templates that know it read reasoning_effort (gpt-oss); "none" also turns off the
    // enable_thinking switch of Qwen3-style templates.
    tmpl_req["reasoning_effort"] = *effort;
    if (*effort == "none") tmpl_req["enable_thinking"] = false;
  }
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad_field("chat_template_kwargs", "must be an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools") bad_field("chat_template_kwargs." + it.key(), "is reserved");
      tmpl_req[it.key()] = it.value();
    }
  }
  parse_common(body, ctx, out);
  out.logprobs = bool_field(body, "logprobs").value_or(false);
  if (std::optional<int64_t> top = integer_field(body, "top_logprobs")) {
    if (*top < 0 || *top > 20) bad_field("top_logprobs", "must be in 0..20");
    if (!out.logprobs) bad_field("top_logprobs", "needs logprobs: true");
    out.generation.top_logprobs = static_cast<int>(*top);
  } else if (out.logprobs) {
    out.generation.top_logprobs = 0;
  }
  render_chat_prompt(std::move(tmpl_req), ctx, out);
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
  // The legacy field: an integer, how many alternatives per token (OpenAI allows 0..5).
  if (std::optional<int64_t> lp = integer_field(body, "logprobs")) {
    if (*lp < 0 || *lp > 20) bad_field("logprobs", "must be in 0..20");
    out.logprobs = true;
    out.generation.top_logprobs = static_cast<int>(*lp);
  }
  std::lock_guard<std::mutex> lock(*ctx.prompt_mutex);
  out.generation.prompt = ctx.tokenizer->encode(prompt->get<std::string>(), /*add_special_tokens=*/true);
  return out;
}

std::string finish_reason_text(Finish f) {
  switch (f) {
    case Finish::kLength: return "length";
    case Finish::kToolCalls: return "tool_calls";
    default: return "stop";
  }
}

ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  ojson u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
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

std::string token_text(const Tokenizer& tok, int32_t id) { return tok.decode(std::span<const int32_t>(&id, 1)); }

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
ojson chat_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer& tok) {
  ojson content = ojson::array();
  for (const TokenLogprob& t : lps) {
    const std::string text = token_text(tok, t.token);
    ojson top = ojson::array();
    for (const auto& [id, lp] : t.logprobs.top) {
      const std::string alt = token_text(tok, id);
      top.push_back({{"token", alt}, {"logprob", lp}, {"bytes", bytes_of(alt)}});
    }
    content.push_back(
        {{"token", text}, {"logprob", t.logprobs.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

// Completions (legacy): parallel lists tokens / token_logprobs / top_logprobs / text_offset.
ojson completion_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer& tok, int64_t* offset) {
  ojson tokens = ojson::array(), token_lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const TokenLogprob& t : lps) {
    const std::string text = token_text(tok, t.token);
    tokens.push_back(text);
    token_lps.push_back(t.logprobs.logprob);
    ojson top = ojson::object();
    for (const auto& [id, lp] : t.logprobs.top) top[token_text(tok, id)] = lp;
    tops.push_back(top);
    offsets.push_back(*offset);
    *offset += static_cast<int64_t>(text.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

ojson tool_calls_json(const std::vector<ToolCallOut>& calls) {
  ojson out = ojson::array();
  for (const ToolCallOut& c : calls) {
    out.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

class OpenAiStream final : public StreamWriter {
 public:
  OpenAiStream(const ResponseMeta& m, const Tokenizer& tok) : m_(m), tok_(tok) {}

  std::string begin() override {
    if (m_.endpoint != Endpoint::kChat) return "";
    return sse_frame(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, ojson(nullptr)));
  }

  std::string step(const ReaderStep& step) override {
    std::string out;
    ojson lp = logprobs(step.logprobs);
    if (m_.endpoint == Endpoint::kCompletion) {
      std::string text;
      for (const OutputEvent& e : step.events) text += e.text;
      if (!text.empty() || !lp.is_null()) out += sse_frame(chunk(text, lp, ojson(nullptr)));
      return out;
    }
    // Consecutive events of one kind go out as one delta; each tool call event is its own.
    ojson delta = ojson::object();
    auto flush = [&] {
      if (delta.empty() && lp.is_null()) return;
      out += sse_frame(chunk(delta, lp, ojson(nullptr)));
      delta = ojson::object();
      lp = ojson(nullptr);
    };
    for (const OutputEvent& e : step.events) {
      const char* key = e.kind == OutputEvent::Kind::kContent     ? "content"
                        : e.kind == OutputEvent::Kind::kReasoning ? "reasoning_content"
                                                                  : nullptr;
      if (key != nullptr) {
        if (!delta.empty() && !delta.contains(key)) flush();
        delta[key] = delta.value(key, std::string()) + e.text;
        continue;
      }
      flush();
      ojson call = {{"index", e.index}};
      if (e.kind == OutputEvent::Kind::kToolCallBegin) {
        call["id"] = e.id;
        call["type"] = "function";
        call["function"] = {{"name", e.name}, {"arguments", ""}};
      } else {
        call["function"] = {{"arguments", e.text}};
      }
      delta["tool_calls"] = ojson::array({call});
      flush();
    }
    flush();
    return out;
  }

  std::string end(const GenerationReader& reader) override {
    std::string out = sse_frame(chunk(m_.endpoint == Endpoint::kChat ? ojson::object() : ojson(""), ojson(nullptr),
                                      finish_reason_text(reader.finish())));
    if (m_.include_usage) {
      ojson j = envelope(m_, true);
      j["choices"] = ojson::array();
      j["usage"] = usage_json(m_.prompt_tokens, reader.completion_tokens(), reader.cached_tokens());
      out += sse_frame(j);
    }
    return out + "data: [DONE]\n\n";
  }

  std::string error(const std::string& message) override {
    return sse_frame(error_body(message, "server_error", "internal_error")) + "data: [DONE]\n\n";
  }

 private:
  ojson logprobs(const std::vector<TokenLogprob>& lps) {
    if (!m_.logprobs || lps.empty()) return ojson(nullptr);
    return m_.endpoint == Endpoint::kChat ? chat_logprobs(lps, tok_) : completion_logprobs(lps, tok_, &text_offset_);
  }
  // delta: the chat delta object, or the completion text.
  ojson chunk(const ojson& delta, const ojson& lp, const ojson& finish) {
    ojson j = envelope(m_, true);
    ojson choice;
    choice["index"] = 0;
    if (m_.endpoint == Endpoint::kChat) {
      choice["delta"] = delta;
    } else {
      choice["text"] = delta;
    }
    choice["logprobs"] = lp;
    choice["finish_reason"] = finish;
    j["choices"] = ojson::array({choice});
    return j;
  }

  ResponseMeta m_;
  const Tokenizer& tok_;
  int64_t text_offset_ = 0;
};

}  // namespace

ojson openai_response(const ResponseMeta& m, const GenerationOutput& out, const GenerationReader& reader,
                      const Tokenizer& tok) {
  ojson j = envelope(m, false);
  ojson choice;
  choice["index"] = 0;
  if (m.endpoint == Endpoint::kChat) {
    ojson msg = {{"role", "assistant"}};
    msg["content"] = out.content.empty() && !out.tool_calls.empty() ? ojson(nullptr) : ojson(out.content);
    if (!out.reasoning.empty()) msg["reasoning_content"] = out.reasoning;
    if (!out.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(out.tool_calls);
    choice["message"] = msg;
    choice["logprobs"] = m.logprobs ? chat_logprobs(out.logprobs, tok) : ojson(nullptr);
  } else {
    choice["text"] = out.content;
    int64_t offset = 0;
    choice["logprobs"] = m.logprobs ? completion_logprobs(out.logprobs, tok, &offset) : ojson(nullptr);
  }
  choice["finish_reason"] = finish_reason_text(reader.finish());
  j["choices"] = ojson::array({choice});
  j["usage"] = usage_json(m.prompt_tokens, reader.completion_tokens(), reader.cached_tokens());
  return j;
}

std::unique_ptr<StreamWriter> openai_stream_writer(const ResponseMeta& m, const Tokenizer& tok) {
  return std::make_unique<OpenAiStream>(m, tok);
}

std::string sse_frame(const ojson& data, const char* event) {
  std::string out;
  if (event != nullptr) out = std::string("event: ") + event + "\n";
  return out + "data: " + data.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

}  // namespace hearth::server
