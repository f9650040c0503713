// The response pipeline without the model: scripted tokens (the tiny tokenizer's encoding of
// real model output) go through a RequestChannel into the real GenerationReader (decoder,
// stop strings, reasoning and tool-call parsing) and out through the OpenAI and Anthropic
// writers, whole and streamed. Plus the validation both APIs do, over HTTP.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "base/mapped_file.h"
#include "server/anthropic_api.h"
#include "server/openai_api.h"
#include "server_fixture.h"

namespace hearth::server {
namespace {

using testing::InProcessServer;
using testing::json;
using testing::sse_events;

const char* kHermesOutput =
    "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>";

json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
}

class Pipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = hearth::testing::make_tiny_model_dir();
    tok_ = std::make_unique<Tokenizer>(Tokenizer::load(dir_->path()));
  }
  // A reader over a channel that already holds `text`'s tokens and then the end.
  std::unique_ptr<GenerationReader> reader(const std::string& text, const ReaderOptions& options,
                                           FinishReason end = FinishReason::kStop) {
    auto channel = std::make_shared<RequestChannel>();
    const std::vector<int32_t> ids = tok_->encode(text, false);
    for (size_t i = 1; i < ids.size(); ++i) {
      ChannelItem item;
      item.token.token = ids[i];
      channel->push(std::move(item));
    }
    ChannelItem done;
    done.kind = ChannelItem::Kind::kDone;
    done.finish = end;
    done.stats.generated_tokens = static_cast<int64_t>(ids.size());
    done.stats.cached_tokens = 7;
    channel->push(std::move(done));
    ChannelItem first;
    first.token.token = ids.at(0);
    first.stats.cached_tokens = 7;
    return std::make_unique<GenerationReader>(*tok_, options, channel, std::move(first), nullptr);
  }
  static ReaderOptions hermes() {
    ReaderOptions o;
    o.tool_format = ToolFormat::kHermes;
    o.parse_reasoning = true;
    o.tools = weather_tools();
    return o;
  }
  ResponseMeta meta(Endpoint e) const { return ResponseMeta{e, "id-1", 1, "tiny", 20, true, false}; }

  std::unique_ptr<hearth::testing::TempDir> dir_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Pipeline, OpenAiWholeResponseSplitsReasoningContentAndToolCalls) {
  auto r = reader(kHermesOutput, hermes());
  GenerationOutput out;
  ReaderStep step;
  while (r->next(&step)) accumulate(step, &out);
  EXPECT_EQ(r->finish(), Finish::kToolCalls);
  const json body = openai_response(meta(Endpoint::kChat), out, *r, *tok_);
  const json& msg = body["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "\nThe user wants the weather.\n");
  EXPECT_EQ(msg["content"], "Let me check.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 7);
}

TEST_F(Pipeline, OpenAiStreamFollowsTheDeltaShape) {
  auto r = reader(kHermesOutput, hermes());
  auto w = openai_stream_writer(meta(Endpoint::kChat), *tok_);
  std::string sse = w->begin();
  ReaderStep step;
  while (!r->done()) {
    r->next(&step);
    sse += w->step(step);
  }
  sse += w->end(*r);
  const auto events = sse_events(sse);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[0])["choices"][0]["delta"]["role"], "assistant");
  std::string content, reasoning, arguments, finish;
  int begins = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    if (c["choices"].empty()) continue;  // usage
    const json& d = c["choices"][0]["delta"];
    content += d.value("content", "");
    reasoning += d.value("reasoning_content", "");
    if (d.contains("tool_calls")) {
      const json& call = d["tool_calls"][0];
      EXPECT_EQ(call["index"], 0);
      if (call.contains("id")) {
        ++begins;
        EXPECT_EQ(call["function"]["name"], "get_weather");
        EXPECT_TRUE(arguments.empty()) << "the id and name come before any argument fragment";
      }
      arguments += call["function"].value("arguments", "");
    }
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(begins, 1);
  EXPECT_EQ(content, "Let me check.");
  EXPECT_EQ(reasoning, "\nThe user wants the weather.\n");
  EXPECT_EQ(json::parse(arguments), json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(finish, "tool_calls");
}

TEST_F(Pipeline, AnthropicBlocksWholeAndStreamed) {
  auto r = reader(kHermesOutput, hermes());
  GenerationOutput out;
  ReaderStep step;
  while (r->next(&step)) accumulate(step, &out);
  const json body = anthropic_response(meta(Endpoint::kMessages), out, *r);
  ASSERT_EQ(body["content"].size(), 3u) << body.dump();
  EXPECT_EQ(body["content"][0]["type"], "thinking");
  EXPECT_EQ(body["content"][1], json({{"type", "text"}, {"text", "Let me check."}}));
  EXPECT_EQ(body["content"][2]["type"], "tool_use");
  EXPECT_EQ(body["content"][2]["input"], json({{"city", "Paris"}, {"days", 2}}));
  EXPECT_EQ(body["stop_reason"], "tool_use");
  EXPECT_EQ(body["usage"]["cache_read_input_tokens"], 7);
  EXPECT_EQ(body["usage"]["input_tokens"], 13);

  auto r2 = reader(kHermesOutput, hermes());
  auto w = anthropic_stream_writer(meta(Endpoint::kMessages));
  std::string sse = w->begin();
  while (!r2->done()) {
    r2->next(&step);
    sse += w->step(step);
  }
  sse += w->end(*r2);
  std::vector<std::string> types;
  std::string thinking, text, partial_json;
  for (const std::string& e : sse_events(sse)) {
    const json j = json::parse(e);
    types.push_back(j["type"]);
    if (j["type"] == "content_block_delta") {
      const json& d = j["delta"];
      if (d["type"] == "thinking_delta") thinking += d["thinking"].get<std::string>();
      if (d["type"] == "text_delta") text += d["text"].get<std::string>();
      if (d["type"] == "input_json_delta") partial_json += d["partial_json"].get<std::string>();
    }
    if (j["type"] == "message_delta") {
      EXPECT_EQ(j["delta"]["stop_reason"], "tool_use");
    }
  }
  EXPECT_EQ(types.front(), "message_start");
  EXPECT_EQ(types.back(), "message_stop");
  EXPECT_EQ(std::count(types.begin(), types.end(), "content_block_start"), 3);
  EXPECT_EQ(std::count(types.begin(), types.end(), "content_block_stop"), 3);
  EXPECT_EQ(thinking, "\nThe user wants the weather.\n");
  EXPECT_EQ(text, "Let me check.");
  EXPECT_EQ(json::parse(partial_json), json({{"city", "Paris"}, {"days", 2}}));
}

TEST_F(Pipeline, StopSequenceIsReportedAndToolsOffKeepsMarkupAsContent) {
  ReaderOptions o;
  o.stops = {"check", "Let"};
  auto r = reader("Well. Let me check.", o);
  GenerationOutput out;
  ReaderStep step;
  while (r->next(&step)) accumulate(step, &out);
  EXPECT_EQ(out.content, "Well. ");
  EXPECT_EQ(r->finish(), Finish::kStopSequence);
  EXPECT_EQ(r->stop_sequence(), "Let");
  EXPECT_EQ(anthropic_response(meta(Endpoint::kMessages), out, *r)["stop_sequence"], "Let");

  auto plain = reader(kHermesOutput, ReaderOptions{});
  GenerationOutput all;
  while (plain->next(&step)) accumulate(step, &all);
  EXPECT_EQ(all.content, kHermesOutput);
  EXPECT_EQ(plain->finish(), Finish::kEos);
}

TEST_F(Pipeline, PromptThatOpensThinkingStartsInReasoning) {
  ReaderOptions o = hermes();
  o.starts_in_reasoning = true;
  auto r = reader("I should answer.</think>Hello!", o, FinishReason::kLength);
  GenerationOutput out;
  ReaderStep step;
  while (r->next(&step)) accumulate(step, &out);
  EXPECT_EQ(out.reasoning, "I should answer.");
  EXPECT_EQ(out.content, "Hello!");
  EXPECT_EQ(r->finish(), Finish::kLength);
}

// Mistral marks tool calls with [TOOL_CALLS], a special token in its tokenizers: decoding
// with skip_special_tokens would drop it, so the reader keeps the markup its parser reads.
// The tiny tokenizer with [TOOL_CALLS] added as a special token stands in for Mistral's.
TEST(PipelineSpecialMarkup, KeepsSpecialTokensTheToolParserNeeds) {
  json tj = json::parse(read_text_file(hearth::testing::data_path("tiny_tokenizer/tokenizer.json")));
  tj["added_tokens"].push_back({{"id", 996},
                                {"content", "[TOOL_CALLS]"},
                                {"single_word", false},
                                {"lstrip", false},
                                {"rstrip", false},
                                {"normalized", false},
                                {"special", true}});
  const Tokenizer tok = Tokenizer::from_json(tj.dump(), "tiny+[TOOL_CALLS]");
  const std::string output = R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}])";
  const std::vector<int32_t> ids = tok.encode(output, false);
  ASSERT_EQ(ids.front(), 996);
  ASSERT_TRUE(tok.is_special(996));
  auto channel = std::make_shared<RequestChannel>();
  for (size_t i = 1; i < ids.size(); ++i) {
    ChannelItem item;
    item.token.token = ids[i];
    channel->push(std::move(item));
  }
  ChannelItem done;
  done.kind = ChannelItem::Kind::kDone;
  done.finish = FinishReason::kStop;
  channel->push(std::move(done));
  ChannelItem first;
  first.token.token = ids[0];
  ReaderOptions o;
  o.tool_format = ToolFormat::kMistral;
  o.tools = weather_tools();
  GenerationReader reader(tok, o, channel, std::move(first), nullptr);
  GenerationOutput out;
  ReaderStep step;
  while (reader.next(&step)) accumulate(step, &out);
  ASSERT_EQ(out.tool_calls.size(), 1u) << out.content;
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(out.tool_calls[0].arguments), json({{"city", "Paris"}}));
  // Mistral's templates only render ids of exactly 9 alphanumerics in the next turn.
  EXPECT_EQ(out.tool_calls[0].id.size(), 9u);
  EXPECT_TRUE(std::all_of(out.tool_calls[0].id.begin(), out.tool_calls[0].id.end(), ::isalnum));
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(reader.finish(), Finish::kToolCalls);
}

