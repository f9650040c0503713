// Hearth's chat UI: plain JS, no framework, no build step. It talks only to the public API
// (/v1/chat/completions, /v1/models, /stats). Model output is never parsed as HTML: the
// markdown renderer builds DOM nodes and puts text in with textContent.
"use strict";

const STORE_KEY = "hearth.conversations";
const CURRENT_KEY = "hearth.current";
const SETTINGS_KEY = "hearth.settings";
const STATUS_PERIOD_MS = 3000;

const $ = (id) => document.getElementById(id);

// ---- Markdown (a safe subset) -------------------------------------------------------------
// Blocks: fenced code (``` with an optional language; an unclosed fence runs to the end, as it
// does mid-stream), headings (#..######), lists (-, *, 1.), block quotes (>), paragraphs.
// Inline: `code`, **bold**, *italic* / _italic_, [text](http(s) link). Everything else is text.

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function renderInline(text, parent) {
  // Earliest match wins; text between matches is appended as text nodes.
  const pattern = /`([^`\n]+)`|\*\*([^*\n]+)\*\*|\*([^*\n]+)\*|\b_([^_\n]+)_\b|\[([^\]\n]+)\]\(([^)\s]+)\)/g;
  let last = 0;
  for (const m of text.matchAll(pattern)) {
    if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
    if (m[1] !== undefined) {
      parent.append(el("code", null, m[1]));
    } else if (m[2] !== undefined) {
      const b = el("strong");
      renderInline(m[2], b);
      parent.append(b);
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const i = el("em");
      renderInline(m[3] ?? m[4], i);
      parent.append(i);
    } else {
      let url = null;
      try {
        url = new URL(m[6], location.href);
      } catch {
        url = null;
      }
      if (url && (url.protocol === "http:" || url.protocol === "https:")) {
        const a = el("a", null, m[5]);
        a.href = url.href;
        a.rel = "noopener noreferrer";
        a.target = "_blank";
        parent.append(a);
      } else {
        parent.append(document.createTextNode(m[0]));
      }
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}

function renderMarkdown(text) {
  const root = document.createDocumentFragment();
  const lines = text.split("\n");
  let para = [];
  let list = null;
  const flushPara = () => {
    if (para.length) {
      const p = el("p");
      para.forEach((line, k) => {
        if (k) p.append(el("br"));
        renderInline(line, p);
      });
      root.append(p);
      para = [];
    }
  };
  const flushList = () => {
    if (list) root.append(list.node);
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)\s*$/);
    if (fence) {
      flushPara();
      flushList();
      const body = [];
      let j = i + 1;
      while (j < lines.length && !lines[j].trim().startsWith(fence[1])) body.push(lines[j++]);
      const pre = el("pre", "code-block");
      if (fence[2]) pre.append(el("div", "code-lang", fence[2]));
      const code = el("code", null, body.join("\n"));
      pre.append(code);
      root.append(pre);
      i = j;  // the closing fence (or the end)
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
    const numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
    if (heading) {
      flushPara();
      flushList();
      const h = el("h" + Math.min(6, heading[1].length + 2));
      renderInline(heading[2], h);
      root.append(h);
    } else if (bullet || numbered) {
      flushPara();
      const tag = bullet ? "ul" : "ol";
      if (!list || list.tag !== tag) {
        flushList();
        list = { tag, node: el(tag) };
      }
      const li = el("li");
      renderInline((bullet || numbered)[1], li);
      list.node.append(li);
    } else if (line.startsWith(">")) {
      flushPara();
      flushList();
      const q = el("blockquote");
      renderInline(line.replace(/^>\s?/, ""), q);
      root.append(q);
    } else if (line.trim() === "") {
      flushPara();
      flushList();
    } else {
      flushList();
      para.push(line);
    }
  }
  flushPara();
  flushList();
  return root;
}

// ---- State: conversations in localStorage --------------------------------------------------

function loadJson(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch {
    return fallback;
  }
}

const state = {
  conversations: loadJson(STORE_KEY, []),  // [{id, title, created, messages: [{role, content, reasoning?, note?}]}]
  current: localStorage.getItem(CURRENT_KEY),
  settings: loadJson(SETTINGS_KEY, {}),
  model: null,
  controller: null,  // AbortController of the reply being streamed
};

function save() {
  localStorage.setItem(STORE_KEY, JSON.stringify(state.conversations));
  if (state.current) localStorage.setItem(CURRENT_KEY, state.current);
  else localStorage.removeItem(CURRENT_KEY);
}

function currentConversation() {
  return state.conversations.find((c) => c.id === state.current) ?? null;
}

function newConversation() {
  const c = { id: "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", created: Date.now(), messages: [] };
  state.conversations.unshift(c);
  state.current = c.id;
  save();
  return c;
}

// ---- Rendering -----------------------------------------------------------------------------

function renderList() {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of state.conversations) {
    const li = el("li", c.id === state.current ? "active" : null);
    li.dataset.id = c.id;
    const open = el("button", "conv-title", c.title);
    open.type = "button";
    open.title = c.title;
    open.addEventListener("click", () => {
      if (state.controller) return;
      state.current = c.id;
      save();
      renderAll();
    });
    const del = el("button", "conv-delete", "\u00d7");
    del.type = "button";
    del.title = "Delete this conversation";
    del.setAttribute("aria-label", "Delete " + c.title);
    del.addEventListener("click", () => {
      if (state.controller && c.id === state.current) return;
      state.conversations = state.conversations.filter((x) => x.id !== c.id);
      if (state.current === c.id) state.current = state.conversations[0]?.id ?? null;
      save();
      renderAll();
    });
    li.append(open, del);
    ul.append(li);
  }
}

function renderMessage(msg) {
  const div = el("div", "message " + msg.role);
  div.append(el("div", "role", msg.role === "assistant" ? "Assistant" : "You"));
  fillMessage(div, msg);
  return div;
}

// (Re)draws a message's body; called for every streamed delta.
function fillMessage(div, msg) {
  const reasoningOpen = div.querySelector("details.reasoning")?.open ?? false;  // kept across redraws
  for (const child of [...div.children]) if (child.className !== "role") child.remove();
  if (msg.reasoning) {
    const details = el("details", "reasoning");
    details.open = reasoningOpen;
    details.append(el("summary", null, "Reasoning"));
    details.append(el("div", "reasoning-text", msg.reasoning));
    div.append(details);
  }
  const body = el("div", "content");
  if (msg.role === "assistant") body.append(renderMarkdown(msg.content || ""));
  else body.textContent = msg.content;
  div.append(body);
  if (msg.note) div.append(el("div", "note", msg.note));
}

function renderMessages() {
  const box = $("messages");
  box.replaceChildren();
  const c = currentConversation();
  if (!c || c.messages.length === 0) {
    box.append(el("p", "empty", "Send a message to start a conversation."));
    return;
  }
  for (const m of c.messages) box.append(renderMessage(m));
  box.scrollTop = box.scrollHeight;
}

function renderAll() {
  renderList();
  renderMessages();
}

function showError(text) {
  const e = $("error");
  e.textContent = text;
  e.hidden = !text;
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
}

// ---- Settings ------------------------------------------------------------------------------

const SETTING_FIELDS = { system: "set-system", temperature: "set-temperature", top_p: "set-top-p", max_tokens: "set-max-tokens", extra: "set-extra", api_key: "set-api-key" };

function initSettings() {
  $("settings-form").addEventListener("submit", (ev) => ev.preventDefault());
  for (const [key, id] of Object.entries(SETTING_FIELDS)) {
    const input = $(id);
    input.value = state.settings[key] ?? "";
    input.addEventListener("input", () => {
      state.settings[key] = input.value;
      localStorage.setItem(SETTINGS_KEY, JSON.stringify(state.settings));
      if (key === "api_key") {
        showError("");
        loadModel();
        refreshStatus();
      }
    });
  }
}

function authHeaders() {
  const key = state.settings.api_key;
  return key ? { Authorization: "Bearer " + key } : {};
}

// The request body from the conversation and the settings; throws Error on a bad setting.
function buildRequest(conversation) {
  const s = state.settings;
  const messages = [];
  if (s.system && s.system.trim()) messages.push({ role: "system", content: s.system });
  for (const m of conversation.messages) {
    if (m.role === "user" || (m.role === "assistant" && m.content)) messages.push({ role: m.role, content: m.content });
  }
  const body = { model: state.model?.id ?? "hearth", messages, stream: true, stream_options: { include_usage: true } };
  const number = (name, value, integer) => {
    if (value === undefined || String(value).trim() === "") return;
    const v = Number(value);
    if (!Number.isFinite(v) || (integer && !Number.isInteger(v))) throw new Error(`Settings: ${name} must be a number`);
    body[name] = v;
  };
  number("temperature", s.temperature);
  number("top_p", s.top_p);
  number("max_tokens", s.max_tokens, true);
  if (s.extra && s.extra.trim()) {
    let extra;
    try {
      extra = JSON.parse(s.extra);
    } catch (e) {
      throw new Error("Settings: extra request fields are not valid JSON: " + e.message);
    }
    if (typeof extra !== "object" || extra === null || Array.isArray(extra)) throw new Error("Settings: extra request fields must be a JSON object");
    Object.assign(body, extra);
  }
  return body;
}

// ---- Chat ----------------------------------------------------------------------------------

// The message of an API error response: {"error": {"message"}} (OpenAI), else the status.
async function errorText(response) {
  let detail = "";
  try {
    const j = await response.json();
    detail = j?.error?.message ?? JSON.stringify(j);
  } catch {
    detail = response.statusText;
  }
  return `The server refused the request (${response.status}): ${detail}`;
}

// Yields the JSON payload of each SSE `data:` frame until [DONE].
async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of frame.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

async function send(text) {
  showError("");
  let c = currentConversation() ?? newConversation();
  let body;
  c.messages.push({ role: "user", content: text });
  try {
    body = buildRequest(c);
  } catch (e) {
    c.messages.pop();
    showError(e.message);
    return;
  }
  if (c.title === "New chat") c.title = text.length > 40 ? text.slice(0, 40) + "\u2026" : text;
  const reply = { role: "assistant", content: "", reasoning: "" };
  c.messages.push(reply);
  save();
  renderAll();
  const box = $("messages");
  const div = box.lastElementChild;
  div.classList.add("streaming");

  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  const started = performance.now();
  let firstTokenAt = null;
  let chunks = 0;
  let usage = null;
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const event of sseEvents(response)) {
      if (event.error) throw new Error("The server stopped the reply: " + (event.error.message ?? JSON.stringify(event.error)));
      if (event.usage) usage = event.usage;
      const delta = event.choices?.[0]?.delta;
      if (!delta) continue;
      const piece = (delta.content ?? "") + (delta.reasoning_content ?? "");
      if (!piece) continue;
      firstTokenAt ??= performance.now();
      chunks++;
      reply.content += delta.content ?? "";
      reply.reasoning += delta.reasoning_content ?? "";
      fillMessage(div, reply);
      box.scrollTop = box.scrollHeight;
    }
  } catch (e) {
    if (e.name === "AbortError") reply.note = "(stopped)";
    else showError(e.message);
  } finally {
    state.controller = null;
    const seconds = (performance.now() - (firstTokenAt ?? started)) / 1000;
    const tokens = usage?.completion_tokens ?? chunks;
    if (tokens > 0) {
      const rate = seconds > 0 ? tokens / seconds : 0;
      $("speed").textContent = `${tokens} tokens, ${rate.toFixed(1)} tok/s`;
      reply.stats = { tokens, seconds };
    }
    if (!reply.reasoning) delete reply.reasoning;
    // A refused request leaves nothing behind: its message goes back to the input box, to be
    // edited and sent again.
    if (!reply.content && !reply.reasoning && !reply.note) {
      c.messages.splice(-2, 2);
      if (c.messages.length === 0) c.title = "New chat";
      if (!$("input").value) $("input").value = text;
    }
    div.classList.remove("streaming");
    save();
    renderAll();
    setBusy(false);
  }
}

// ---- Model info and status -----------------------------------------------------------------

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: authHeaders() });
    if (!r.ok) throw new Error(await errorText(r));
    const j = await r.json();
    state.model = j.data?.[0] ?? null;
    if (state.model) {
      $("model-name").textContent = state.model.id;
      if (state.model.context_length) $("model-ctx").textContent = `context ${state.model.context_length.toLocaleString("en-US")} tokens`;
      document.title = "Hearth \u2014 " + state.model.id;
    }
  } catch (e) {
    showError(e.message);
  }
}

function mib(bytes) {
  return (bytes / (1024 * 1024)).toFixed(1) + " MiB";
}

async function refreshStatus() {
  try {
    const r = await fetch("/stats", { headers: authHeaders() });
    if (!r.ok) throw new Error(await errorText(r));
    const s = await r.json();
    const rows = [
      ["Model", s.model],
      ["Context", s.context_tokens?.toLocaleString("en-US") + " tokens"],
      ["Memory (RSS)", s.memory?.rss_bytes !== undefined ? mib(s.memory.rss_bytes) : "?"],
      ["KV blocks", s.kv_cache ? `${s.kv_cache.blocks_used} / ${s.kv_cache.blocks_total} used` : "?"],
      ["Prompt cache", s.cache ? `${mib(s.cache.bytes ?? 0)}, ${s.cache.entries ?? 0} entries, ${s.cache.hit_tokens ?? 0} tokens reused` : "?"],
      ["Requests", s.requests ? `${s.requests.total} (${s.requests.errors_4xx} 4xx, ${s.requests.errors_5xx} 5xx, ${s.requests.cancelled} cancelled)` : "?"],
      ["Running / queued", s.queue ? `${s.queue.running ?? 0} / ${s.queue.depth ?? 0}` : "?"],
      ["Tokens", s.tokens ? `${s.tokens.prompt} prompt, ${s.tokens.generated} generated` : "?"],
      ["Uptime", s.uptime_seconds !== undefined ? `${Math.round(s.uptime_seconds)} s` : "?"],
    ];
    const dl = $("status-list");
    dl.replaceChildren();
    for (const [k, v] of rows) dl.append(el("dt", null, k), el("dd", null, String(v)));
    $("status-error").hidden = true;
  } catch (e) {
    $("status-error").textContent = e.message;
    $("status-error").hidden = false;
  }
}

// ---- Wiring --------------------------------------------------------------------------------

function init() {
  initSettings();
  if (!currentConversation()) state.current = state.conversations[0]?.id ?? null;
  renderAll();
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = $("input").value;
    if (!text.trim() || state.controller) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => state.controller?.abort());
  $("new-chat").addEventListener("click", () => {
    if (state.controller) return;
    newConversation();
    showError("");
    renderAll();
    $("input").focus();
  });
  loadModel();
  refreshStatus();
  setInterval(refreshStatus, STATUS_PERIOD_MS);
}

document.addEventListener("DOMContentLoaded", init);
