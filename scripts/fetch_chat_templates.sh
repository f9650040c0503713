#!/usr/bin/env bash
# Fetches the llama.cpp chat templates (models/templates/*.jinja) that tests/chat compares
# against Jinja2 renders (tests/data/chat/llamacpp_renders.json). They come from the git
# bundle of llama.cpp shipped inside the npm package node-llama-cpp@3.21.1 (pinned), so the
# set is reproducible. Idempotent: does nothing when the templates are already there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/tests/data/external/chat_templates"
version="3.21.1"

if [[ -f "$dest/.complete-$version" ]]; then
  echo "chat templates already in $dest"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
tar -xzf "$tmp/node-llama-cpp-$version.tgz" -C "$tmp" package/llama/gitRelease.bundle
git clone --quiet "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp"

mkdir -p "$dest"
rm -f "$dest"/*.jinja
cp "$tmp/llama.cpp/models/templates/"*.jinja "$dest/"
touch "$dest/.complete-$version"
echo "copied $(ls "$dest"/*.jinja | wc -l) chat templates to $dest"
