#include "server/anthropic_api.h"

#include "server/request_fields.h"

namespace hearth::server {

namespace {

std::string text_of_blocks(const ojson& blocks, const std::string& where) {
  if (blocks.is_string()) return blocks.get<std::string>();
  if (!blocks.is_array()) bad_field(where, "must be a string or a list of text blocks");
  std::string text;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const ojson& b = blocks[i];
    const std::string bw = where + "[" + std::to_string(i) + "]";
    if (!b.is_object() || required_string(b, "type", bw) != "text") bad_field(bw, "must be a text block");
    text += required_string(b, "text", bw);
  }
  return text;
}

// One Anthropic message -> the template's messages: tool results become "tool" messages
// (before the turn's text, where they belong in the conversation), tool_use blocks become
// tool_calls, thinking blocks reasoning_content.
void convert_message(const ojson& m, const std::string& where, ojson& out) {
  if (!m.is_object()) bad_field(where, "must be an object");
  const std::string& role = required_string(m, "role", where);
  if (role != "user" && role != "assistant")
    bad_field(where + ".role", "must be user or assistant, got '" + role + "'");
  auto content_it = m.find("content");
  if (content_it == m.end()) bad_field(where + ".content", "is required");
  const ojson& content = *content_it;
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad_field(where + ".content", "must be a string or a list of content blocks");
  std::string text, thinking;
  ojson tool_calls = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& b = content[i];
    const std::string bw = where + ".content[" + std::to_string(i) + "]";
    if (!b.is_object()) bad_field(bw, "must be a content block object");
    const std::string type = required_string(b, "type", bw);
    if (type == "text") {
      text += required_string(b, "text", bw);
    } else if (type == "thinking" && role == "assistant") {
      thinking += required_string(b, "thinking", bw);
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Opaque to us; nothing to show the model.
    } else if (type == "tool_use" && role == "assistant") {
      auto input = b.find("input");
      if (input == b.end() || !input->is_object()) bad_field(bw + ".input", "must be an object");
      tool_calls.push_back({{"id", required_string(b, "id", bw)},
                            {"type", "function"},
                            {"function", {{"name", required_string(b, "name", bw)}, {"arguments", *input}}}});
    } else if (type == "tool_result" && role == "user") {
      ojson result_content = "";
      if (auto c = b.find("content"); c != b.end() && !c->is_null())
        result_content = text_of_blocks(*c, bw + ".content");
      out.push_back(
          {{"role", "tool"}, {"tool_call_id", required_string(b, "tool_use_id", bw)}, {"content", result_content}});
    } else {
      bad_field(bw + ".type", "unsupported content block '" + type + "' in a " + role + " message");
    }
  }
  if (role == "user" && text.empty() && !out.empty() && out.back()["role"] == "tool") return;  // results only
  ojson msg = {{"role", role}, {"content", text}};
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
  out.push_back(std::move(msg));
}

// Anthropic tools {name, description, input_schema} -> the OpenAI function shape templates expect.
ojson convert_tools(const ojson& tools) {
  if (!tools.is_array()) bad_field("tools", "must be a list");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) bad_field(where, "must be an object");
    if (auto type = t.find("type"); type != t.end() && type->is_string() && *type != "custom") {
      bad_field(where + ".type", "server tools ('" + type->get<std::string>() + "') are not supported");
    }
    ojson fn = {{"name", required_string(t, "name", where)}};
    if (auto d = t.find("description"); d != t.end() && d->is_string()) fn["description"] = *d;
    auto schema = t.find("input_schema");
    if (schema == t.end() || !schema->is_object()) bad_field(where + ".input_schema", "must be an object");
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

const char* stop_reason(Finish f) {
  switch (f) {
    case Finish::kLength: return "max_tokens";
    case Finish::kStopSequence: return "stop_sequence";
    case Finish::kToolCalls: return "tool_use";
    default: return "end_turn";
  }
}

ojson usage(const ResponseMeta& m, int64_t output_tokens, int64_t cached) {
  // Anthropic counts cache reads apart from input_tokens.
  return {{"input_tokens", m.prompt_tokens - cached},
          {"output_tokens", output_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached}};
}

ojson stop_sequence_json(const GenerationReader& r) {
  return r.finish() == Finish::kStopSequence ? ojson(r.stop_sequence()) : ojson(nullptr);
}

ojson parsed_arguments(const std::string& arguments) {
  ojson input = ojson::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : ojson::object();
}

class AnthropicStream final : public StreamWriter {
 public:
  explicit AnthropicStream(const ResponseMeta& m) : m_(m) {}

