#!/usr/bin/env bash
# Fetches two sets of llama.cpp test material from the git bundle of llama.cpp shipped inside
# the npm package node-llama-cpp@3.21.1 (pinned), so the sets are reproducible:
#   tests/data/external/chat_templates/*.jinja   real chat templates (models/templates), which
#     tests/chat compares against Jinja2 renders (tests/data/chat/llamacpp_renders.json);
#   tests/data/external/llamacpp_vocab/ggml-vocab-*.gguf{,.inp,.out}   llama.cpp's vocabulary-only
#     GGUF files (models/), written by its converter from the real HF tokenizers, with the ids
#     HF's tokenizer gives for its test texts; tests/tokenizer/llamacpp_vocab_test.cpp reads them.
# Idempotent: does nothing when both sets are already there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
templates="$root/tests/data/external/chat_templates"
vocab="$root/tests/data/external/llamacpp_vocab"
version="3.21.1"

if [[ -f "$templates/.complete-$version" && -f "$vocab/.complete-$version" ]]; then
  echo "llama.cpp chat templates and vocabularies already in tests/data/external"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
tar -xzf "$tmp/node-llama-cpp-$version.tgz" -C "$tmp" package/llama/gitRelease.bundle
git -c advice.detachedHead=false clone --quiet "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp"

mkdir -p "$templates" "$vocab"
rm -f "$templates"/*.jinja "$vocab"/ggml-vocab-*
cp "$tmp/llama.cpp/models/templates/"*.jinja "$templates/"
cp "$tmp/llama.cpp/models/"ggml-vocab-* "$vocab/"
touch "$templates/.complete-$version" "$vocab/.complete-$version"
echo "copied $(ls "$templates"/*.jinja | wc -l) chat templates and $(ls "$vocab"/*.gguf | wc -l) vocabularies"
