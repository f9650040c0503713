// Qwen3-Coder / Qwen3.5 / Nemotron 3 XML tool calls:
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
//   </tool_call>
// Values are raw text (code, usually), minus the newline after <parameter=..> and the one
// before </parameter>. A "</parameter>" ends the value only when the next markup is
// "<parameter=" or "</function>", so values may contain the tags themselves (as vLLM's
// qwen3coder parser does). Values are typed by the tool's JSON schema: for integer, number,
// boolean, object and array parameters the text is parsed as JSON when it is valid JSON,
// else kept as a string; string, unknown and unschematized parameters stay strings.
// Anything that does not follow this shape is content.
#include <map>

#include "server/tool_calls/formats.h"

namespace hearth::server::tool_calls {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kFunction = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";

// The first non-null "type" of a property schema: "type": "integer", "type": ["integer",
// "null"], or the first typed branch of "anyOf"/"oneOf" (Pydantic's Optional[int]).
std::string direct_type(const ordered_json& schema) {
  const auto t = schema.is_object() ? schema.find("type") : schema.end();
  if (t == schema.end()) return "";
  if (t->is_string()) return *t == "null" ? "" : t->get<std::string>();
  if (t->is_array()) {
    for (const auto& x : *t) {
      if (x.is_string() && x != "null") return x.get<std::string>();
    }
  }
  return "";
}

std::string schema_type(const ordered_json& prop) {
  std::string type = direct_type(prop);
  for (const char* key : {"anyOf", "oneOf"}) {
    const auto branches = prop.is_object() ? prop.find(key) : prop.end();
    if (!type.empty() || branches == prop.end() || !branches->is_array()) continue;
    for (const auto& b : *branches) {
      if (type.empty()) type = direct_type(b);
    }
  }
  return type;
}

ordered_json typed_value(const std::string& text, const std::string& type) {
  if (type != "integer" && type != "number" && type != "boolean" && type != "object" && type != "array") return text;
  const size_t first = text.find_first_not_of(kWhitespace);
  if (first == std::string::npos) return text;
  const std::string_view t = std::string_view(text).substr(first, text.find_last_not_of(kWhitespace) + 1 - first);
  if (type == "boolean" && (t == "True" || t == "False")) return t == "True";  // Python spelling
  if (t[0] == '{' || t[0] == '[') {  // bounded nesting before the JSON parser sees it
    JsonExtent extent;
    if (extent.scan(t) != JsonExtent::State::kDone || extent.end() != t.size()) return text;
  }
  ordered_json j = ordered_json::parse(t, nullptr, false);
  return j.is_discarded() ? ordered_json(text) : j;
}

// A function or parameter name: up to the '>' within kNameMax bytes, no markup or newline.
enum class Step { kMore, kBad, kDone };
Step read_name(std::string_view text, size_t* pos, std::string* name) {
  const std::string_view window = text.substr(*pos, kNameMax + 1);
  const size_t gt = window.find('>');
  if (gt == std::string_view::npos) return window.size() > kNameMax ? Step::kBad : Step::kMore;
  *name = window.substr(0, gt);
  *pos += gt + 1;
  return name->empty() || name->find_first_of("<\n") != std::string::npos ? Step::kBad : Step::kDone;
}

class Qwen3CoderParser final : public ToolCallParser {
 public:
  Qwen3CoderParser(const ordered_json& tools, NewCallId new_call_id) : new_call_id_(std::move(new_call_id)) {
    if (!tools.is_array()) return;
    for (const auto& tool : tools) {
      if (!tool.is_object()) continue;
      const ordered_json& fn = tool.contains("function") ? tool["function"] : tool;
      if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
      const auto schema = fn.find(fn.contains("parameters") ? "parameters" : "input_schema");
      if (schema == fn.end() || !schema->is_object() || !schema->contains("properties")) continue;
      const ordered_json& props = (*schema)["properties"];
      if (!props.is_object()) continue;
      auto& types = param_types_[fn["name"].get<std::string>()];
      for (const auto& [param, prop] : props.items()) types[param] = schema_type(prop);
    }
  }

