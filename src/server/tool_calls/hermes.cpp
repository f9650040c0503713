// Hermes tool calls (NousResearch Hermes 2 Pro/3, Qwen2.5, Qwen3, QwQ, Granite 4), one
// JSON object per call between tags, several calls in a row:
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// The closing tag is looked for after the JSON value ends, so a string argument holding
// "</tool_call>" does not cut the call. A JSON array of such objects inside one pair of tags
// (Apriel) gives one call per element. Anything else inside the tags (bad JSON, no "name",
// text after the JSON) is content, as is a call still unclosed when generation ends.
#include "server/tool_calls/formats.h"

namespace hearth::server::tool_calls {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

class HermesParser final : public ToolCallParser {
 public:
  explicit HermesParser(NewCallId new_call_id) : new_call_id_(std::move(new_call_id)) {}

  void push(std::string_view text, std::vector<OutputEvent>* out) override {
    buf_.append(text);
    for (;;) {
      if (in_call_) {
        if (!step_call(out)) return;
      } else {
        if (!take_until_marker(&buf_, kOpen, OutputEvent::Kind::kContent, out)) return;
        start_call();
      }
    }
  }

  void finish(std::vector<OutputEvent>* out) override {
    if (in_call_) emit_content(kOpen, out);
    emit_content(buf_, out);
    buf_.clear();
    in_call_ = false;
  }

 private:
  void start_call() {
    in_call_ = true;
    value_at_ = std::string::npos;
    extent_ = JsonExtent();
  }

  // Not a call after all: the tag is content and the text after it is scanned again as
  // content (it may hold the next, well-formed, call).
  bool give_up(std::vector<OutputEvent>* out) {
    emit_content(kOpen, out);
    in_call_ = false;
    return true;
  }

  // buf_ holds the text after <tool_call>. Returns true when the call ended (emitted or
  // given up), false when more text is needed.
  bool step_call(std::vector<OutputEvent>* out) {
    if (value_at_ == std::string::npos) {
      value_at_ = buf_.find_first_not_of(kWhitespace);
      if (value_at_ == std::string::npos) return false;
      if (buf_[value_at_] != '{' && buf_[value_at_] != '[') return give_up(out);
    }
    const JsonExtent::State state = extent_.scan(std::string_view(buf_).substr(value_at_));
    if (state == JsonExtent::State::kOpen) return false;
    if (state == JsonExtent::State::kBad) return give_up(out);
    const size_t value_end = value_at_ + extent_.end();
    const size_t close_at = buf_.find_first_not_of(kWhitespace, value_end);
    if (close_at == std::string::npos) return false;
    const std::string_view rest = std::string_view(buf_).substr(close_at);
    if (is_partial(rest, kClose)) return false;
    if (!rest.starts_with(kClose)) return give_up(out);

    std::vector<ParsedCall> calls;
    const auto j = nlohmann::ordered_json::parse(buf_.begin() + value_at_, buf_.begin() + value_end, nullptr, false);
    for (const auto& item : j.is_array() ? j : nlohmann::ordered_json::array({j})) {
      std::optional<ParsedCall> call = call_from_json(item, /*args_optional=*/true);
      if (!call) return give_up(out);
      calls.push_back(std::move(*call));
    }
    if (calls.empty()) return give_up(out);
    for (const ParsedCall& call : calls) emit_call(call, n_calls_++, new_call_id_, out);
    buf_.erase(0, close_at + kClose.size());
    in_call_ = false;
    return true;
  }

  NewCallId new_call_id_;
  std::string buf_;  // unconsumed text; inside a call, what follows <tool_call>
  bool in_call_ = false;
  size_t value_at_ = 0;  // inside a call: where the JSON value starts (npos: not seen yet)
  JsonExtent extent_;
  int n_calls_ = 0;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_hermes(NewCallId new_call_id) {
  return std::make_unique<HermesParser>(std::move(new_call_id));
}

}  // namespace hearth::server::tool_calls
