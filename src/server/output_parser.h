// Streaming output parsers: generated text, arriving in arbitrary pieces as tokens are
// decoded, becomes content, reasoning and tool-call events for the OpenAI/Anthropic APIs.
// Text that might be the start of markup ("<tool" at the end of a piece) is held back until
// it is known either way, so the result never depends on how the text was split. Markup
// that does not parse is passed on as content, unchanged: nothing the model wrote is lost.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::server {

struct OutputEvent {
  enum class Kind { kContent, kReasoning, kToolCallBegin, kToolCallArguments };
  // Members have initializers so designated initializers may leave them out (GCC's
  // -Wmissing-field-initializers).
  Kind kind = Kind::kContent;
  std::string text = {};           // kContent/kReasoning: text; kToolCallArguments: a fragment of the arguments JSON
  int index = 0;                   // tool calls: 0, 1, 2... in order of appearance
  std::string id = {}, name = {};  // kToolCallBegin only
};

// The tool-call syntaxes we parse (one file each in server/tool_calls/).
enum class ToolFormat {
  kNone,
  kHermes,      // Hermes 2 Pro/3, Qwen2.5, Qwen3, QwQ: <tool_call>{"name": .., "arguments": ..}</tool_call>
  kQwen3Coder,  // Qwen3-Coder, Qwen3.5, Nemotron 3: <tool_call><function=f><parameter=p>v</parameter>...
  kLlama3Json,  // Llama 3.1-3.3: [<|python_tag|>]{"name": .., "parameters": ..}; {...}
  kMistral,     // [TOOL_CALLS][{...}] (v3 tokenizer) and [TOOL_CALLS]f[ARGS]{...} (v11+)
};

// Picks the format from the chat template's source text by the markup its tool instructions
// or tool-call rendering use; kNone for templates whose syntax we do not parse (GLM's
// <arg_key>, functionary's bare <function=, Kimi, gpt-oss...).
ToolFormat detect_tool_format(std::string_view chat_template);

// True when the rendered prompt ends with an opened "<think>" (plus whitespace): templates
// such as DeepSeek-R1's and Qwen3-thinking's open the reasoning block themselves, so the
// model's output starts inside it.
bool prompt_opens_reasoning(std::string_view rendered_prompt);

// One per format; consumes content text (reasoning already split off).
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual void push(std::string_view text, std::vector<OutputEvent>* out) = 0;
  // End of generation: flushes held-back text; an unclosed call becomes content.
  virtual void finish(std::vector<OutputEvent>* out) = 0;
};

// `tools` is the request's tools array (OpenAI {"type": "function", "function": {...}} or
// Anthropic {"name", "input_schema"} entries); only kQwen3Coder reads it, to type parameter
// values. `new_call_id` makes the id of each call (null: "call_<index>").
std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolFormat format, const nlohmann::ordered_json& tools,
                                                      std::function<std::string()> new_call_id);

// Reasoning split plus tool calls. Reasoning is recognized only as a "<think>" that opens
// the output (after whitespace) or, with `starts_in_reasoning`, from the first byte (a
// repeated "<think>" there is dropped, as vLLM's DeepSeek-R1 parser does); it ends
// at "</think>", and newlines right after it are dropped (as the Qwen3 and DeepSeek-R1
// parsers do). No tool parsing happens inside reasoning. Unclosed at the end, everything
// after "<think>" is reasoning. With `parse_reasoning` false the tags are plain content.
// With tools on, whitespace around tool calls is dropped from the content ("Sure.\n\n<tool_call>..."
// gives content "Sure."), so a response made only of calls has empty content.
class OutputParser {
 public:
  OutputParser(ToolFormat tool_format /* kNone: no tool parsing */, bool parse_reasoning, bool starts_in_reasoning,
               const nlohmann::ordered_json& tools, std::function<std::string()> new_call_id);
  ~OutputParser();

  void push(std::string_view text, std::vector<OutputEvent>* out);
  void finish(std::vector<OutputEvent>* out);
  // At least one tool call was emitted: the finish_reason is "tool_calls".
  bool saw_tool_call() const { return saw_tool_call_; }

 private:
  enum class Phase { kStart, kReasoning, kAfterReasoning, kContent };
  void push_content(std::string_view text, std::vector<OutputEvent>* out);
  void trim_around_calls(std::vector<OutputEvent>& events, std::vector<OutputEvent>* out);

  std::unique_ptr<ToolCallParser> tools_;  // null when tool parsing is off
  Phase phase_;
  bool starts_in_reasoning_;  // kStart: text that is not "<think>" is reasoning, not content
  std::string held_;          // text not yet classified (a possible partial "<think>"/"</think>")
  std::string pending_ws_;    // trailing whitespace of the content so far, dropped if a call follows
  bool after_call_ = false;   // drop the leading whitespace of the next content
  bool saw_tool_call_ = false;
};

}  // namespace hearth::server
