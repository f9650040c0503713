// The HTTP API end to end against an in-process server on the tiny model: routes, the
// OpenAI chat/completions formats, streaming, stop strings, validation and API keys.
#include <gtest/gtest.h>

#include "server/engine_worker.h"
#include "server_fixture.h"

namespace hearth::server {
namespace {

using testing::InProcessServer;
using testing::json;
using testing::sse_events;

json chat_body(int max_tokens, bool stream = false) {
  json b;
  b["model"] = "tiny";
  b["messages"] = json::array({{{"role", "user"}, {"content", "Hello world"}}});
  b["max_tokens"] = max_tokens;
  b["temperature"] = 0;
  if (stream) b["stream"] = true;
  return b;
}

json post_json(httplib::Client& c, const std::string& path, const json& body, int* status) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no response from " << path;
    *status = -1;
    return {};
  }
  *status = r->status;
  return json::parse(r->body);
}

// Expects a 400 whose error names `field`.
void expect_bad_field(httplib::Client& c, const std::string& path, const std::string& body, const std::string& field) {
  auto r = c.Post(path.c_str(), body, "application/json");
  ASSERT_TRUE(r) << body;
  EXPECT_EQ(r->status, 400) << body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(field), std::string::npos) << r->body;
}

// The content deltas of a chat stream, concatenated; checks the stream's shape on the way.
std::string stream_text(const std::string& body, std::string* finish, json* usage = nullptr) {
  const std::vector<std::string> events = sse_events(body);
  EXPECT_GE(events.size(), 3u);
  if (events.size() < 3) return "";
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) {  // the usage chunk
      if (usage) *usage = c["usage"];
      continue;
    }
    const json& delta = c["choices"][0]["delta"];
    if (i == 0) {
      EXPECT_EQ(delta["role"], "assistant");
    }
    if (delta.contains("content")) text += delta["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) *finish = c["choices"][0]["finish_reason"];
  }
  return text;
}

TEST(server_http, HealthModelsAnd404) {
  InProcessServer s;
  auto c = s.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body), json({{"status", "ok"}}));
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["owned_by"], "hearth");
  auto nf = c.Get("/v1/nope");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(json::parse(nf->body)["error"]["code"], "not_found");
  EXPECT_TRUE(json::parse(nf->body)["error"]["param"].is_null());
}

// Under /v1/messages even httplib's own failures (no such route or method) take Anthropic's error
// shape, which the Anthropic SDK parses into its NotFoundError.
TEST(server_http, AnthropicPathsAnswer404InAnthropicShape) {
  InProcessServer s;
  auto c = s.client();
  for (const auto& r : {c.Get("/v1/messages"), c.Post("/v1/messages/nope", "{}", "application/json")}) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    const json body = json::parse(r->body);
    EXPECT_EQ(body["type"], "error") << r->body;
    EXPECT_EQ(body["error"]["type"], "not_found_error") << r->body;
    EXPECT_NE(body["error"]["message"].get<std::string>().find("/v1/messages"), std::string::npos) << r->body;
  }
}

