#!/usr/bin/env bash
# Peak RSS of `hearth generate` on a random-weight bf16 model vs weights + KV cache.
# Usage: bench/peak_rss.sh [preset] (default qwen3-0.6b). Needs build/ (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-qwen3-0.6b}
dir=${TMPDIR:-/tmp}/hearth_rss_$preset
cmake --build --preset release --target make_random_model hearth >/dev/null
[ -f "$dir/model.safetensors" ] || build/bench/make_random_model "$dir" --preset "$preset" --dtype bf16
ctx=512
json=$(build/hearth generate "$dir" --prompt-tokens 1,2,3,4,5,6,7,8 --max-tokens 32 --ignore-eos --ctx $ctx --json)
python3 - "$dir" "$ctx" "$json" <<'PY'
import json, os, sys
d, ctx, out = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
cfg = json.load(open(os.path.join(d, "config.json")))
weights = os.path.getsize(os.path.join(d, "model.safetensors"))
block = 16
kv = cfg["num_hidden_layers"] * ((ctx + block - 1) // block) * block * cfg["num_key_value_heads"] * cfg["head_dim"] * 4 * 2
rss = out["peak_rss_bytes"]
mib = lambda b: b / 2**20
print(f"weights {mib(weights):.1f} MiB, KV (f32, {ctx} tokens) {mib(kv):.1f} MiB, peak RSS {mib(rss):.1f} MiB, "
      f"RSS - weights - KV = {mib(rss - weights - kv):.1f} MiB")
print(f"decode {out['decode_tokens_per_second']:.2f} tok/s, prefill {out['prefill_tokens_per_second']:.2f} tok/s, load {out['load_seconds']*1000:.0f} ms")
PY