// Expects `status` with an error (OpenAI or Anthropic shape) whose message names `field`.
void expect_error(httplib::Client& c, const std::string& path, const std::string& body, int status,
                  const std::string& field) {
  auto r = c.Post(path.c_str(), body, "application/json");
  ASSERT_TRUE(r) << body;
  EXPECT_EQ(r->status, status) << body << " -> " << r->body;
  const json j = json::parse(r->body);
  const bool anthropic = path.rfind("/v1/messages", 0) == 0;
  if (anthropic) {
    EXPECT_EQ(j["type"], "error") << r->body;
  }
  const json& e = j["error"];
  EXPECT_EQ(e["type"], status == 400 ? "invalid_request_error" : e["type"]) << r->body;
  EXPECT_NE(e["message"].get<std::string>().find(field), std::string::npos) << r->body;
}

TEST(server_validation, SamplingFieldsAreCheckedAndNamed) {
  InProcessServer s;
  auto c = s.client();
  const std::string chat = "/v1/chat/completions";
  const std::string msgs = R"({"messages": [{"role": "user", "content": "hi"}], )";
  expect_error(c, chat, msgs + R"("temperature": 2.5})", 400, "temperature");
  expect_error(c, chat, msgs + R"("min_p": 1.5})", 400, "min_p");
  expect_error(c, chat, msgs + R"("presence_penalty": 3})", 400, "presence_penalty");
  expect_error(c, chat, msgs + R"("frequency_penalty": -2.5})", 400, "frequency_penalty");
  expect_error(c, chat, msgs + R"("repetition_penalty": 0})", 400, "repetition_penalty");
  expect_error(c, chat, msgs + R"("repetition_context_size": -1})", 400, "repetition_context_size");
  expect_error(c, chat, msgs + R"("logit_bias": {"abc": 1}})", 400, "logit_bias");
  expect_error(c, chat, msgs + R"("logit_bias": {"5": 101}})", 400, "logit_bias");
  expect_error(c, chat, msgs + R"("logit_bias": {"999999": 1}})", 400, "logit_bias");
  expect_error(c, chat, msgs + R"("logit_bias": [1]})", 400, "logit_bias");
  expect_error(c, chat, msgs + R"("logprobs": true, "top_logprobs": 21})", 400, "top_logprobs");
  expect_error(c, chat, msgs + R"("top_logprobs": 2})", 400, "top_logprobs");
  expect_error(c, chat, msgs + R"("reasoning_effort": "max"})", 400, "reasoning_effort");
  expect_error(c, chat, msgs + R"("tools": [{"type": "function"}]})", 400, "tools[0].function");
  expect_error(c, chat, msgs + R"("tool_choice": "sometimes", "tools": []})", 400, "tool_choice");
  expect_error(c, chat, msgs + R"("max_tokens": 100000000})", 400, "exceeds the context");
  expect_error(c, "/v1/completions", R"({"prompt": "x", "logprobs": 30})", 400, "logprobs");
  expect_error(c, "/v1/completions", R"({"prompt": "x", "echo": true})", 400, "echo");

  const std::string messages = "/v1/messages";
  const std::string am = R"({"messages": [{"role": "user", "content": "hi"}], )";
  expect_error(c, messages, R"({"messages": [{"role": "user", "content": "hi"}]})", 400, "max_tokens");
  expect_error(c, messages, am + R"("max_tokens": 4, "temperature": 1.5})", 400, "temperature");
  expect_error(c, messages, R"({"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]})", 400,
               "messages[0].role");
  expect_error(c, messages, R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]})", 400,
               "messages[0].content[0].type");
  // A text block's type that is not a string (found by the request fuzzer: it escaped as a JSON
  // library exception) and a block with no type.
  expect_error(c, messages, am + R"("max_tokens": 4, "system": [{"type": ["text"], "text": "x"}]})", 400,
               "system[0].type");
  expect_error(c, messages, am + R"("max_tokens": 4, "system": [{"text": "x"}]})", 400, "system[0].type");
  expect_error(c, messages, am + R"("max_tokens": 4, "tools": [{"name": "f"}]})", 400, "tools[0].input_schema");
  expect_error(c, messages, am + R"("max_tokens": 4, "thinking": {"type": "sometimes"}})", 400, "thinking.type");
  expect_error(c, messages, "{oops", 400, "JSON");

  // Logit bias works: +100 on one token makes greedy decoding pick it every time.
  int status = 0;
  json body = json::parse(msgs + R"("max_tokens": 4, "temperature": 0, "logit_bias": {"65": 100}})");
  auto r = c.Post(chat.c_str(), body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], "AAAA");  // byte-level id 65 = 'A'
  (void)status;
}