  std::string begin() override {
    ojson msg = {{"id", m_.id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", m_.model},
                 {"content", ojson::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage", usage(m_, 0, 0)}};
    return sse_frame({{"type", "message_start"}, {"message", msg}}, "message_start") +
           sse_frame({{"type", "ping"}}, "ping");
  }

  std::string step(const ReaderStep& step) override {
    std::string out;
    for (const OutputEvent& e : step.events) {
      switch (e.kind) {
        case OutputEvent::Kind::kContent:
        case OutputEvent::Kind::kReasoning: {
          if (e.text.empty()) break;
          const bool thinking = e.kind == OutputEvent::Kind::kReasoning;
          const char* type = thinking ? "thinking" : "text";
          if (open_ != type) {
            out += close();
            out += open(type, thinking ? ojson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                       : ojson{{"type", "text"}, {"text", ""}});
          }
          ojson delta = thinking ? ojson{{"type", "thinking_delta"}, {"thinking", e.text}}
                                 : ojson{{"type", "text_delta"}, {"text", e.text}};
          out +=
              sse_frame({{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}}, "content_block_delta");
          break;
        }
        case OutputEvent::Kind::kToolCallBegin:
          out += close();
          out += open("tool_use", {{"type", "tool_use"}, {"id", e.id}, {"name", e.name}, {"input", ojson::object()}});
          break;
        case OutputEvent::Kind::kToolCallArguments:
          if (open_ != "tool_use") break;
          out += sse_frame({{"type", "content_block_delta"},
                            {"index", index_},
                            {"delta", {{"type", "input_json_delta"}, {"partial_json", e.text}}}},
                           "content_block_delta");
          break;
      }
    }
    return out;
  }

  std::string end(const GenerationReader& r) override {
    std::string out = close();
    ojson delta = {{"stop_reason", stop_reason(r.finish())}, {"stop_sequence", stop_sequence_json(r)}};
    out += sse_frame(
        {{"type", "message_delta"}, {"delta", delta}, {"usage", usage(m_, r.completion_tokens(), r.cached_tokens())}},
        "message_delta");
    return out + sse_frame({{"type", "message_stop"}}, "message_stop");
  }

  std::string error(const std::string& message) override {
    return sse_frame(anthropic_error_body(500, message), "error");
  }

 private:
  std::string open(const std::string& type, const ojson& block) {
    open_ = type;
    ++index_;
    return sse_frame({{"type", "content_block_start"}, {"index", index_}, {"content_block", block}},
                     "content_block_start");
  }
  std::string close() {
    if (open_.empty()) return "";
    open_.clear();
    return sse_frame({{"type", "content_block_stop"}, {"index", index_}}, "content_block_stop");
  }

  ResponseMeta m_;
  std::string open_;  // the open block's type, "" when none
  int index_ = -1;
};

}  // namespace

ParsedRequest parse_messages_request(const ojson& body, const ModelContext& ctx) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  ParsedRequest out;
  out.endpoint = Endpoint::kMessages;
  if (const ojson* m = field(body, "model"); m != nullptr && !m->is_string()) bad_field("model", "must be a string");
  // Anthropic requires max_tokens.
  if (field(body, "max_tokens") == nullptr) bad_field("max_tokens", "is required");
  parse_sampling(body, ctx, 1.0, out);
  out.reader.stops = string_list_field(body, "stop_sequences");
  out.stream = bool_field(body, "stream").value_or(false);

  ojson messages = ojson::array();
  if (const ojson* system = field(body, "system"))
    messages.push_back({{"role", "system"}, {"content", text_of_blocks(*system, "system")}});
  const ojson* msgs = field(body, "messages");
  if (msgs == nullptr) bad_field("messages", "is required");
  if (!msgs->is_array()) bad_field("messages", "must be a list");
  if (msgs->empty()) bad_field("messages", "must not be empty");
  for (size_t i = 0; i < msgs->size(); ++i)
    convert_message((*msgs)[i], "messages[" + std::to_string(i) + "]", messages);

  ojson tmpl_req;
  tmpl_req["messages"] = std::move(messages);
  bool tools_off = false;
  if (const ojson* choice = field(body, "tool_choice")) {
    if (!choice->is_object() || !choice->contains("type") || !(*choice)["type"].is_string()) {
      bad_field("tool_choice", "must be an object with a type (auto, any, tool, none)");
    }
    const std::string t = (*choice)["type"].get<std::string>();
    if (t != "auto" && t != "any" && t != "tool" && t != "none")
      bad_field("tool_choice.type", "must be auto, any, tool or none");
    tools_off = t == "none";
  }
  if (const ojson* tools = field(body, "tools")) {
    ojson converted = convert_tools(*tools);
    if (!converted.empty() && !tools_off) tmpl_req["tools"] = std::move(converted);
  }
  tmpl_req["add_generation_prompt"] = true;
  if (const ojson* thinking = field(body, "thinking")) {
    if (!thinking->is_object() || !thinking->contains("type") || !(*thinking)["type"].is_string()) {
      bad_field("thinking", "must be an object {\"type\": \"enabled\" | \"adaptive\" | \"disabled\"}");
    }
    const std::string t = (*thinking)["type"].get<std::string>();
    if (t != "enabled" && t != "disabled" && t != "adaptive")
      bad_field("thinking.type", "must be enabled, adaptive or disabled");
    tmpl_req["enable_thinking"] = t != "disabled";
  }
  render_chat_prompt(std::move(tmpl_req), ctx, out);
  return out;
}

ojson anthropic_response(const ResponseMeta& m, const GenerationOutput& out, const GenerationReader& reader) {
  ojson content = ojson::array();
  if (!out.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", out.reasoning}, {"signature", ""}});
  if (!out.content.empty() || out.tool_calls.empty()) content.push_back({{"type", "text"}, {"text", out.content}});
  for (const ToolCallOut& c : out.tool_calls) {
    content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", parsed_arguments(c.arguments)}});
  }
  return {{"id", m.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", m.model},
          {"content", content},
          {"stop_reason", stop_reason(reader.finish())},
          {"stop_sequence", stop_sequence_json(reader)},
          {"usage", usage(m, reader.completion_tokens(), reader.cached_tokens())}};
}

std::unique_ptr<StreamWriter> anthropic_stream_writer(const ResponseMeta& m) {
  return std::make_unique<AnthropicStream>(m);
}

ojson anthropic_error_body(int status, const std::string& message) {
  const char* type = "api_error";
  switch (status) {
    case 400: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503:
    case 529: type = "overloaded_error"; break;
    default: break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

}  // namespace hearth::server
