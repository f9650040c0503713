#include "server/output_parser.h"

#include <nlohmann/json.hpp>

#include "server/tool_calls/formats.h"

namespace hearth::server {

using tool_calls::kWhitespace;

namespace {

constexpr std::string_view kThink = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

bool contains(std::string_view text, std::string_view what) { return text.find(what) != std::string_view::npos; }

}  // namespace

ToolFormat detect_tool_format(std::string_view t) {
  // Most specific first. The Hermes check wants the JSON shape next to the tag, in the
  // instructions ({"name": <function-name>, ...} in Qwen's, written \"name\" inside a Jinja
  // string) or the rendering ('<tool_call>\n{"name": "'), so GLM's and Laguna's
  // <tool_call>name<arg_key>... and MiniMax's <tool_call><invoke name=...> are not taken
  // for it. Llama 3.x asks for {"name": function name, "parameters": dictionary of ...};
  // 3.1/3.3 also mention <|python_tag|>. Functionary v3.1 mentions <|python_tag|> too but
  // calls with a bare <function=f>{...}</function>, which we do not parse.
  if (contains(t, "[TOOL_CALLS]")) return ToolFormat::kMistral;
  if (contains(t, "<tool_call>")) {
    if (contains(t, "<function=")) return ToolFormat::kQwen3Coder;
    if (contains(t, "{\"name\"") || contains(t, "{\\\"name\\\"")) return ToolFormat::kHermes;
    return ToolFormat::kNone;
  }
  if (contains(t, "<function=")) return ToolFormat::kNone;
  if (contains(t, "<|python_tag|>") || contains(t, "\"parameters\": dictionary")) return ToolFormat::kLlama3Json;
  return ToolFormat::kNone;
}

bool prompt_opens_reasoning(std::string_view rendered_prompt) {
  const size_t last = rendered_prompt.find_last_not_of(kWhitespace);
  return last != std::string_view::npos && rendered_prompt.substr(0, last + 1).ends_with(kThink);
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolFormat format, const nlohmann::ordered_json& tools,
                                                      std::function<std::string()> new_call_id) {
  switch (format) {
    case ToolFormat::kNone: return nullptr;
    case ToolFormat::kHermes: return tool_calls::make_hermes(std::move(new_call_id));
    case ToolFormat::kQwen3Coder: return tool_calls::make_qwen3_coder(tools, std::move(new_call_id));
    case ToolFormat::kLlama3Json: return tool_calls::make_llama3_json(std::move(new_call_id));
    case ToolFormat::kMistral: return tool_calls::make_mistral(std::move(new_call_id));
  }
  return nullptr;
}

OutputParser::OutputParser(ToolFormat tool_format, bool parse_reasoning, bool starts_in_reasoning,
                           const nlohmann::ordered_json& tools, std::function<std::string()> new_call_id)
    : tools_(make_tool_call_parser(tool_format, tools, std::move(new_call_id))),
      phase_(parse_reasoning ? Phase::kStart : Phase::kContent),
      starts_in_reasoning_(starts_in_reasoning) {}

OutputParser::~OutputParser() = default;

void OutputParser::push(std::string_view text, std::vector<OutputEvent>* out) {
  if (phase_ == Phase::kContent) return push_content(text, out);
  held_.append(text);
  for (;;) {
    switch (phase_) {
      case Phase::kStart: {  // only whitespace so far, perhaps a partial "<think>"
        const size_t at = held_.find_first_not_of(kWhitespace);
        if (at == std::string::npos) return;
        const std::string_view rest = std::string_view(held_).substr(at);
        if (tool_calls::is_partial(rest, kThink)) return;
        if (rest.starts_with(kThink)) {
          // Also when the prompt opened the block: some models write the tag again.
          held_.erase(0, at + kThink.size());
          phase_ = Phase::kReasoning;
        } else {
          phase_ = starts_in_reasoning_ ? Phase::kReasoning : Phase::kContent;
        }
        break;
      }
      case Phase::kReasoning:
        if (!tool_calls::take_until_marker(&held_, kThinkEnd, OutputEvent::Kind::kReasoning, out)) return;
        phase_ = Phase::kAfterReasoning;
        break;
      case Phase::kAfterReasoning: {
        const size_t at = held_.find_first_not_of("\r\n");
        held_.erase(0, at);
        if (at == std::string::npos) return;
        phase_ = Phase::kContent;
        break;
      }
      case Phase::kContent: {
        const std::string text = std::move(held_);
        held_.clear();
        return push_content(text, out);
      }
    }
  }
}

void OutputParser::finish(std::vector<OutputEvent>* out) {
  if (phase_ == Phase::kReasoning || (phase_ == Phase::kStart && starts_in_reasoning_)) {
    tool_calls::emit_reasoning(held_, out);  // unclosed: all of it is reasoning
  } else if (phase_ == Phase::kStart) {
    push_content(held_, out);  // whitespace or a partial "<think>": content after all
  }
  held_.clear();
  phase_ = Phase::kContent;
  if (!tools_) return;
  std::vector<OutputEvent> events;
  tools_->finish(&events);
  trim_around_calls(events, out);
  if (!saw_tool_call_) tool_calls::emit_content(pending_ws_, out);
  pending_ws_.clear();
}

void OutputParser::push_content(std::string_view text, std::vector<OutputEvent>* out) {
  if (!tools_) return tool_calls::emit_content(text, out);
  std::vector<OutputEvent> events;
  tools_->push(text, &events);
  trim_around_calls(events, out);
}

// Content whitespace is held until non-whitespace content follows; a tool call drops it,
// and the whitespace that starts the content after a call. The content text is then the
// same whichever way the output was split.
void OutputParser::trim_around_calls(std::vector<OutputEvent>& events, std::vector<OutputEvent>* out) {
  for (OutputEvent& e : events) {
    if (e.kind == OutputEvent::Kind::kToolCallBegin) {
      pending_ws_.clear();
      after_call_ = saw_tool_call_ = true;
    }
    if (e.kind != OutputEvent::Kind::kContent) {
      out->push_back(std::move(e));
      continue;
    }
    std::string_view text = e.text;
    if (after_call_) {
      text.remove_prefix(std::min(text.size(), text.find_first_not_of(kWhitespace)));
      if (text.empty()) continue;
      after_call_ = false;
    }
    const size_t last = text.find_last_not_of(kWhitespace);
    if (last == std::string_view::npos) {
      pending_ws_.append(text);
      continue;
    }
    tool_calls::emit_content(pending_ws_ + std::string(text.substr(0, last + 1)), out);
    pending_ws_ = text.substr(last + 1);
  }
}

}  // namespace hearth::server
