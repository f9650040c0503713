// libFuzzer target: the streaming output parsers (reasoning split + every tool-call format).
// The first input byte picks the reasoning mode and seeds how the rest is split into pieces. Whatever the text, each
// format must give the same result fed whole, one byte at a time and in random pieces; each
// call's arguments must be a JSON object, announced by its kToolCallBegin. A crash, a
// sanitizer report or a mismatch is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/output_parser.h"

namespace {

using hearth::server::OutputEvent;
using hearth::server::OutputParser;
using hearth::server::ToolFormat;

const nlohmann::ordered_json& tools() {
  static const nlohmann::ordered_json t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
      "i": {"type": "integer"}, "o": {"type": "object"}, "b": {"type": "boolean"}, "s": {"type": "string"},
      "a": {"anyOf": [{"type": "array"}, {"type": "null"}]}}}}}])");
  return t;
}

// Everything the events say, in one string; aborts on events out of order.
std::string run(ToolFormat format, bool reasoning, bool starts_in, const std::vector<std::string_view>& pieces) {
  int n_ids = 0;
  OutputParser p(format, reasoning, starts_in, tools(), [&n_ids] { return "id" + std::to_string(n_ids++); });
  std::vector<OutputEvent> events;
  for (std::string_view piece : pieces) p.push(piece, &events);
  p.finish(&events);
  std::string content, reasoning_text, calls, args;
  int n_calls = 0;
  auto end_call = [&] {
    if (n_calls > 0 && !nlohmann::json::parse(args, nullptr, false).is_object()) std::abort();
    calls += args + "\n";
    args.clear();
  };
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kContent: content += e.text; break;
      case OutputEvent::Kind::kReasoning: reasoning_text += e.text; break;
      case OutputEvent::Kind::kToolCallBegin:
        if (e.index != n_calls) std::abort();
        end_call();
        ++n_calls;
        calls += e.id + " " + e.name + "\n";
        break;
      case OutputEvent::Kind::kToolCallArguments:
        if (e.index != n_calls - 1) std::abort();
        args += e.text;
        break;
    }
  }
  end_call();
  if (p.saw_tool_call() != (n_calls > 0)) std::abort();
  return content + '\0' + reasoning_text + '\0' + calls;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint32_t seed = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string_view> bytes, random;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  for (size_t i = 0; i < text.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = 1 + (seed >> 16) % 16;
    random.push_back(text.substr(i, n));
    i += n;
  }
  const int mode = data[0] % 3;  // no reasoning, reasoning, starts in reasoning
  for (ToolFormat f : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwen3Coder, ToolFormat::kLlama3Json,
                       ToolFormat::kMistral}) {
    const std::string whole = run(f, mode > 0, mode == 2, {text});
    if (run(f, mode > 0, mode == 2, bytes) != whole || run(f, mode > 0, mode == 2, random) != whole) std::abort();
  }
  (void)hearth::server::detect_tool_format(text);
  (void)hearth::server::prompt_opens_reasoning(text);
  return 0;
}
