// The chat UI at / in a real browser: Debian's chromium driven by playwright-core (which never
// downloads a browser), against a real bare `hearth` (no verb) on a free port with an empty HF
// cache, so it serves the bundled demo model (models/hearth-demo) as a newcomer gets it. Needs
// HEARTH_BINARY and HEARTH_SOURCE_DIR; screenshots go to HEARTH_UI_SCREENSHOTS (the build
// directory's ui-screenshots/).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const shots = process.env.HEARTH_UI_SCREENSHOTS || join(process.cwd(), "ui-screenshots");
const binary = process.env.HEARTH_BINARY;
const demoDir = join(process.env.HEARTH_SOURCE_DIR ?? "", "models", "hearth-demo");
let server, browser, page, work;
const pageErrors = [];

// logit_bias that keeps the demo model from ending its reply (its eos ids), so that a reply
// runs to max_tokens: long enough to be stopped, or exactly as long as asked.
function noEosBias() {
  const gen = JSON.parse(readFileSync(join(demoDir, "generation_config.json"), "utf8"));
  const eos = [gen.eos_token_id].flat();
  return Object.fromEntries(eos.map((id) => [id, -100]));
}

// Token ids of TEXT in the demo model's vocabulary (`hearth tokenize`).
function tokenIds(text) {
  const r = spawnSync(binary, ["tokenize", demoDir], { input: JSON.stringify({ text, add_special_tokens: false }) });
  assert.equal(r.status, 0, String(r.stderr));
  return JSON.parse(String(r.stdout)).ids;
}

async function startBareHearth(extraArgs = []) {
  assert.ok(binary && process.env.HEARTH_SOURCE_DIR, "set HEARTH_BINARY and HEARTH_SOURCE_DIR");
  work ??= mkdtempSync(join(tmpdir(), "hearth-ui-"));
  mkdirSync(join(work, "hf"), { recursive: true });
  // An empty HF cache: bare hearth falls back to the demo model next to its build directory.
  const env = { ...process.env, HF_HOME: join(work, "hf") };
  delete env.HEARTH_DEMO_MODEL;
  const proc = spawn(binary, ["--port", "0", "--threads", "1", ...extraArgs], { env, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  const url = await new Promise((resolve, reject) => {
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/chat UI: (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (m) resolve(m[1]);
    });
    proc.on("exit", (code) => reject(new Error(`hearth exited with ${code}: ${out}`)));
  });
  assert.match(out, /hearth: model .*models\/hearth-demo: the bundled demo model/);
  return { proc, url };
}

async function stats() {
  return (await fetch(server.url + "stats")).json();
}

async function screenshot(name) {
  await page.screenshot({ path: join(shots, name + ".png"), fullPage: true });
}

// Settings live in a panel that starts collapsed (and collapses again on reload).
async function setSetting(id, value) {
  await page.evaluate(() => (document.getElementById("settings").open = true));
  await page.fill("#" + id, value);
}

// Sends a message through the composer and waits until the reply has ended.
async function sendAndWait(text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
  // The message is stored, and the reply (if any) is no longer streaming.
  await page.waitForFunction((t) => {
    const convs = JSON.parse(localStorage.getItem("hearth.conversations") ?? "[]");
    const c = convs.find((x) => x.id === localStorage.getItem("hearth.current"));
    const last = c?.messages.findLast((m) => m.role === "user");
    return last?.content === t && !document.querySelector(".streaming") && !document.getElementById("send").hidden;
  }, text);
}

const storedConversations = () => page.evaluate(() => JSON.parse(localStorage.getItem("hearth.conversations")));

before(async () => {
  mkdirSync(shots, { recursive: true });
  server = await startBareHearth();
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.goto(server.url);
});

// SIGTERM stops a server cleanly (exit 0).
async function stopServer(s) {
  if (s && s.proc.exitCode === null) {
    const exited = new Promise((resolve) => s.proc.on("exit", resolve));
    s.proc.kill("SIGTERM");
    assert.equal(await exited, 0);
  }
}

after(async () => {
  if (browser) await browser.close();
  await stopServer(server);
  if (work) rmSync(work, { recursive: true, force: true });
});

test("the page shows the served model, its context and the server status", async () => {
  await page.waitForFunction(() => document.getElementById("model-name").textContent === "hearth-demo");
  const ctx = (await (await fetch(server.url + "v1/models")).json()).data[0].context_length;
  assert.equal(await page.textContent("#model-ctx"), `context ${ctx.toLocaleString("en-US")} tokens`);
  await page.waitForFunction(() => document.getElementById("status-list").textContent.includes("Memory (RSS)"));
  const status = await page.textContent("#status-list");
  for (const field of ["Model", "hearth-demo", "KV blocks", "Prompt cache", "Requests"]) assert.ok(status.includes(field), field);
});

test("a reply streams in, and Stop ends it mid-stream", async () => {
  // 1000 tokens (the demo model's context is 1024) take it well under a second on a fast 2-core
  // host, less than a round trip of polling and clicking from here once the server is busy on
  // both cores: a click sent from the test after the fifth update found the reply finished and
  // the button hidden (CI, stop 35). So the page presses Stop itself, from the observer that sees
  // the fifth update, within the same task.
  await setSetting("set-max-tokens", "1000");
  await setSetting("set-extra", JSON.stringify({ logit_bias: noEosBias() }));
  // Record the reply's text each time the DOM changes; at the fifth distinct length, press Stop.
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver((_, observer) => {
      const c = document.querySelector(".message.assistant.streaming .content");
      if (!c) return;
      window.__lengths.push(c.textContent.length);
      if (new Set(window.__lengths.filter((n) => n > 0)).size >= 5) {
        observer.disconnect();
        document.getElementById("stop").click();
      }
    }).observe(document.getElementById("messages"), { childList: true, subtree: true, characterData: true });
  });
  await page.fill("#input", "Hello there");
  await page.press("#input", "Enter");
  await page.waitForSelector("#send:not([hidden])");
  const lengths = await page.evaluate(() => window.__lengths);
  assert.ok(new Set(lengths.filter((n) => n > 0)).size >= 5, `streamed in several updates: ${lengths.length}`);
  const [conv] = await storedConversations();
  const reply = conv.messages.at(-1);
  assert.equal(reply.role, "assistant");
  assert.equal(reply.note, "(stopped)");
  assert.ok(reply.content.length > 0, "a partial reply");
  assert.match(await page.textContent(".message.assistant .note"), /stopped/);
  // The server saw the client go away and cancelled the generation.
  for (let i = 0; i < 50 && (await stats()).requests.cancelled < 1; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal((await stats()).requests.cancelled, 1);
  await screenshot("2-stopped");
});