  void push(std::string_view text, std::vector<OutputEvent>* out) override {
    buf_.append(text);
    for (;;) {
      if (!in_call_) {
        if (!take_until_marker(&buf_, kOpen, OutputEvent::Kind::kContent, out)) return;
        in_call_ = true;
        state_ = State::kFunction;
        pos_ = 0;
        args_ = ordered_json::object();
        continue;
      }
      const Step step = step_call();
      if (step == Step::kMore) return;
      if (step == Step::kDone) {
        emit_call({.name = function_, .arguments = dump_json(args_)}, n_calls_++, new_call_id_, out);
        buf_.erase(0, pos_);
      } else {
        emit_content(kOpen, out);  // not a call: rescan what followed the tag as content
      }
      in_call_ = false;
    }
  }

  void finish(std::vector<OutputEvent>* out) override {
    if (in_call_) emit_content(kOpen, out);
    emit_content(buf_, out);
    buf_.clear();
    in_call_ = false;
  }

 private:
  enum class State { kFunction, kFunctionName, kBetween, kParameterName, kValue, kClose };

  // Skips whitespace, then expects one of `markers`: returns its index, -1 for "need more
  // text", -2 for "something else".
  int expect(std::initializer_list<std::string_view> markers) {
    const size_t at = buf_.find_first_not_of(kWhitespace, pos_);
    if (at == std::string::npos) return -1;
    const std::string_view rest = std::string_view(buf_).substr(at);
    int i = 0, partial = -2;
    for (std::string_view m : markers) {
      if (rest.starts_with(m)) {
        pos_ = at + m.size();
        return i;
      }
      if (is_partial(rest, m)) partial = -1;
      ++i;
    }
    return partial;
  }

  // Advances through buf_ (the text after <tool_call>) as far as it goes.
  Step step_call() {
    for (;;) {
      switch (state_) {
        case State::kFunction: {
          const int m = expect({kFunction});
          if (m < 0) return m == -1 ? Step::kMore : Step::kBad;
          state_ = State::kFunctionName;
          break;
        }
        case State::kFunctionName:
        case State::kParameterName: {
          std::string& name = state_ == State::kFunctionName ? function_ : parameter_;
          const Step s = read_name(buf_, &pos_, &name);
          if (s != Step::kDone) return s;
          state_ = state_ == State::kFunctionName ? State::kBetween : State::kValue;
          value_at_ = value_search_ = pos_;
          break;
        }
        case State::kBetween: {
          const int m = expect({kParameter, kFunctionEnd});
          if (m < 0) return m == -1 ? Step::kMore : Step::kBad;
          state_ = m == 0 ? State::kParameterName : State::kClose;
          break;
        }
        case State::kValue: {
          const size_t end = buf_.find(kParameterEnd, value_search_);
          if (end == std::string::npos) {
            value_search_ = std::max(value_search_, buf_.size() - std::min(buf_.size(), kParameterEnd.size()));
            return Step::kMore;
          }
          value_search_ = end;
          pos_ = end + kParameterEnd.size();
          const int m = expect({kParameter, kFunctionEnd});
          if (m == -1) return Step::kMore;  // resumes at the same "</parameter>"
          if (m == -2) {                    // a literal "</parameter>" inside the value
            value_search_ = end + 1;
            break;
          }
          pos_ = end + kParameterEnd.size();  // kBetween reads the next tag again
          add_parameter(std::string_view(buf_).substr(value_at_, end - value_at_));
          state_ = State::kBetween;
          break;
        }
        case State::kClose: {
          const int m = expect({kClose});
          return m == 0 ? Step::kDone : m == -1 ? Step::kMore : Step::kBad;
        }
      }
    }
  }

  void add_parameter(std::string_view value) {
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    std::string type;
    if (const auto fn = param_types_.find(function_); fn != param_types_.end()) {
      if (const auto p = fn->second.find(parameter_); p != fn->second.end()) type = p->second;
    }
    args_[parameter_] = typed_value(std::string(value), type);
  }

  NewCallId new_call_id_;
  std::map<std::string, std::map<std::string, std::string>> param_types_;  // function -> parameter -> type
  std::string buf_;  // unconsumed text; inside a call, what follows <tool_call>
  bool in_call_ = false;
  State state_ = State::kFunction;
  size_t pos_ = 0;  // inside a call: how far buf_ is parsed
  size_t value_at_ = 0, value_search_ = 0;
  std::string function_, parameter_;
  ordered_json args_;
  int n_calls_ = 0;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_qwen3_coder(const ordered_json& tools, NewCallId new_call_id) {
  return std::make_unique<Qwen3CoderParser>(tools, std::move(new_call_id));
}

}  // namespace hearth::server::tool_calls
