#!/usr/bin/env node
// Hearth vs llama.cpp on the same GGUF file, in one run: prefill (ppN) and decode (tgN) tok/s
// with the same thread count, the same prompt (hearth bench's random ids) and the same
// definitions. llama.cpp is node-llama-cpp's prebuilt CPU binaries (never built here).
//
//   node bench/peer/compare.mjs MODEL.gguf [--threads N] [--prompt-tokens 512] [--gen-tokens 128]
//        [--reps 3] [--hearth build/hearth] [--json]
//
// Both sides: one warm-up (16 prompt tokens, 2 generated), then per rep a fresh sequence,
// the whole prompt evaluated as one batch (prefill tok/s = prompt / time to the first token),
// then greedy decode to gen-tokens in all (decode tok/s = (gen - 1) / time from the first to
// the last token); the median over reps.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";
import os from "node:os";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const o = {
    model: "", threads: 0, promptTokens: 512, genTokens: 128, reps: 3, json: false,
    hearth: path.join(here, "..", "..", "build", "hearth"),
  };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i], next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--threads") o.threads = Number(next());
    else if (a === "--prompt-tokens") o.promptTokens = Number(next());
    else if (a === "--gen-tokens") o.genTokens = Number(next());
    else if (a === "--reps") o.reps = Number(next());
    else if (a === "--hearth") o.hearth = next();
    else if (a === "--json") o.json = true;
    else if (a === "--help" || a === "-h") {
      console.log("usage: node bench/peer/compare.mjs MODEL.gguf [--threads N] [--prompt-tokens 512] " +
        "[--gen-tokens 128] [--reps 3] [--hearth build/hearth] [--json]");
      process.exit(0);
    } else if (!a.startsWith("-") && !o.model) o.model = a;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.model) throw new Error("MODEL.gguf is required (--help)");
  if (!o.threads) o.threads = os.availableParallelism();
  if (!(o.promptTokens >= 1 && o.genTokens >= 2 && o.reps >= 1)) throw new Error("bad --prompt-tokens/--gen-tokens/--reps");
  return o;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

// hearth bench's prompt: splitmix64 from its seed, modulo the vocabulary size.
function randomPrompt(n, vocab, seed) {
  const mask = (1n << 64n) - 1n;
  let state = BigInt(seed);
  const ids = [];
  for (let i = 0; i < n; ++i) {
    state = (state + 0x9E3779B97F4A7C15n) & mask;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & mask;
    z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & mask;
    ids.push(Number((z ^ (z >> 31n)) % BigInt(vocab)));
  }
  return ids;
}

function runHearth(o) {
  const args = ["bench", o.model, "--json", "--no-record", "--threads", String(o.threads),
    "--prompt-tokens", String(o.promptTokens), "--gen-tokens", String(o.genTokens), "--reps", String(o.reps)];
  const r = spawnSync(o.hearth, args, { encoding: "utf8", maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${o.hearth} ${args.join(" ")} failed (${r.status}): ${r.stderr || r.error}`);
  return JSON.parse(r.stdout);
}

async function runLlamaCpp(o, prompt) {
  const logs = [];
  const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    maxThreads: o.threads, logLevel: LlamaLogLevel.debug, logger: (level, message) => logs.push(message),
  });
  const model = await llama.loadModel({ modelPath: o.model, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: o.promptTokens + o.genTokens + 16, batchSize: Math.max(512, o.promptTokens), sequences: 1,
    threads: { ideal: o.threads, min: o.threads },
  });
  const sequence = context.getSequence();
  const once = async (tokens, gen) => {
    await sequence.clearHistory();
    const t0 = performance.now();
    let first = 0, last = 0, n = 0;
    for await (const token of sequence.evaluate(tokens, { temperature: 0 })) {
      last = performance.now();
      if (n === 0) first = last;
      if (++n === gen) break;
      void token;
    }
    return { prefill_tokens_per_second: tokens.length / ((first - t0) / 1e3),
      ttft_seconds: (first - t0) / 1e3, decode_tokens_per_second: (gen - 1) / ((last - first) / 1e3) };
  };
  await once(prompt.slice(0, Math.min(prompt.length, 16)), 2);  // warm-up
  const runs = [];
  for (let r = 0; r < o.reps; ++r) {
    runs.push(await once(prompt, o.genTokens));
    process.stderr.write(`llama.cpp: run ${r + 1}/${o.reps}: pp ${runs.at(-1).prefill_tokens_per_second.toFixed(1)} ` +
      `tok/s, tg ${runs.at(-1).decode_tokens_per_second.toFixed(2)} tok/s\n`);
  }
  // Which of the prebuilt CPU variants ggml loaded (it scores them against this CPU).
  const variant = logs.map((l) => l.match(/libggml-cpu-([\w-]+)\.so/)).find((m) => m)?.[1] ?? "unknown";
  const result = {
    package: "node-llama-cpp@3.21.1", llama_cpp_release: llama.llamaCppRelease.release, cpu_variant: variant,
    cpu_features: llama.systemInfo.trim(), threads: o.threads,
    batch_size: context.batchSize, prefill_tokens_per_second: median(runs.map((r) => r.prefill_tokens_per_second)),
    decode_tokens_per_second: median(runs.map((r) => r.decode_tokens_per_second)), runs,
  };
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  return result;
}

const o = parseArgs(process.argv.slice(2));
const hearth = runHearth(o);
const prompt = randomPrompt(o.promptTokens, hearth.model.vocab_size, hearth.settings.prompt_seed);
const peer = await runLlamaCpp(o, prompt);
const out = {
  model: path.resolve(o.model), threads: o.threads, prompt_tokens: o.promptTokens, gen_tokens: o.genTokens,
  reps: o.reps, hearth_commit: hearth.hearth_commit, cpu_model: hearth.machine.cpu_model,
  hearth: { prefill_tokens_per_second: hearth.prefill_tokens_per_second,
    decode_tokens_per_second: hearth.decode_tokens_per_second, runs: hearth.runs },
  llama_cpp: peer,
  ratio: { prefill: hearth.prefill_tokens_per_second / peer.prefill_tokens_per_second,
    decode: hearth.decode_tokens_per_second / peer.decode_tokens_per_second },
};
if (o.json) {
  console.log(JSON.stringify(out, null, 2));
} else {
  const pp = `pp${o.promptTokens}`, tg = `tg${o.genTokens}`;
  console.log(`${path.basename(o.model)}, ${o.threads} threads, median of ${o.reps} (llama.cpp CPU variant: ${peer.cpu_variant})`);
  console.log(`${"".padEnd(8)}${"hearth".padStart(14)}${"llama.cpp".padStart(14)}${"ratio".padStart(9)}`);
  for (const [name, h, l, r] of [[pp, out.hearth.prefill_tokens_per_second, peer.prefill_tokens_per_second, out.ratio.prefill],
    [tg, out.hearth.decode_tokens_per_second, peer.decode_tokens_per_second, out.ratio.decode]]) {
    console.log(`${name.padEnd(8)}${(h.toFixed(2) + " t/s").padStart(14)}${(l.toFixed(2) + " t/s").padStart(14)}${r.toFixed(3).padStart(9)}`);
  }
}