TEST(server_http, StatsMetricsAndCountTokens) {
  InProcessServer s;
  auto c = s.client();
  for (int i = 0; i < 2; ++i) {
    auto r = c.Post("/v1/completions", R"({"prompt": "hello", "max_tokens": 3})", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }
  c.Post("/v1/completions", R"({"prompt": 1})", "application/json");
  // A request's tokens are counted once the server has written its response's end, which can
  // be after the client has read it: poll until they are in (or 10 s have passed).
  json stats;
  for (int tries = 0; tries < 1000; ++tries) {
    auto st = c.Get("/stats");
    ASSERT_TRUE(st);
    ASSERT_EQ(st->status, 200);
    stats = json::parse(st->body);
    if (stats["tokens"]["generated"] == 6 && stats["requests"]["total"] == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(stats["model"], "tiny");
  EXPECT_GT(stats["context_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(stats["requests"]["total"], 3);
  EXPECT_EQ(stats["requests"]["errors_4xx"], 1);
  EXPECT_EQ(stats["tokens"]["generated"], 6);
  EXPECT_GT(stats["memory"]["rss_bytes"].get<int64_t>(), 0);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  EXPECT_NE(m->body.find("hearth_requests_total{endpoint=\"completion\",status=\"200\"} 2"), std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("hearth_time_to_first_token_seconds_count 2"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("hearth_generated_tokens_total 6"), std::string::npos) << m->body;
  auto ct = c.Post("/v1/messages/count_tokens", R"({"messages": [{"role": "user", "content": "hello"}]})",
                   "application/json");
  ASSERT_TRUE(ct);
  ASSERT_EQ(ct->status, 200) << ct->body;
  EXPECT_GT(json::parse(ct->body)["input_tokens"].get<int64_t>(), 5);
}

TEST(server_http, NonStreamingClientThatLeavesIsCancelled) {
  // A context far longer than the client waits: unless cancelled, the generation runs for
  // many seconds even on a loaded machine.
  InProcessServer s(ServerOptions{}, "", EngineOptions{.kv_tokens = 32768});
  const int64_t all_blocks = s.engine().pool().n_blocks();
  {
    // A raw connection: send the request, read the status line, hang up.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(s.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string body = R"({"prompt": "hello", "max_tokens": 30000, "temperature": 0})";
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    char buf[64];
    ASSERT_GT(read(fd, buf, sizeof buf), 0);  // the status line: generation has started
    EXPECT_EQ(std::string(buf, 12), "HTTP/1.1 200");
    close(fd);
  }
  auto c = s.client();
  // The request is counted as cancelled when the server sees the hang-up; the engine frees its
  // blocks at its next step after that: wait for both.
  int64_t cancelled = 0;
  for (int i = 0; i < 1000 && (cancelled == 0 || s.engine().pool().n_free() != all_blocks); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto st = c.Get("/stats");
    ASSERT_TRUE(st);
    cancelled = json::parse(st->body)["requests"]["cancelled"].get<int64_t>();
  }
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(s.engine().pool().n_free(), all_blocks);
}

}  // namespace
}  // namespace hearth::server
