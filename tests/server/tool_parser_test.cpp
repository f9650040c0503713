// OutputParser: reasoning, Hermes tool calls, format detection. Outputs are as the models
// write them (formats and edge cases as in vLLM's tool parser tests).
#include <fstream>
#include <sstream>

#include "tool_parser_test_util.h"

namespace hearth::server::tool_parser_test {
namespace {

const Options kHermes{.format = ToolFormat::kHermes};
const Options kQwen3{.format = ToolFormat::kHermes, .reasoning = true};

constexpr std::string_view kDallas =
    R"({"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}})";
constexpr std::string_view kDallasArgs = R"({"city": "Dallas", "state": "TX", "unit": "fahrenheit"})";

TEST(server_tool_parser, PlainContentPassesThrough) {
  for (ToolFormat f : {ToolFormat::kNone, ToolFormat::kHermes, ToolFormat::kQwen3Coder, ToolFormat::kLlama3Json,
                       ToolFormat::kMistral}) {
    expect_content_only({.format = f}, "The capital of France is Paris. 2 < 3, [1] {x}");
    expect_content_only({.format = f, .reasoning = true}, "  Paris.\n");
  }
}

TEST(server_tool_parser, HermesContentAndOneCall) {
  const Collected c =
      parse(kHermes, "I'll check the weather.\n<tool_call>\n" + std::string(kDallas) + "\n</tool_call>");
  EXPECT_EQ(c.content, "I'll check the weather.");
  ASSERT_EQ(c.calls.size(), 1u);
  expect_call(c, 0, "get_current_weather", std::string(kDallasArgs));
}

TEST(server_tool_parser, HermesTwoCallsNoContent) {
  const std::string orlando =
      R"({"name": "get_current_weather", "arguments": {"city": "Orlando", "state": "FL", "unit": "fahrenheit"}})";
  const Collected c = parse(
      kHermes, "<tool_call>\n" + std::string(kDallas) + "\n</tool_call>\n<tool_call>\n" + orlando + "\n</tool_call>\n");
  EXPECT_EQ(c.content, "");  // the newlines around and between calls are not content
  ASSERT_EQ(c.calls.size(), 2u);
  expect_call(c, 0, "get_current_weather", std::string(kDallasArgs));
  expect_call(c, 1, "get_current_weather", R"({"city": "Orlando", "state": "FL", "unit": "fahrenheit"})");
}

TEST(server_tool_parser, HermesNestedJsonAndTagsInsideStrings) {
  const std::string args =
      R"({"path": "notes.md", "content": "Use <tool_call> and </tool_call>: {\"x\": [1, {\"y\": \"}]\"}]}", "opts": {"a": [1, 2, {"b": null}]}})";
  const Collected c =
      parse(kHermes, "<tool_call>\n{\"name\": \"write_file\", \"arguments\": " + args + "}\n</tool_call>\nDone.");
  ASSERT_EQ(c.calls.size(), 1u);
  expect_call(c, 0, "write_file", args);
  EXPECT_EQ(c.content, "Done.");
}

TEST(server_tool_parser, HermesVariants) {
  // Arguments double-encoded as a string, a call without arguments, Apriel's array.
  Collected c = parse(kHermes, R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)");
  expect_call(c, 0, "f", R"({"a": 1})");
  c = parse(kHermes, R"(<tool_call>{"name": "get_time"}</tool_call>)");
  expect_call(c, 0, "get_time", "{}");
  c = parse(kHermes,
            R"(<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]</tool_call>)");
  ASSERT_EQ(c.calls.size(), 2u);
  expect_call(c, 1, "b", R"({"x": 1})");
}

