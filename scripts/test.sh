#!/usr/bin/env bash
# Builds Hearth and runs every test:
#   1. Release build (GCC): unit, kernel, format, model-parity tests and the clang-format check
#   2. clang build with ASan + UBSan of the same tests (also proves clang builds warning-free)
#   3. clang build of the libFuzzer targets, each fuzzed for a bounded number of runs
# Usage: scripts/test.sh [release|asan|fuzz|clang ...]   (default: release asan fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan fuzz)
for p in "${presets[@]}"; do
  echo "== $p =="
  cmake --preset "$p" >/dev/null
  cmake --build --preset "$p"
  if [ "$p" = clang ]; then continue; fi
  ctest --preset "$p" -j "$(nproc)"
done
echo "all tests passed: ${presets[*]}"
