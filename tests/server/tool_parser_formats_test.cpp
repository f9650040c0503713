// The other tool-call formats: Qwen3-Coder XML, Llama 3 JSON, Mistral; and every format on
// mixed markup. Outputs are as the models write them (as in vLLM's tool parser tests).
#include "tool_parser_test_util.h"

namespace hearth::server::tool_parser_test {
namespace {

// Qwen3-Coder: typed by the tool schema.
const ordered_json kCoderTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "calculate_area", "parameters": {"type": "object", "properties": {
    "shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"},
    "scale": {"type": "number"}, "exact": {"type": "boolean"}, "tags": {"type": "array"},
    "count": {"anyOf": [{"type": "null"}, {"type": "integer"}]}, "code": {"type": "string"}}}}},
  {"name": "anthropic_style", "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}])");
const Options kCoder{.format = ToolFormat::kQwen3Coder, .reasoning = true, .tools = kCoderTools};

TEST(server_tool_parser, Qwen3CoderTypedParameters) {
  const Collected c = parse(kCoder,
                            "Let me calculate that area for you.<tool_call>\n<function=calculate_area>\n"
                            "<parameter=shape>\nrectangle\n</parameter>\n"
                            "<parameter=dimensions>\n{\"width\": 10, \n \"height\": 20}\n</parameter>\n"
                            "<parameter=precision>\n2\n</parameter>\n<parameter=scale>\n1.5\n</parameter>\n"
                            "<parameter=exact>\nTrue\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"
                            "<parameter=count>\nnot a number\n</parameter>\n<parameter=other>\n42\n</parameter>\n"
                            "</function>\n</tool_call>");
  EXPECT_EQ(c.content, "Let me calculate that area for you.");
  ASSERT_EQ(c.calls.size(), 1u);
  expect_call(c, 0, "calculate_area",
              R"({"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2, "scale": 1.5,
                  "exact": true, "tags": ["a", "b"], "count": "not a number", "other": "42"})");
}

TEST(server_tool_parser, Qwen3CoderCodeValueWithTags) {
  // A value that holds the closing tags themselves: only "</parameter>" followed by the next
  // parameter or "</function>" ends it. Inner blank lines and indentation are kept.
  const std::string code = "if a </parameter> b:\n\n    print('</function>\\n</tool_call>')\n";
  const Collected c = parse(kCoder, "<tool_call>\n<function=calculate_area>\n<parameter=code>\n" + code +
                                        "\n</parameter>\n<parameter=precision>\n3\n</parameter>\n</function>\n"
                                        "</tool_call>");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(json::parse(c.calls[0].arguments), (json{{"code", code}, {"precision", 3}}));
}

TEST(server_tool_parser, Qwen3CoderParallelAfterReasoning) {
  const Collected c = parse(kCoder,
                            "<think>\nTwo cities.\n</think>\n\n<tool_call>\n<function=get_current_weather>\n"
                            "<parameter=city>\nDallas\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                            "<function=anthropic_style>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>"
                            "\n<tool_call>\n<function=no_args>\n</function>\n</tool_call>");
  EXPECT_EQ(c.reasoning, "\nTwo cities.\n");
  EXPECT_EQ(c.content, "");
  ASSERT_EQ(c.calls.size(), 3u);
  expect_call(c, 0, "get_current_weather", R"({"city": "Dallas"})");
  expect_call(c, 1, "anthropic_style", R"({"n": 7})");
  expect_call(c, 2, "no_args", "{}");
}

TEST(server_tool_parser, Qwen3CoderMalformedIsContent) {
  const Options o{.format = ToolFormat::kQwen3Coder};
  expect_content_only(o, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");         // Hermes JSON
  expect_content_only(o, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>");  // unclosed
  expect_content_only(o, "<tool_call>\n<function=f>\nstray text\n</function>\n</tool_call>");
  expect_content_only(o, "<tool_call>\n<function=f>\n</function>\nmore\n</tool_call>");
  expect_content_only(o, "<tool_call>\n<function=" + std::string(300, 'x') + ">\n</function>\n</tool_call>");
}

const Options kLlama{.format = ToolFormat::kLlama3Json};

TEST(server_tool_parser, Llama3JsonCalls) {
  Collected c = parse(kLlama, R"({"name": "searchTool", "parameters": {"query": "test query", "limit": 10}})");
  expect_call(c, 0, "searchTool", R"({"query": "test query", "limit": 10})");
  EXPECT_EQ(c.content, "");
  c = parse(kLlama, R"(<|python_tag|>{"name": "get_weather", "arguments": {"city": "Paris"}})");
  expect_call(c, 0, "get_weather", R"({"city": "Paris"})");
  for (std::string_view sep : {"; ", ";", ";\n", "\n", " ; "}) {
    c = parse(kLlama, std::string(R"({"name": "searchTool", "parameters": {"query": "test1"}})") + std::string(sep) +
                          R"({"name": "getOpenIncidentsTool", "parameters": {}})");
    ASSERT_EQ(c.calls.size(), 2u) << sep;
    expect_call(c, 1, "getOpenIncidentsTool", "{}");
    EXPECT_EQ(c.content, "");
  }
  c = parse(kLlama,
            "\n"
            R"({"name": "q", "parameters": {"text": "He said \"Hello {world}\" [x]"}} I used {q}.)");
  expect_call(c, 0, "q", R"({"text": "He said \"Hello {world}\" [x]"})");
  EXPECT_EQ(c.content, "I used {q}.");
}

