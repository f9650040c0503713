// Llama 3.1 / 3.2 / 3.3 JSON tool calls. With tools the model answers with nothing but the
// call, optionally after the <|python_tag|> special token, several separated by ";":
//   {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}}
// so, like vLLM's llama3_json parser when streaming, calls are recognized only when the
// output (after whitespace) STARTS with '{' or <|python_tag|>; a '{' later in prose is
// content. Arguments come from "parameters" (the format the templates ask for) or
// "arguments". Text after the last call is content. An object that is not a call (the user
// asked for JSON) is content from there on, as is <|python_tag|> followed by code
// (Llama's built-in tools: brave_search.call(query="...")), which we do not run.
#include "server/tool_calls/formats.h"

namespace hearth::server::tool_calls {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

class Llama3JsonParser final : public ToolCallParser {
 public:
  explicit Llama3JsonParser(NewCallId new_call_id) : new_call_id_(std::move(new_call_id)) {}

  void push(std::string_view text, std::vector<OutputEvent>* out) override {
    if (state_ == State::kContent) return emit_content(text, out);
    buf_.append(text);
    while (step(out)) {
    }
  }

  void finish(std::vector<OutputEvent>* out) override {
    // Separators after the last call (whitespace, ";") are dropped; anything else is content.
    const bool only_separators =
        n_calls_ > 0 && state_ == State::kBetween && buf_.find_first_not_of(kSeparators) == std::string::npos;
    if (!only_separators) emit_content(skipped_ + buf_, out);
    skipped_.clear();
    buf_.clear();
    state_ = State::kContent;
  }

 private:
  // kStart: output begins (whitespace and a partial tag held); kBetween: before a call or
  // after one; kCall: inside a call's JSON; kContent: plain text from here on.
  enum class State { kStart, kBetween, kCall, kContent };
  static constexpr std::string_view kSeparators = " \t\r\n;";

  // Plain text from here on; `skipped_` and buf_ hold the raw text since the last call.
  bool to_content(std::vector<OutputEvent>* out) {
    emit_content(skipped_ + buf_, out);
    skipped_.clear();
    buf_.clear();
    state_ = State::kContent;
    return false;
  }

  // Returns true while progress is made.
  bool step(std::vector<OutputEvent>* out) {
    switch (state_) {
      case State::kStart: {
        const size_t at = buf_.find_first_not_of(kWhitespace);
        if (at == std::string::npos) return false;
        const std::string_view rest = std::string_view(buf_).substr(at);
        if (rest.starts_with(kPythonTag)) {
          skipped_ = buf_.substr(0, at + kPythonTag.size());
          buf_.erase(0, at + kPythonTag.size());
          state_ = State::kBetween;
          return true;
        }
        if (is_partial(rest, kPythonTag)) return false;
        if (rest[0] != '{') return to_content(out);
        state_ = State::kBetween;
        return true;
      }
      case State::kBetween: {
        // Whitespace always; a ";" only between calls.
        const size_t at = buf_.find_first_not_of(n_calls_ > 0 ? kSeparators : kWhitespace);
        if (at == std::string::npos) return false;
        if (buf_[at] != '{') return to_content(out);
        skipped_.append(buf_, 0, at);
        buf_.erase(0, at);
        extent_ = JsonExtent();
        state_ = State::kCall;
        return true;
      }
      case State::kCall: {
        const JsonExtent::State s = extent_.scan(buf_);
        if (s == JsonExtent::State::kOpen) return false;
        if (s == JsonExtent::State::kBad) return to_content(out);
        const auto j = nlohmann::ordered_json::parse(buf_.begin(), buf_.begin() + extent_.end(), nullptr, false);
        const std::optional<ParsedCall> call = call_from_json(j, /*args_optional=*/false);
        if (!call) return to_content(out);
        emit_call(*call, n_calls_++, new_call_id_, out);
        buf_.erase(0, extent_.end());
        skipped_.clear();
        state_ = State::kBetween;
        return true;
      }
      case State::kContent: return to_content(out);
    }
    return false;
  }

  NewCallId new_call_id_;
  State state_ = State::kStart;
  std::string buf_;      // unconsumed text
  std::string skipped_;  // consumed since the last call but not yet emitted (tag, separators)
  JsonExtent extent_;
  int n_calls_ = 0;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_llama3_json(NewCallId new_call_id) {
  return std::make_unique<Llama3JsonParser>(std::move(new_call_id));
}

}  // namespace hearth::server::tool_calls
