// hearth serve against the official Anthropic Node client (@anthropic-ai/sdk@1.15.0):
// /v1/messages whole and streamed, stop sequences, max_tokens, system prompts, tools,
// the prompt cache, errors in Anthropic's shape and the API key.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { API_KEY, startServer } from "./hearth_server.mjs";

let server, client;

before(async () => {
  server = await startServer();
  client = new Anthropic({ apiKey: API_KEY, baseURL: server.url, maxRetries: 0 });
});

after(async () => {
  if (server) await server.stop();
});

const request = {
  model: "tiny",
  max_tokens: 16,
  temperature: 0,
  system: "You are terse.",
  messages: [{ role: "user", content: "Hello world" }],
};

const textOf = (message) =>
  message.content
    .filter((b) => b.type === "text")
    .map((b) => b.text)
    .join("");

test("messages whole and streamed agree", async () => {
  const full = await client.messages.create(request);
  assert.equal(full.type, "message");
  assert.equal(full.role, "assistant");
  assert.ok(full.id.startsWith("msg_"));
  assert.ok(["end_turn", "max_tokens"].includes(full.stop_reason));
  assert.ok(full.usage.input_tokens > 0);
  assert.ok(full.usage.output_tokens > 0);

  const events = [];
  const stream = client.messages.stream(request);
  stream.on("streamEvent", (e) => events.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(textOf(final), textOf(full));
  assert.equal(final.stop_reason, full.stop_reason);
  assert.equal(final.usage.output_tokens, full.usage.output_tokens);
  assert.equal(events[0], "message_start");
  assert.equal(events.at(-1), "message_stop");
  assert.ok(events.includes("content_block_start") && events.includes("content_block_delta"));
  assert.ok(events.includes("content_block_stop") && events.includes("message_delta"));
});

test("max_tokens and stop_sequences set stop_reason", async () => {
  const short = await client.messages.create({ ...request, max_tokens: 3 });
  assert.equal(short.stop_reason, "max_tokens");
  assert.equal(short.usage.output_tokens, 3);

  const base = await client.messages.create({ ...request, max_tokens: 24 });
  const chars = [...textOf(base)];
  assert.ok(chars.length >= 8, `need some text, got ${JSON.stringify(textOf(base))}`);
  const stop = chars.slice(4, 7).join("");
  const text = textOf(base);
  const cut = await client.messages.create({ ...request, max_tokens: 24, stop_sequences: [stop] });
  assert.equal(cut.stop_reason, "stop_sequence");
  assert.equal(cut.stop_sequence, stop);
  assert.equal(textOf(cut), text.slice(0, text.indexOf(stop)));
  const streamed = await client.messages.stream({ ...request, max_tokens: 24, stop_sequences: [stop] }).finalMessage();
  assert.equal(textOf(streamed), textOf(cut));
  assert.equal(streamed.stop_reason, "stop_sequence");
});

test("content blocks, tool definitions and tool results are accepted", async () => {
  const r = await client.messages.create({
    ...request,
    max_tokens: 4,
    tools: [
      {
        name: "get_weather",
        description: "The weather in a city",
        input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      },
    ],
    messages: [
      { role: "user", content: [{ type: "text", text: "Weather in Paris?" }] },
      {
        role: "assistant",
        content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }],
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "Sunny, 21 C" }] },
    ],
  });
  assert.equal(r.type, "message");
});

test("a repeated prefix is read from the cache", async () => {
  const messages = [{ role: "user", content: "A fairly long question about many things. ".repeat(4) }];
  await client.messages.create({ ...request, messages, max_tokens: 4 });
  const again = await client.messages.create({ ...request, messages, max_tokens: 4 });
  assert.ok(again.usage.cache_read_input_tokens > 0, JSON.stringify(again.usage));
});

test("errors come back in Anthropic's shape", async () => {
  await assert.rejects(client.messages.create({ ...request, temperature: 1.5 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error?.type, "error");
    assert.equal(e.error?.error?.type, "invalid_request_error");
    assert.match(e.error?.error?.message, /temperature/);
    return true;
  });
  await assert.rejects(client.messages.create({ ...request, messages: [] }), (e) => e.status === 400);
  const wrongKey = new Anthropic({ apiKey: "wrong", baseURL: server.url, maxRetries: 0 });
  await assert.rejects(wrongKey.messages.create(request), (e) => {
    assert.equal(e.status, 401);
    assert.equal(e.error?.error?.type, "authentication_error");
    return true;
  });
});
