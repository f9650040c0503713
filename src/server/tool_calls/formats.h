// Private to the tool-call parsers: one factory per format file, and the small streaming
// helpers they share (common.cpp).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/output_parser.h"

namespace hearth::server::tool_calls {

using NewCallId = std::function<std::string()>;

std::unique_ptr<ToolCallParser> make_hermes(NewCallId new_call_id);
std::unique_ptr<ToolCallParser> make_qwen3_coder(const nlohmann::ordered_json& tools, NewCallId new_call_id);
std::unique_ptr<ToolCallParser> make_llama3_json(NewCallId new_call_id);
std::unique_ptr<ToolCallParser> make_mistral(NewCallId new_call_id);

constexpr std::string_view kWhitespace = " \t\r\n";

// Markers longer than this are not looked for past it, and names (function, parameter,
// call id) longer than it are malformed: bounds how long text is held back on garbage.
constexpr size_t kNameMax = 256;

void emit_content(std::string_view text, std::vector<OutputEvent>* out);
void emit_reasoning(std::string_view text, std::vector<OutputEvent>* out);

// Looks for `marker` in `*buf`. Found: the text before it goes out as `kind`, the text up to
// the marker's end is erased, returns true. Not found: all of `*buf` goes out except a tail
// that is a proper prefix of `marker` (held for the next piece), returns false.
bool take_until_marker(std::string* buf, std::string_view marker, OutputEvent::Kind kind,
                       std::vector<OutputEvent>* out);

// `text` (what is known so far) could still become `marker`: a proper prefix of it.
inline bool is_partial(std::string_view text, std::string_view marker) {
  return text.size() < marker.size() && marker.substr(0, text.size()) == text;
}

// Finds where a JSON object or array ends without parsing it (brackets outside strings), so
// the markup after it is found even when a string inside contains that markup. Resumable:
// the text may grow between calls, each byte is looked at once. Validity is left to the
// JSON parser; nesting deeper than kDepthMax is refused (the parser and dump() recurse).
class JsonExtent {
 public:
  enum class State { kOpen, kDone, kBad };
  static constexpr size_t kDepthMax = 64;
  // `text` starts with '{' or '[' and begins at the same byte on every call.
  State scan(std::string_view text);
  size_t end() const { return pos_; }  // kDone: one past the closing bracket

 private:
  size_t pos_ = 0;
  std::string stack_;  // the open brackets
  bool in_string_ = false, escape_ = false;
  State state_ = State::kOpen;
};

struct ParsedCall {
  std::string name, arguments;  // arguments: JSON object text
};

// {"name": "f", <args_key>: {...}} with args_key "arguments" or "parameters"; the arguments
// may also be a string holding a JSON object (some models double-encode them), or missing
// when `args_optional` (a call without arguments gets "{}"). nullopt when it is not a call.
std::optional<ParsedCall> call_from_json(const nlohmann::ordered_json& j, bool args_optional);

// Emits kToolCallBegin plus one kToolCallArguments fragment holding all the arguments.
void emit_call(const ParsedCall& call, int index, const NewCallId& new_call_id, std::vector<OutputEvent>* out);

// dump() that never throws: invalid UTF-8 (possible in raw parameter text) is replaced.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace hearth::server::tool_calls
