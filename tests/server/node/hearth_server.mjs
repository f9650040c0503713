// Starts `hearth serve` on the tiny model (qwen3 parity weights + the tiny byte-level
// tokenizer) on a free port, for the client-SDK tests. Needs HEARTH_BINARY (the hearth
// executable) and HEARTH_TEST_DATA (tests/data).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const API_KEY = "k-test";

export async function startServer(extraArgs = []) {
  const binary = process.env.HEARTH_BINARY;
  const data = process.env.HEARTH_TEST_DATA;
  assert.ok(binary && data, "set HEARTH_BINARY and HEARTH_TEST_DATA");
  const modelDir = mkdtempSync(join(tmpdir(), "hearth-node-"));
  for (const src of ["parity/qwen3", "tiny_tokenizer"]) {
    for (const f of readdirSync(join(data, src))) cpSync(join(data, src, f), join(modelDir, f));
  }
  const proc = spawn(binary, ["serve", modelDir, "--port", "0", "--api-key", API_KEY, "--threads", "1", ...extraArgs], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise((resolve, reject) => {
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on("exit", (code) => reject(new Error(`hearth serve exited with ${code}`)));
  });
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    // SIGTERM must stop the server cleanly (exit 0).
    async stop() {
      if (proc.exitCode === null) {
        const exited = new Promise((resolve) => proc.on("exit", resolve));
        proc.kill("SIGTERM");
        assert.equal(await exited, 0);
      }
      rmSync(modelDir, { recursive: true, force: true });
    },
  };
}
