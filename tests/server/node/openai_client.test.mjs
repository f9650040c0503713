// hearth serve against the official OpenAI Node client (openai@6.30.1): chat (whole and
// streamed), raw completions, stop strings, length, logprobs, seeds, the prompt cache,
// aborts, tools and the API key. The tiny model's weights are random, so tests compare the
// server with itself (stream vs whole, repeat vs first) rather than with fixed text.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { API_KEY, startServer } from "./hearth_server.mjs";

let server, client;

before(async () => {
  server = await startServer();
  client = new OpenAI({ apiKey: API_KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
});

after(async () => {
  if (server) await server.stop();
});

const request = {
  model: "tiny",
  messages: [{ role: "user", content: "Hello world" }],
  max_tokens: 16,
  temperature: 0,
};

test("non-stream and stream chat completions agree", async () => {
  const full = await client.chat.completions.create(request);
  assert.equal(full.object, "chat.completion");
  assert.equal(full.choices[0].message.role, "assistant");
  assert.equal(typeof full.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(full.choices[0].finish_reason));
  assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + full.usage.completion_tokens);

  const stream = await client.chat.completions.create({
    ...request,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let finish = null;
  let usage = null;
  let first = true;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    if (first) assert.equal(chunk.choices[0].delta.role, "assistant");
    first = false;
    text += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, full.choices[0].finish_reason);
  // The same prompt again: its whole blocks now come from the prompt cache.
  assert.deepEqual({ ...usage, prompt_tokens_details: undefined }, { ...full.usage, prompt_tokens_details: undefined });
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0);
});

test("errors reach the client as APIError", async () => {
  await assert.rejects(client.chat.completions.create({ ...request, temperature: -1 }), (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /temperature/);
    return true;
  });
  const noKey = new OpenAI({ apiKey: "wrong", baseURL: client.baseURL, maxRetries: 0 });
  await assert.rejects(noKey.models.list(), (e) => e.status === 401);
});

test("raw completions: text, length, and the same text streamed", async () => {
  const full = await client.completions.create({ model: "tiny", prompt: "Once upon", max_tokens: 12, temperature: 0 });
  assert.equal(full.object, "text_completion");
  assert.equal(full.choices[0].finish_reason, "length");
  assert.equal(full.usage.completion_tokens, 12);
  const stream = await client.completions.create({
    model: "tiny",
    prompt: "Once upon",
    max_tokens: 12,
    temperature: 0,
    stream: true,
  });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, full.choices[0].text);
});

test("a stop string across token boundaries is cut, streamed or not", async () => {
  const base = await client.completions.create({ model: "tiny", prompt: "abc", max_tokens: 24, temperature: 0 });
  const text = base.choices[0].text;
  // A stop string from the middle of the text: several byte-level tokens long.
  const chars = [...text];
  assert.ok(chars.length >= 8, `need some text, got ${JSON.stringify(text)}`);
  const stop = chars.slice(4, 7).join("");
  const expected = text.slice(0, text.indexOf(stop));
  const cut = await client.completions.create({ model: "tiny", prompt: "abc", max_tokens: 24, temperature: 0, stop });
  assert.equal(cut.choices[0].text, expected);
  assert.equal(cut.choices[0].finish_reason, "stop");
  const stream = await client.completions.create({
    model: "tiny",
    prompt: "abc",
    max_tokens: 24,
    temperature: 0,
    stop: [stop],
    stream: true,
  });
  let streamed = "";
  let finish = null;
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(streamed, expected);
  assert.equal(finish, "stop");
});

test("max_tokens ends with finish_reason length", async () => {
  const r = await client.chat.completions.create({ ...request, max_tokens: 3 });
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 3);
});

test("logprobs: one entry per token with top_logprobs alternatives", async () => {
  const r = await client.chat.completions.create({ ...request, max_tokens: 5, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.equal(typeof t.token, "string");
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
    for (let i = 1; i < 3; ++i) assert.ok(t.top_logprobs[i].logprob <= t.top_logprobs[i - 1].logprob);
  }
  const stream = await client.chat.completions.create({ ...request, max_tokens: 5, logprobs: true, stream: true });
  let n = 0;
  for await (const chunk of stream) n += chunk.choices[0]?.logprobs?.content?.length ?? 0;
  assert.equal(n, 5);
});

test("a seed makes sampling reproducible", async () => {
  const sampled = { ...request, temperature: 1.0, max_tokens: 12, seed: 1234 };
  const a = await client.chat.completions.create(sampled);
  const b = await client.chat.completions.create(sampled);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const others = await Promise.all(
    [1, 2, 3].map((seed) => client.chat.completions.create({ ...sampled, seed })),
  );
  assert.ok(
    others.some((o) => o.choices[0].message.content !== a.choices[0].message.content),
    "different seeds should give different samples",
  );
});

test("a repeated multi-turn prefix is served from the prompt cache", async () => {
  const history = [
    { role: "system", content: "You are a terse assistant. ".repeat(8) },
    { role: "user", content: "Tell me about the weather in a long sentence please." },
  ];
  const first = await client.chat.completions.create({ ...request, messages: history, max_tokens: 8 });
  const second = await client.chat.completions.create({
    ...request,
    messages: [...history, first.choices[0].message, { role: "user", content: "And tomorrow?" }],
    max_tokens: 8,
  });
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(second.usage));
  assert.ok(second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens);
});

test("aborting a stream mid-way cancels it on the server, which goes on serving", async () => {
  const metric = async (name) => {
    const r = await fetch(`${server.url}/metrics`, { headers: { Authorization: `Bearer ${API_KEY}` } });
    const m = (await r.text()).match(new RegExp(`^${name} (\\S+)$`, "m"));
    return m ? Number(m[1]) : 0;
  };
  const cancelledBefore = await metric("hearth_requests_cancelled_total");
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { ...request, max_tokens: 2000, stream: true },
    { signal: controller.signal },
  );
  let chunks = 0;
  try {
    for await (const _ of stream) {
      if (++chunks === 3) {
        controller.abort();
        break;
      }
    }
  } catch (e) {
    assert.match(String(e?.name), /Abort/);
  }
  assert.equal(chunks, 3);
  const after = await client.chat.completions.create({ ...request, max_tokens: 2 });
  assert.equal(after.choices[0].finish_reason, "length");
  // The server noticed: the generation was cancelled, not run to 2000 tokens.
  let cancelled = cancelledBefore;
  for (let i = 0; i < 100 && cancelled === cancelledBefore; ++i) {
    await new Promise((r) => setTimeout(r, 20));
    cancelled = await metric("hearth_requests_cancelled_total");
  }
  assert.equal(cancelled, cancelledBefore + 1);
});

test("tool definitions are accepted", async () => {
  const r = await client.chat.completions.create({
    ...request,
    max_tokens: 4,
    tools: [
      {
        type: "function",
        function: {
          name: "get_weather",
          description: "The weather in a city",
          parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        },
      },
    ],
    tool_choice: "auto",
  });
  assert.equal(r.object, "chat.completion");
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
});
