// libFuzzer target: chat-template parsing and rendering with a typical chat context.
// Syntax and runtime errors must be TemplateErrors (InputError) with a one-line message;
// a crash, hang or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "chat/template.h"
#include "fuzz_checks.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "c1",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21}"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\n21 C", "reasoning_content": "ok"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false})");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    const hearth::ChatTemplate tmpl = hearth::ChatTemplate::parse(source, "fuzz");
    (void)tmpl.render(context());
  } catch (const hearth::InputError& e) {
    hearth::fuzz::check_one_line(e);
  }
  return 0;
}