test("a second conversation; both are listed after a reload", async () => {
  await setSetting("set-max-tokens", "12");
  await page.click("#new-chat");
  await sendAndWait("Second question");
  const reply = await page.textContent(".message.assistant .content");
  assert.ok(reply.length > 0);
  assert.match(await page.textContent("#speed"), /^12 tokens, [\d.]+ tok\/s$/);
  await page.reload();
  await page.waitForFunction(() => document.querySelectorAll("#conversations li").length === 2);
  const titles = await page.$$eval("#conversations .conv-title", (b) => b.map((x) => x.textContent));
  assert.deepEqual(titles, ["Second question", "Hello there"]);
  // The reload kept the second one open; the first is one click away, with its stopped reply.
  assert.equal(await page.textContent(".message.user .content"), "Second question");
  await page.click("#conversations li:nth-child(2) .conv-title");
  assert.equal(await page.textContent(".message.user .content"), "Hello there");
  assert.match(await page.textContent(".message.assistant .note"), /stopped/);
  await screenshot("3-two-conversations");
});

test("a conversation can be deleted", async () => {
  await page.click("#new-chat");
  await sendAndWait("Third, to delete");
  assert.equal(await page.locator("#conversations li").count(), 3);
  await page.click("#conversations li:first-child .conv-delete");
  assert.equal(await page.locator("#conversations li").count(), 2);
  assert.equal((await storedConversations()).length, 2);
  // No reload since the third request: the status panel refreshes by itself.
  await page.waitForFunction(() => /Requests\s*3 \(/.test(document.getElementById("status-list").textContent), null, {
    timeout: 10000,
  });
});

// Tags in the model's real output: logit_bias (an extra request field, set in the settings)
// pushes the demo model towards the tokens of "<u>", and its greedy output is then a run of
// them with tags in it ("<<<<>u><u>u>..."). innerHTML would make <u> elements of them.
test("HTML in the model's streamed output is shown as text", async () => {
  await setSetting("set-max-tokens", "40");
  await setSetting("set-temperature", "0");
  const bias = { ...noEosBias(), ...Object.fromEntries(tokenIds("<u>").map((id) => [id, 100])) };
  await setSetting("set-extra", JSON.stringify({ logit_bias: bias }));
  await page.click("#new-chat");
  await sendAndWait("Write some HTML");
  const content = (await storedConversations())[0].messages.at(-1).content;
  assert.match(content, /<u>/, `the model's output has tags: ${content}`);
  const rendered = await page.textContent(".message.assistant .content");
  const count = (s, c) => s.split(c).length - 1;
  assert.equal(count(rendered, "<"), count(content, "<"), `every '<' is shown: ${rendered}`);
  assert.equal(await page.locator("#messages u").count(), 0);
  await setSetting("set-extra", "");
  await screenshot("4-html-output-as-text");
});

// The exact string the issue names, through the same renderer: a stored conversation whose
// assistant turn (content and reasoning) carries a script, an event handler and raw HTML.
test("<script> in an assistant message renders as text and never runs", async () => {
  const evil = [
    "Here is <script>window.__pwned = 1</script> and <img src=x onerror=\"window.__pwned = 2\">.",
    "",
    "```html",
    "<b>not bold</b><script>window.__pwned = 3</script>",
    "```",
    "",
    "**bold** and `<i>code</i>` and [a link](javascript:window.__pwned=4)",
  ].join("\n");
  await page.evaluate((content) => {
    const convs = JSON.parse(localStorage.getItem("hearth.conversations"));
    convs.unshift({
      id: "evil",
      title: "Injected",
      created: Date.now(),
      messages: [
        { role: "user", content: "<script>window.__pwned = 5</script>" },
        { role: "assistant", content, reasoning: "thinking <script>window.__pwned = 6</script>" },
      ],
    });
    localStorage.setItem("hearth.conversations", JSON.stringify(convs));
    localStorage.setItem("hearth.current", "evil");
  }, evil);
  await page.reload();
  await page.waitForSelector(".message.assistant");
  const text = await page.textContent(".message.assistant .content");
  assert.ok(text.includes("<script>window.__pwned = 1</script>"), text);
  assert.ok(text.includes('<img src=x onerror="window.__pwned = 2">'), text);
  assert.ok(text.includes("<b>not bold</b><script>window.__pwned = 3</script>"), text);
  assert.equal(await page.textContent(".message.user .content"), "<script>window.__pwned = 5</script>");
  // Markdown still works: a code block, bold, inline code; the javascript: link stays text.
  assert.equal(await page.textContent(".message.assistant pre code"), "<b>not bold</b><script>window.__pwned = 3</script>");
  assert.equal(await page.textContent(".message.assistant strong"), "bold");
  assert.equal(await page.textContent(".message.assistant p code"), "<i>code</i>");
  assert.equal(await page.locator(".message.assistant a").count(), 0);
  assert.ok(text.includes("[a link](javascript:window.__pwned=4)"));
  for (const tag of ["script", "img", "b", "i"]) assert.equal(await page.locator(`#messages ${tag}`).count(), 0, tag);
  // Reasoning is collapsed, and text too.
  assert.equal(await page.getAttribute(".message.assistant details.reasoning", "open"), null);
  assert.equal(await page.textContent(".reasoning-text"), "thinking <script>window.__pwned = 6</script>");
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  await page.click(".message.assistant details.reasoning summary");
  await screenshot("5-script-as-text");
});

test("a refused request shows the server's error message", async () => {
  await setSetting("set-max-tokens", "100000");
  await page.fill("#input", "Too long");
  await page.press("#input", "Enter");
  await page.waitForSelector("#error:not([hidden])");
  const error = await page.textContent("#error");
  assert.match(error, /\(400\).*exceeds the context/);
  // The refused message is back in the input box, not in the conversation.
  assert.equal(await page.inputValue("#input"), "Too long");
  assert.ok(!(await storedConversations())[0].messages.some((m) => m.content === "Too long"));
  await screenshot("6-error");
  await setSetting("set-max-tokens", "12");
  assert.deepEqual(pageErrors, []);
});

// With --api-key the page still loads (it holds no data), says the API refused it, and works
// once the key is entered in the settings.
test("a server with an API key: the page asks for it, then chats", async () => {
  const keyed = await startBareHearth(["--api-key", "k-ui"]);
  const p = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  try {
    p.on("pageerror", (e) => pageErrors.push(e.message));
    await p.goto(keyed.url);
    await p.waitForSelector("#error:not([hidden])");
    assert.match(await p.textContent("#error"), /\(401\).*API key/);
    await p.evaluate(() => (document.getElementById("settings").open = true));
    await p.fill("#set-api-key", "k-ui");
    await p.waitForFunction(() => document.getElementById("model-name").textContent === "hearth-demo");
    assert.equal(await p.isHidden("#error"), true);
    await p.fill("#set-max-tokens", "8");
    await p.fill("#input", "Hello");
    await p.press("#input", "Enter");
    await p.waitForFunction(() => !document.querySelector(".streaming") && document.querySelector(".message.assistant"));
    assert.ok((await p.textContent(".message.assistant .content")).length > 0);
    assert.equal(await p.isHidden("#error"), true);
    await p.screenshot({ path: join(shots, "7-api-key.png"), fullPage: true });
  } finally {
    await p.close();
    await stopServer(keyed);
  }
  assert.deepEqual(pageErrors, []);
});