TEST(server_tool_parser, Llama3JsonOnlyAtStart) {
  expect_content_only(kLlama, R"(Here is the result: {"name": "searchTool", "parameters": {}})");
  expect_content_only(kLlama, R"({"answer": 42, "name": "not a call"})");
  expect_content_only(kLlama, R"({"name": "invalidTool", "parameters": {invalid json})");
  expect_content_only(kLlama, R"({"name": "toolWithoutParams"})");
  expect_content_only(kLlama, R"(<|python_tag|>brave_search.call(query="weather in Paris"))");
  expect_content_only(kLlama, R"(  {"name": "unclosed", "parameters": {)");
  // A bad object after a good call: the call stays, the rest is content.
  const Collected c = parse(kLlama, R"({"name": "a", "parameters": {}}; {"oops": 1})");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.content, R"(; {"oops": 1})");
}

const Options kMistral{.format = ToolFormat::kMistral};

TEST(server_tool_parser, MistralV3Array) {
  Collected c = parse(kMistral, R"([TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}])");
  expect_call(c, 0, "add", R"({"a": 3.5, "b": 4})");
  c = parse(
      kMistral,
      R"(Hello[TOOL_CALLS] [{"name": "add", "arguments": {"a": 3.5, "b": 4}}, {"arguments":{"city": "San Francisco", "state": "CA"}, "name": "get_current_weather", "id": "a1b2c3d4e"}])");
  EXPECT_EQ(c.content, "Hello");
  ASSERT_EQ(c.calls.size(), 2u);
  expect_call(c, 1, "get_current_weather", R"({"city": "San Francisco", "state": "CA"})");
}

TEST(server_tool_parser, MistralV11) {
  Collected c = parse(kMistral, R"([TOOL_CALLS]add_this_and_that[ARGS]{"a": 3.5, "b": 4})");
  expect_call(c, 0, "add_this_and_that", R"({"a": 3.5, "b": 4})");
  c = parse(kMistral, R"(Sure.[TOOL_CALLS]add[ARGS]{"a": 3.5, "b": 4}[TOOL_CALLS]multiply[ARGS]{"a": 3, "b": 6})");
  EXPECT_EQ(c.content, "Sure.");
  ASSERT_EQ(c.calls.size(), 2u);
  expect_call(c, 1, "multiply", R"({"a": 3, "b": 6})");
  c = parse(kMistral, R"([TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"})");
  expect_call(c, 0, "get_weather", R"({"city": "Paris"})");
  c = parse(kMistral, R"([TOOL_CALLS]echo[ARGS]{"text": "literal [TOOL_CALLS]x[ARGS]{ and }"})");
  expect_call(c, 0, "echo", R"({"text": "literal [TOOL_CALLS]x[ARGS]{ and }"})");
  c = parse(kMistral, R"([TOOL_CALLS]add{"a": 1})");  // [ARGS] dropped by the decoder
  expect_call(c, 0, "add", R"({"a": 1})");
}

TEST(server_tool_parser, MistralMalformedIsContent) {
  expect_content_only(kMistral, "[TOOL_CALLS] not json at all");
  expect_content_only(kMistral, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": }}]");
  expect_content_only(kMistral, "[TOOL_CALLS]add[ARGS]{\"a\": 1");
  expect_content_only(kMistral, "[TOOL_CALLS]add[ARGS]\"a\"");
  expect_content_only(kMistral, "[TOOL_CALLS]add[ARGS");
  expect_content_only(kMistral, "[TOOL_CALLS][]");
  expect_content_only(kMistral, "[TOOL_CALL");
}

TEST(server_tool_parser, AnyMarkupInAnyFormatIsSplitInvariant) {
  const std::vector<std::string> texts = {
      "<think>a</think><tool_call>{\"name\": \"f\"}</tool_call>[TOOL_CALLS]f[ARGS]{}<|python_tag|>{}",
      "{\"name\": \"f\", \"parameters\": {}}<tool_call>\n<function=f>\n<parameter=p>\n</parameter>\n</function>",
      "[TOOL_CALLS][TOOL_CALLS][{\"name\":\"f\"}]<tool_call><tool_call>{\"name\":\"g\"}</tool_call></think>",
      "<tool_call>\n<function=f>\n<parameter=p>\nv\n</parameter>\n</parameter>\n</function>\n</tool_call>x",
  };
  for (const std::string& t : texts) {
    for (ToolFormat f : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwen3Coder, ToolFormat::kLlama3Json,
                         ToolFormat::kMistral}) {
      for (bool in_reasoning : {false, true}) {
        parse({.format = f, .reasoning = true, .starts_in_reasoning = in_reasoning, .tools = kCoderTools}, t);
      }
    }
  }
}

}  // namespace
}  // namespace hearth::server::tool_parser_test
