// Mistral tool calls, after the [TOOL_CALLS] special token, in either syntax:
//   [TOOL_CALLS][{"name": "add", "arguments": {"a": 1}}, {...}]       v3 tokenizer (7B v0.3, Nemo)
//   [TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]mul[ARGS]{"b": 2}       v11+ (Small 3.2, Devstral, Ministral 3)
// told apart by the first byte after the token ('[' or a name). A v11 call may carry
// "[CALL_ID]xxxxxxxxx" before [ARGS] (as Small 3.2's template renders history); the id is
// ignored, calls get ids from new_call_id like every format. A name followed directly by
// '{' is accepted too, for decoders that drop [ARGS] as a special token. Text before and
// after calls is content; markup that does not parse is content from [TOOL_CALLS] on.
#include "server/tool_calls/formats.h"

namespace hearth::server::tool_calls {
namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kCallId = "[CALL_ID]";

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

enum class Step { kMore, kBad, kDone };

class MistralParser final : public ToolCallParser {
 public:
  explicit MistralParser(NewCallId new_call_id) : new_call_id_(std::move(new_call_id)) {}

  void push(std::string_view text, std::vector<OutputEvent>* out) override {
    buf_.append(text);
    for (;;) {
      if (!in_call_) {
        if (!take_until_marker(&buf_, kToolCalls, OutputEvent::Kind::kContent, out)) return;
        in_call_ = true;
        state_ = State::kKind;
        pos_ = 0;
        continue;
      }
      const Step step = step_call();
      if (step == Step::kMore) return;
      if (step == Step::kDone) {
        for (const ParsedCall& call : calls_) emit_call(call, n_calls_++, new_call_id_, out);
        buf_.erase(0, pos_);
      } else {
        emit_content(kToolCalls, out);  // not a call: rescan what followed the token as content
      }
      calls_.clear();
      in_call_ = false;
    }
  }

  void finish(std::vector<OutputEvent>* out) override {
    if (in_call_) emit_content(kToolCalls, out);
    emit_content(buf_, out);
    buf_.clear();
    in_call_ = false;
  }

 private:
  // kKind: which syntax; kArray: v3 JSON array (or a lone object); kName, kAfterName, kCallId: v11 header;
  // kArgs: v11 arguments object.
  enum class State { kKind, kArray, kName, kAfterName, kCallId, kArgs };

  Step step_call() {
    for (;;) {
      switch (state_) {
        case State::kKind: {
          const size_t at = buf_.find_first_not_of(kWhitespace);
          if (at == std::string::npos) return Step::kMore;
          pos_ = at;
          json_at_ = std::string::npos;
          extent_ = JsonExtent();
          name_at_ = at;
          state_ = buf_[at] == '[' || buf_[at] == '{' ? State::kArray : State::kName;
          break;
        }
        case State::kArray: {
          const Step s = scan_json();
          if (s != Step::kDone) return s;
          const auto j = nlohmann::ordered_json::parse(buf_.begin() + json_at_, buf_.begin() + pos_, nullptr, false);
          for (const auto& item : j.is_array() ? j : nlohmann::ordered_json::array({j})) {
            std::optional<ParsedCall> call = call_from_json(item, /*args_optional=*/true);
            if (!call) return Step::kBad;
            calls_.push_back(std::move(*call));
          }
          return calls_.empty() ? Step::kBad : Step::kDone;
        }
        case State::kName: {
          const Step s = read_name();
          if (s != Step::kDone) return s;
          if (pos_ == name_at_) return Step::kBad;
          name_ = buf_.substr(name_at_, pos_ - name_at_);
          state_ = State::kAfterName;
          break;
        }
        case State::kAfterName: {
          const std::string_view rest = std::string_view(buf_).substr(pos_);
          if (rest.empty() || is_partial(rest, kArgs) || is_partial(rest, kCallId)) return Step::kMore;
          if (rest.starts_with(kCallId)) {
            pos_ += kCallId.size();
            name_at_ = pos_;
            state_ = State::kCallId;
          } else if (rest.starts_with(kArgs) || rest[0] == '{') {
            if (rest[0] != '{') pos_ += kArgs.size();
            state_ = State::kArgs;
          } else {
            return Step::kBad;
          }
          break;
        }
        case State::kCallId: {
          const Step s = read_name();
          if (s != Step::kDone) return s;
          const std::string_view rest = std::string_view(buf_).substr(pos_);
          if (is_partial(rest, kArgs)) return Step::kMore;
          if (!rest.starts_with(kArgs)) return Step::kBad;
          pos_ += kArgs.size();
          state_ = State::kArgs;
          break;
        }
        case State::kArgs: {
          const size_t at = buf_.find_first_not_of(kWhitespace, pos_);
          if (at == std::string::npos) return Step::kMore;
          if (buf_[at] != '{') return Step::kBad;
          pos_ = at;
          const Step s = scan_json();
          if (s != Step::kDone) return s;
          const auto args = nlohmann::ordered_json::parse(buf_.begin() + json_at_, buf_.begin() + pos_, nullptr, false);
          if (!args.is_object()) return Step::kBad;
          calls_.push_back({.name = name_, .arguments = dump_json(args)});
          return Step::kDone;
        }
      }
    }
  }

  // Reads name characters from pos_ on; the name started at name_at_. kDone when a byte
  // that is not part of a name follows.
  Step read_name() {
    while (pos_ < buf_.size() && pos_ - name_at_ <= kNameMax && is_name_char(buf_[pos_])) ++pos_;
    if (pos_ - name_at_ > kNameMax) return Step::kBad;
    return pos_ == buf_.size() ? Step::kMore : Step::kDone;
  }

  // Scans the JSON value starting at pos_ (first call) and moves pos_ past its end when it
  // is complete.
  Step scan_json() {
    if (json_at_ == std::string::npos) json_at_ = pos_;
    const JsonExtent::State s = extent_.scan(std::string_view(buf_).substr(json_at_));
    if (s == JsonExtent::State::kOpen) return Step::kMore;
    if (s == JsonExtent::State::kBad) return Step::kBad;
    pos_ = json_at_ + extent_.end();
    return Step::kDone;
  }

  NewCallId new_call_id_;
  std::string buf_;  // unconsumed text; inside a call, what follows [TOOL_CALLS]
  bool in_call_ = false;
  State state_ = State::kKind;
  size_t pos_ = 0;      // inside a call: how far buf_ is parsed
  size_t name_at_ = 0;  // where the function name or call id being read starts
  size_t json_at_ = 0;  // where the JSON value being scanned starts (npos: not yet)
  JsonExtent extent_;
  std::string name_;
  std::vector<ParsedCall> calls_;
  int n_calls_ = 0;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_mistral(NewCallId new_call_id) {
  return std::make_unique<MistralParser>(std::move(new_call_id));
}

}  // namespace hearth::server::tool_calls