TEST(server_tool_parser, HermesMalformedIsContent) {
  expect_content_only(kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>");  // bad JSON
  expect_content_only(kHermes, "<tool_call>\n{\"arguments\": {}}\n</tool_call>");                          // no name
  expect_content_only(kHermes, "<tool_call>\n{\"name\": \"f\"} trailing\n</tool_call>");
  expect_content_only(kHermes, "<tool_call>get_weather(city='Paris')</tool_call>");
  expect_content_only(kHermes, "Sure <tool_call>\n{\"name\": \"f\", \"arguments\": {}}");  // unclosed at the end
  expect_content_only(kHermes, "a <tool_cal");
  // Nesting is bounded (the JSON writer recurses), also inside double-encoded arguments.
  expect_content_only(kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": " + std::string(70, '[') +
                                   std::string(70, ']') + "}\"}</tool_call>");
  expect_content_only(kHermes, "<tool_call>[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]");
  // A broken call does not hide a good one after it.
  const Collected c = parse(kHermes, "<tool_call>oops</tool_call> <tool_call>" + std::string(kDallas) + "</tool_call>");
  EXPECT_EQ(c.content, "<tool_call>oops</tool_call>");
  ASSERT_EQ(c.calls.size(), 1u);
}

TEST(server_tool_parser, HeldBackOnlyUntilDisambiguated) {
  OutputParser p(ToolFormat::kHermes, true, false, ordered_json::array(), nullptr);
  std::vector<OutputEvent> ev;
  p.push("<think>abc</th", &ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kReasoning);
  EXPECT_EQ(ev[0].text, "abc");
  ev.clear();
  p.push("ink>\n\nHello <tool", &ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "Hello");  // " <tool" held: the space too, as it would go before a call
  ev.clear();
  p.push("box", &ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, " <toolbox");
  ev.clear();
  p.push(" <tool_call>{\"name\": \"f\", \"arguments\": {}}", &ev);
  EXPECT_TRUE(ev.empty());
  p.push("</tool_call>", &ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, Kind::kToolCallBegin);
  EXPECT_EQ(ev[0].id, "call_0");  // no new_call_id given
  EXPECT_EQ(ev[1].kind, Kind::kToolCallArguments);
  EXPECT_EQ(ev[1].text, "{}");
  EXPECT_TRUE(p.saw_tool_call());
}

TEST(server_tool_parser, ReasoningThenCall) {
  const Collected c = parse(kQwen3,
                            "<think>\nThe user wants the weather; I could write <tool_call> here but not yet.\n</think>"
                            "\n\n<tool_call>\n" +
                                std::string(kDallas) + "\n</tool_call>");
  EXPECT_EQ(c.reasoning, "\nThe user wants the weather; I could write <tool_call> here but not yet.\n");
  EXPECT_EQ(c.content, "");
  ASSERT_EQ(c.calls.size(), 1u);
  expect_call(c, 0, "get_current_weather", std::string(kDallasArgs));
}

TEST(server_tool_parser, Reasoning) {
  const Options r{.reasoning = true};
  Collected c = parse(r, "<think>\nabc\n</think>\n\nThe answer.\n\nMore.");
  EXPECT_EQ(c.reasoning, "\nabc\n");
  EXPECT_EQ(c.content, "The answer.\n\nMore.");
  c = parse(r, "\n<think>unclosed </thi");  // cut off while thinking
  EXPECT_EQ(c.reasoning, "unclosed </thi");
  EXPECT_EQ(c.content, "");
  expect_content_only(r, "<thinking> is not the tag");
  expect_content_only(r, "Answer: <think>only at the start</think>");
  expect_content_only({}, "<think>not parsed</think>x");
  expect_content_only(r, "");
}

TEST(server_tool_parser, StartsInReasoning) {
  // DeepSeek-R1 and Qwen3 thinking templates end the prompt with "<think>\n".
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<｜Assistant｜><think>"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning(""));
  const Options o{.format = ToolFormat::kHermes, .reasoning = true, .starts_in_reasoning = true};
  Collected c = parse(o, "Let me think. <tool_call>{\"name\": \"no\"}</tool_call>\n</think>\n\nParis.");
  EXPECT_EQ(c.reasoning, "Let me think. <tool_call>{\"name\": \"no\"}</tool_call>\n");
  EXPECT_EQ(c.content, "Paris.");
  EXPECT_TRUE(c.calls.empty());
  c = parse(o, "still thinking");
  EXPECT_EQ(c.reasoning, "still thinking");
  c = parse(o, "\n<think>\nthe tag again\n</think>\n\nx");
  EXPECT_EQ(c.reasoning, "\nthe tag again\n");
  EXPECT_EQ(c.content, "x");
  c = parse(o, "\n\n");
  EXPECT_EQ(c.reasoning, "\n\n");
}

// The chat template of a file under tests/data/external (fetched by scripts/fetch_*.sh).
std::optional<std::string> read_template(const std::string& path) {
  std::ifstream in(std::string(HEARTH_TEST_DATA) + "/external/" + path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  if (!path.ends_with(".json")) return ss.str();
  const json config = json::parse(ss.str());
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
  const json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  return t.at(0).at("template").get<std::string>();  // [{"name": "default", "template": ...}, ...]
}

TEST(server_tool_parser, DetectsFormatFromRealTemplates) {
  const std::vector<std::pair<std::string, ToolFormat>> cases = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::kHermes},
      {"Qwen-QwQ-32B.jinja", ToolFormat::kHermes},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolFormat::kHermes},
      {"ibm-granite-granite-4.0.jinja", ToolFormat::kHermes},
      {"Qwen3-Coder.jinja", ToolFormat::kQwen3Coder},
      {"Qwen3.5-4B.jinja", ToolFormat::kQwen3Coder},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", ToolFormat::kQwen3Coder},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::kLlama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolFormat::kLlama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::kMistral},
      {"unsloth-mistral-Devstral-Small-2507.jinja", ToolFormat::kMistral},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", ToolFormat::kMistral},
      // Tool syntaxes we do not parse, and templates without tools.
      {"GLM-4.6.jinja", ToolFormat::kNone},
      {"poolside-Laguna-XS.2.jinja", ToolFormat::kNone},
      {"MiniMax-M3.jinja", ToolFormat::kNone},
      {"meetkai-functionary-medium-v3.1.jinja", ToolFormat::kNone},
      {"ByteDance-Seed-OSS.jinja", ToolFormat::kNone},
      {"moonshotai-Kimi-K2.jinja", ToolFormat::kNone},
      {"openai-gpt-oss-120b.jinja", ToolFormat::kNone},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolFormat::kNone},
      {"google-gemma-2-2b-it.jinja", ToolFormat::kNone},
  };
  int found = 0;
  for (const auto& [file, format] : cases) {
    const std::optional<std::string> t = read_template("chat_templates/" + file);
    if (!t) continue;
    ++found;
    EXPECT_EQ(detect_tool_format(*t), format) << file;
  }
  for (const auto& [name, format] :
       std::vector<std::pair<std::string, ToolFormat>>{{"qwen3", ToolFormat::kHermes},
                                                       {"llama3_1", ToolFormat::kNone},  // a no-tools template
                                                       {"gemma3", ToolFormat::kNone},
                                                       {"gptoss", ToolFormat::kNone},
                                                       {"deepseek_v3", ToolFormat::kNone},
                                                       {"llama2", ToolFormat::kNone}}) {
    const std::optional<std::string> t = read_template("tokenizers/" + name + "/tokenizer_config.json");
    if (!t) continue;
    ++found;
    EXPECT_EQ(detect_tool_format(*t), format) << name;
  }
  if (found == 0) GTEST_SKIP() << "no templates: run scripts/fetch_llamacpp_data.sh and scripts/fetch_test_data.sh";
  EXPECT_EQ(detect_tool_format(""), ToolFormat::kNone);
}

}  // namespace
}  // namespace hearth::server::tool_parser_test
