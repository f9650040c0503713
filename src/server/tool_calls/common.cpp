// Helpers shared by the tool-call parsers (see formats.h).
#include <algorithm>

#include "server/tool_calls/formats.h"

namespace hearth::server::tool_calls {

void emit_content(std::string_view text, std::vector<OutputEvent>* out) {
  if (!text.empty()) out->push_back({.kind = OutputEvent::Kind::kContent, .text = std::string(text)});
}

void emit_reasoning(std::string_view text, std::vector<OutputEvent>* out) {
  if (!text.empty()) out->push_back({.kind = OutputEvent::Kind::kReasoning, .text = std::string(text)});
}

bool take_until_marker(std::string* buf, std::string_view marker, OutputEvent::Kind kind,
                       std::vector<OutputEvent>* out) {
  auto emit = [&](std::string_view t) {
    if (!t.empty()) out->push_back({.kind = kind, .text = std::string(t)});
  };
  const size_t at = buf->find(marker);
  if (at != std::string::npos) {
    emit(std::string_view(*buf).substr(0, at));
    buf->erase(0, at + marker.size());
    return true;
  }
  // Markers start with an ASCII byte, so the cut never splits a UTF-8 character.
  size_t keep = std::min(marker.size() - 1, buf->size());
  while (keep > 0 && buf->compare(buf->size() - keep, keep, marker, 0, keep) != 0) --keep;
  emit(std::string_view(*buf).substr(0, buf->size() - keep));
  buf->erase(0, buf->size() - keep);
  return false;
}

JsonExtent::State JsonExtent::scan(std::string_view text) {
  for (; state_ == State::kOpen && pos_ < text.size(); ++pos_) {
    const char c = text[pos_];
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      stack_.push_back(c == '{' ? '}' : ']');
      if (stack_.size() > kDepthMax) state_ = State::kBad;
    } else if (c == '}' || c == ']') {
      if (stack_.empty() || stack_.back() != c) {
        state_ = State::kBad;
      } else {
        stack_.pop_back();
        if (stack_.empty()) state_ = State::kDone;
      }
    } else if (stack_.empty()) {
      state_ = State::kBad;  // text[0] is not a bracket
    }
  }
  return state_;
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::optional<ParsedCall> call_from_json(const nlohmann::ordered_json& j, bool args_optional) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ParsedCall call{.name = name->get<std::string>(), .arguments = "{}"};
  if (args == j.end()) {
    if (!args_optional) return std::nullopt;
  } else if (args->is_object()) {
    call.arguments = dump_json(*args);
  } else if (args->is_string()) {
    // Nesting inside the string was not bounded by the caller's JsonExtent: bound it here.
    const std::string_view text = args->get_ref<const std::string&>();
    const size_t at = text.find_first_not_of(kWhitespace);
    JsonExtent extent;
    if (at == std::string_view::npos || extent.scan(text.substr(at)) != JsonExtent::State::kDone) return std::nullopt;
    const auto inner = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!inner.is_object()) return std::nullopt;
    call.arguments = dump_json(inner);
  } else if (!args->is_null() || !args_optional) {
    return std::nullopt;
  }
  return call;
}

void emit_call(const ParsedCall& call, int index, const NewCallId& new_call_id, std::vector<OutputEvent>* out) {
  out->push_back({.kind = OutputEvent::Kind::kToolCallBegin,
                  .index = index,
                  .id = new_call_id ? new_call_id() : "call_" + std::to_string(index),
                  .name = call.name});
  out->push_back({.kind = OutputEvent::Kind::kToolCallArguments, .text = call.arguments, .index = index});
}

}  // namespace hearth::server::tool_calls
