// libFuzzer target: the API's request parsers (OpenAI chat completions and completions,
// Anthropic messages) over any JSON body, with a real tokenizer and a chat template that takes
// tools and thinking. A malformed request must end as an InputError (ApiError: a 4xx with a
// one-line message). Any other exception would reach the client as a 500, and a crash would take
// the server down with every other request in flight.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "base/mapped_file.h"
#include "fuzz_checks.h"
#include "runtime/prompt.h"
#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/openai_api.h"
#include "server/output_parser.h"
#include "server/request.h"
#include "tokenizer/tokenizer.h"

namespace {

using hearth::server::ojson;

// ChatML with tools in the Hermes form, tool results and a thinking switch: the paths a Qwen-style
// template takes through the request (tools, tool_calls, reasoning, kwargs).
constexpr const char* kTemplate = R"({%- if tools %}<|im_start|>system
{%- for t in tools %}
{{ t | tojson }}{%- endfor %}
Call a tool as <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'tool' %}<|im_start|>user
<tool_response>{{ m.content }}</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{% if m.content is string %}{{ m.content }}{% elif m.content %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}
{%- for c in m.tool_calls or [] %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% endif %}{% endif %})";

struct Fixture {
  hearth::Tokenizer tokenizer;
  hearth::PromptRenderer renderer;
  std::mutex prompt_mutex;
  hearth::server::ModelContext ctx;

  static hearth::Tokenizer load_tokenizer() {
    hearth::TokenizerConfig config;
    config.eos_token = "<|im_end|>";
    config.chat_template = kTemplate;
    return hearth::Tokenizer::from_json(
        hearth::read_text_file(std::string(HEARTH_FUZZ_DATA) + "/tiny_tokenizer/tokenizer.json"), "tiny_tokenizer",
        config);
  }
  Fixture() : tokenizer(load_tokenizer()), renderer(tokenizer) {
    ctx.tokenizer = &tokenizer;
    ctx.renderer = &renderer;
    ctx.eos_ids = hearth::stop_token_ids({}, &tokenizer);
    ctx.model_id = "fuzz";
    ctx.tool_format = hearth::server::detect_tool_format(kTemplate);
    ctx.has_reasoning = tokenizer.token_to_id("<think>").has_value() && tokenizer.token_to_id("</think>").has_value();
    ctx.prompt_mutex = &prompt_mutex;
    if (ctx.tool_format != hearth::server::ToolFormat::kHermes) std::abort();  // the template must take tools
  }
};

template <class F>
void expect_clean(F&& parse) {
  try {
    parse();
  } catch (const hearth::server::ApiError& e) {
    if (e.status() < 400 || e.status() > 499) std::abort();
    hearth::fuzz::check_one_line(e);
  } catch (const hearth::InputError& e) {
    hearth::fuzz::check_one_line(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();  // never destroyed: libFuzzer may exit from any input
  ojson body;
  try {
    // As the server parses a body: not JSON, or nested too deep, is its 400 before any parser.
    body = hearth::parse_request_json(std::string_view(reinterpret_cast<const char*>(data), size), "body");
  } catch (const hearth::InputError& e) {
    hearth::fuzz::check_one_line(e);
    return 0;
  }
  const hearth::server::ModelContext& ctx = fixture->ctx;
  expect_clean([&] { (void)hearth::server::parse_chat_request(body, ctx); });
  expect_clean([&] { (void)hearth::server::parse_completion_request(body, ctx); });
  expect_clean([&] { (void)hearth::server::parse_messages_request(body, ctx); });
  return 0;
}
