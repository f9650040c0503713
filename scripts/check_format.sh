#!/usr/bin/env bash
# Fails when any C++ file under src/ or tests/ is not clang-format clean.
# Usage: scripts/check_format.sh [clang-format binary]   (fix with: scripts/check_format.sh --fix)
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=clang-format
fix=0
for a in "$@"; do
  if [ "$a" = "--fix" ]; then fix=1; else fmt="$a"; fi
done
mapfile -t files < <(git ls-files -co --exclude-standard 'src/*.h' 'src/*.cpp' 'src/*.cu' 'src/*.cuh' 'tests/*.h' 'tests/*.cpp' | sort -u)
if [ "$fix" = 1 ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
"$fmt" --dry-run --Werror "${files[@]}"
echo "clang-format: ${#files[@]} files clean"
