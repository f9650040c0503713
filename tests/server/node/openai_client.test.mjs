// hearth serve against the official OpenAI Node client: a non-streaming and a streaming chat
// completion must parse and agree. Needs HEARTH_BINARY (the hearth executable) and
// HEARTH_TEST_DATA (tests/data); run with `npm ci && npm test` in this folder.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";

const binary = process.env.HEARTH_BINARY;
const data = process.env.HEARTH_TEST_DATA;
let server, modelDir, client;

before(async () => {
  assert.ok(binary && data, "set HEARTH_BINARY and HEARTH_TEST_DATA");
  // The tiny model: qwen3 parity weights + the tiny byte-level tokenizer.
  modelDir = mkdtempSync(join(tmpdir(), "hearth-node-"));
  for (const src of ["parity/qwen3", "tiny_tokenizer"]) {
    for (const f of readdirSync(join(data, src))) cpSync(join(data, src, f), join(modelDir, f));
  }
  server = spawn(binary, ["serve", modelDir, "--port", "0", "--api-key", "k-test", "--threads", "1"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise((resolve, reject) => {
    let out = "";
    server.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    server.on("exit", (code) => reject(new Error(`hearth serve exited with ${code}`)));
  });
  client = new OpenAI({ apiKey: "k-test", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.on("exit", resolve));
    server.kill("SIGTERM");
    assert.equal(await exited, 0);
  }
  if (modelDir) rmSync(modelDir, { recursive: true, force: true });
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
  assert.deepEqual(usage, full.usage);
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