TEST(server_http, ChatGreedyMatchesGenerateCli) {
  InProcessServer s;
  auto c = s.client();
  int status = 0;
  const json r = post_json(c, "/v1/chat/completions", chat_body(12), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["model"], "tiny");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");

  int rc = 0;
  const json cli = json::parse(testing::run_hearth(
      "generate --model " + s.model_dir() + " --prompt 'Hello world' --max-tokens 12 --temp 0 --json", &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(r["choices"][0]["message"]["content"], cli["text"]);
  EXPECT_EQ(r["choices"][0]["finish_reason"], cli["finish_reason"]);
  EXPECT_EQ(r["usage"]["prompt_tokens"], cli["prompt_tokens"]);
  EXPECT_EQ(r["usage"]["completion_tokens"], cli["generated_tokens"]);
  EXPECT_EQ(r["usage"]["total_tokens"], cli["prompt_tokens"].get<int64_t>() + cli["generated_tokens"].get<int64_t>());
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(server_http, StreamConcatenatesToNonStreamText) {
  InProcessServer s;
  auto c = s.client();
  int status = 0;
  const json full = post_json(c, "/v1/chat/completions", chat_body(40), &status);
  ASSERT_EQ(status, 200);
  json body = chat_body(40, true);
  body["stream_options"] = {{"include_usage", true}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::string finish;
  json usage;
  EXPECT_EQ(stream_text(r->body, &finish, &usage), full["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, full["choices"][0]["finish_reason"]);
  EXPECT_EQ(usage, full["usage"]);
  // Without include_usage there is no usage chunk.
  auto r2 = c.Post("/v1/chat/completions", chat_body(5, true).dump(), "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->body.find("\"usage\""), std::string::npos);
}

TEST(server_http, StopStringIsCutAndNeverSent) {
  InProcessServer s;
  auto c = s.client();
  int status = 0;
  const json full = post_json(c, "/v1/chat/completions", chat_body(40), &status);
  const std::string text = full["choices"][0]["message"]["content"];
  ASSERT_GE(text.size(), 6u) << text;
  // A stop string (two ASCII characters) from the middle of the greedy output; the reply
  // ends where it first occurs.
  size_t at = text.size() / 3;
  while (at + 1 < text.size() &&
         !(static_cast<unsigned char>(text[at]) < 0x80 && static_cast<unsigned char>(text[at + 1]) < 0x80))
    ++at;
  ASSERT_LT(at + 1, text.size()) << text;
  const std::string stop = text.substr(at, 2);
  const std::string want = text.substr(0, text.find(stop));
  json body = chat_body(40);
  body["stop"] = json::array({"never-in-output", stop});
  const json r = post_json(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], want);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(r["usage"]["completion_tokens"].get<int64_t>(), 40);
  // Streamed: everything sent concatenates to the cut text, so no part of the stop was sent.
  body["stream"] = true;
  body["stop"] = stop;  // the string form
  auto sr = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(sr);
  std::string finish;
  EXPECT_EQ(stream_text(sr->body, &finish), want);
  EXPECT_EQ(finish, "stop");
}

TEST(server_http, ConcurrentRequestsAllGetTheGreedyAnswer) {
  InProcessServer s;
  auto c = s.client();
  int status = 0;
  const json want = post_json(c, "/v1/chat/completions", chat_body(20), &status)["choices"][0]["message"];
  std::vector<std::thread> threads;
  std::vector<json> got(6);
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      auto ci = s.client();
      int st = 0;
      if (i % 2 == 0) {
        got[i] = post_json(ci, "/v1/chat/completions", chat_body(20), &st)["choices"][0]["message"];
      } else {
        auto r = ci.Post("/v1/chat/completions", chat_body(20, true).dump(), "application/json");
        std::string finish;
        if (r) got[i] = {{"role", "assistant"}, {"content", stream_text(r->body, &finish)}};
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const json& g : got) EXPECT_EQ(g, want);
}

TEST(server_http, ToolsAndChatTemplateKwargsReachTheTemplate) {
  InProcessServer s({},
                    "{% if tools %}T{{ tools | length }}{% endif %}"
                    "{% if enable_thinking is defined and not enable_thinking %}N{% endif %}"
                    "{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}\n{% endfor %}");
  auto c = s.client();
  json body = chat_body(1);
  body["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}});
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  int status = 0;
  const json r = post_json(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens"].get<size_t>(), s.tokenizer().encode("T1Nuser:Hello world\n", false).size());
  const json plain = post_json(c, "/v1/chat/completions", chat_body(1), &status);
  EXPECT_EQ(plain["usage"]["prompt_tokens"].get<size_t>(), s.tokenizer().encode("user:Hello world\n", false).size());
}

TEST(server_http, CompletionsUseRawPrompt) {
  InProcessServer s;
  auto c = s.client();
  int status = 0;
  json body = {{"prompt", "Hello world"}, {"max_tokens", 8}, {"temperature", 0}};
  const json r = post_json(c, "/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  int rc = 0;
  const json cli = json::parse(testing::run_hearth(
      "generate --model " + s.model_dir() + " --prompt 'Hello world' --raw --max-tokens 8 --temp 0 --json", &rc));
  EXPECT_EQ(r["choices"][0]["text"], cli["text"]);
  EXPECT_EQ(r["usage"]["prompt_tokens"], cli["prompt_tokens"]);
  body["stream"] = true;
  auto sr = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(sr);
  const auto events = sse_events(sr->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i)
    text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, cli["text"]);
}

TEST(server_http, BadRequestsAre400NamingTheFieldAndServerKeepsServing) {
  InProcessServer s;
  auto c = s.client();
  const std::string chat = "/v1/chat/completions";
  auto r = c.Post(chat.c_str(), "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_json");
  expect_bad_field(c, chat, "[1, 2]", "JSON object");
  expect_bad_field(c, chat, R"({"messages": []})", "messages");
  expect_bad_field(c, chat, R"({})", "messages");
  expect_bad_field(c, chat, R"({"messages": "hi"})", "messages");
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  expect_bad_field(c, chat, "{" + msgs + R"(, "temperature": -1})", "temperature");
  expect_bad_field(c, chat, "{" + msgs + R"(, "temperature": "hot"})", "temperature");
  expect_bad_field(c, chat, "{" + msgs + R"(, "max_tokens": 0})", "max_tokens");
  expect_bad_field(c, chat, "{" + msgs + R"(, "max_completion_tokens": -3})", "max_completion_tokens");
  expect_bad_field(c, chat, "{" + msgs + R"(, "top_p": 0})", "top_p");
  expect_bad_field(c, chat, "{" + msgs + R"(, "top_p": 1.5})", "top_p");
  expect_bad_field(c, chat, "{" + msgs + R"(, "top_k": 1.5})", "top_k");
  expect_bad_field(c, chat, "{" + msgs + R"(, "seed": "x"})", "seed");
  expect_bad_field(c, chat, "{" + msgs + R"(, "stop": 5})", "stop");
  expect_bad_field(c, chat, "{" + msgs + R"(, "stream": "yes"})", "stream");
  expect_bad_field(c, chat, "{" + msgs + R"(, "n": 2})", "n");
  expect_bad_field(c, chat, "{" + msgs + R"(, "chat_template_kwargs": 1})", "chat_template_kwargs");
  expect_bad_field(c, chat, R"({"messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role");
  expect_bad_field(c, chat, R"({"messages": [{"role": "user"}]})", "messages[0].content");
  expect_bad_field(c, chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                   "messages[0].content[0].type");
  expect_bad_field(c, "/v1/completions", R"({"prompt": 3})", "prompt");
  // A prompt longer than the KV cache is refused by the engine: still a 400, even streaming.
  json huge = chat_body(4, true);
  std::string long_text;
  for (int i = 0; i < 6000; ++i) long_text += "x y ";  // > 4096 tokens
  huge["messages"][0]["content"] = long_text;
  auto hr = c.Post(chat.c_str(), huge.dump(), "application/json");
  ASSERT_TRUE(hr);
  EXPECT_EQ(hr->status, 400) << hr->body;
  EXPECT_EQ(json::parse(hr->body)["error"]["code"], "context_over_budget");
  // So is a prompt that fits but leaves no room for max_tokens.
  json room = chat_body(5000);
  auto rr = c.Post(chat.c_str(), room.dump(), "application/json");
  ASSERT_TRUE(rr);
  EXPECT_EQ(rr->status, 400) << rr->body;
  EXPECT_EQ(json::parse(rr->body)["error"]["code"], "context_over_budget");
  // JSON sent as a form (what `curl -d` does) is still read as JSON, however long.
  json form = chat_body(2);
  form["user"] = std::string(20000, 'z');  // an ignored field, to make the body long
  auto fr = c.Post(chat.c_str(), form.dump(), "application/x-www-form-urlencoded");
  ASSERT_TRUE(fr);
  EXPECT_EQ(fr->status, 200) << fr->body;
  // Content as a list of text parts is accepted, and the server still works.
  int status = 0;
  json parts = chat_body(3);
  parts["messages"][0]["content"] =
      json::array({{{"type", "text"}, {"text", "Hello "}}, {{"type", "text"}, {"text", "world"}}});
  const json ok = post_json(c, chat, parts, &status);
  EXPECT_EQ(status, 200) << ok.dump();
  EXPECT_EQ(ok["usage"]["prompt_tokens"], post_json(c, chat, chat_body(3), &status)["usage"]["prompt_tokens"]);
}

TEST(server_http, BodyOverTheLimitIs413) {
  ServerOptions o;
  o.max_body_bytes = 64 << 10;
  InProcessServer s(o);
  auto c = s.client();
  json body = chat_body(2);
  body["messages"][0]["content"] = std::string(100 << 10, 'z');
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "payload_too_large");
  int status = 0;
  post_json(c, "/v1/chat/completions", chat_body(2), &status);
  EXPECT_EQ(status, 200);
}

TEST(server_http, ApiKeyIsRequiredExceptForHealth) {
  ServerOptions o;
  o.api_key = "sekret";
  InProcessServer s(o);
  auto c = s.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto no = c.Get("/v1/models");
  ASSERT_TRUE(no);
  EXPECT_EQ(no->status, 401);
  EXPECT_EQ(json::parse(no->body)["error"]["code"], "invalid_api_key");
  auto wrong = c.Get("/v1/models", {{"Authorization", "Bearer nope"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto bearer = c.Get("/v1/models", {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(bearer);
  EXPECT_EQ(bearer->status, 200);
  auto xkey = c.Post("/v1/chat/completions", {{"x-api-key", "sekret"}}, chat_body(2).dump(), "application/json");
  ASSERT_TRUE(xkey);
  EXPECT_EQ(xkey->status, 200);
  auto post_no = c.Post("/v1/chat/completions", chat_body(2).dump(), "application/json");
  ASSERT_TRUE(post_no);
  EXPECT_EQ(post_no->status, 401);
}

TEST(server_http, ClientDisconnectCancelsAndFreesBlocks) {
  InProcessServer s;
  const int64_t all_blocks = s.engine().pool().n_blocks();
  {
    auto c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    json body = chat_body(100000, true);
    body["max_tokens"] = 3000;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    // Hang up after the first chunk.
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
    c.send(req);
    EXPECT_GE(chunks, 1);
  }
  // The server serves the next request, and the cancelled request's blocks come back.
  auto c = s.client();
  int status = 0;
  post_json(c, "/v1/chat/completions", chat_body(2), &status);
  EXPECT_EQ(status, 200);
  int64_t free_blocks = 0;
  for (int i = 0; i < 200 && (free_blocks = s.engine().pool().n_free()) != all_blocks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(free_blocks, all_blocks);
}

TEST(server_engine_worker, FullQueueRefusesAndShutdownAnswersWaiters) {
  auto dir = testing::make_tiny_model_dir();
  ThreadPool pool(1);
  auto model = load_model(dir->path(), LoadOptions{});
  Engine engine(*model, Context{&pool, kCpu});
  GenerationRequest req;
  req.prompt = {1, 2, 3};
  req.max_tokens = 2000;
  req.ignore_eos = true;
  std::vector<std::shared_ptr<RequestChannel>> channels;
  {
    EngineWorker worker(engine, 1);
    for (int i = 0; i < 3; ++i) channels.push_back(worker.submit(req));
    // One runs (or is about to) and at most one waits: one of the others is refused.
    EXPECT_TRUE(channels[0]);
    EXPECT_TRUE(!channels[1] || !channels[2]);
    ASSERT_EQ(channels[0]->pop().kind, ChannelItem::Kind::kToken);
    channels[0]->cancel();
  }
  // The worker is gone: every accepted request got a final item (done or error).
  for (auto& ch : channels) {
    if (!ch) continue;
    ChannelItem item;
    do item = ch->pop();
    while (item.kind == ChannelItem::Kind::kToken);
    EXPECT_TRUE(item.kind == ChannelItem::Kind::kDone || item.kind == ChannelItem::Kind::kError);
  }
  EXPECT_EQ(engine.pool().n_free(), engine.pool().n_blocks());
}

}  // namespace
}  // namespace hearth::server
