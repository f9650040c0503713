#!/usr/bin/env bash
# CPU kernels on the `device` machine's CPU, for instructions this machine lacks (its Xeon has
# AMX; see docs/architecture.md). That machine has no apt packages, so the binaries travel.
#   scripts/cpu_device.sh pack    here, after the release build: the CPU kernel and model test
#                                 binaries, build/hearth and make_random_model, with the shared
#                                 libraries they need beyond glibc and libstdc++, packed as
#                                 .cpu-pack.tar.xz (carry it)
#   scripts/cpu_device.sh test    there: runs the packed tests (the fixtures are the carried
#                                 tree's tests/data, found where this build's tests look for them)
#   scripts/cpu_device.sh models  there: random Qwen3-1.7B shapes in /tmp, as #6's benchmarks use
#                                 them: q17 (bf16), q17q4 and q17q8 (MLX affine, groups of 64)
#   scripts/cpu_device.sh matmuls [T N K THREADS...]
#                                 there: bench/prefill_bench, the prefill matmuls alone with AMX
#                                 off and on
#   scripts/cpu_device.sh bench THREADS [MODEL...]
#                                 there: `hearth bench --device cpu` with HEARTH_CPU_AMX=0 and 1
#                                 alternating, ROUNDS rounds (default 2), THREADS worker threads
# Extra `hearth bench` flags come from BENCH_FLAGS (default "--reps 2").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/pack.sh
pack=.cpu-pack
tests=(build/tests/ops/ops_kernel_test build/tests/ops/ops_quant_test build/tests/ops/ops_ggml_matmul_test
  build/tests/models/models_quantized_test build/tests/models/models_gguf_test
  build/tests/models/models_parity_test build/tests/models/models_reduced_precision_test)
tools=(build/hearth build/bench/make_random_model build/bench/prefill_bench)

there() {
  if [ -f $pack.tar.xz ]; then rm -rf $pack && tar -xJf $pack.tar.xz; fi
  [ -x $pack/hearth ] || { echo "$pack/hearth missing: run '$0 pack' here and carry $pack.tar.xz" >&2; exit 1; }
  export LD_LIBRARY_PATH=$PWD/$pack/lib
  grep -m1 "model name" /proc/cpuinfo
  echo "AMX: $(grep -o -E 'amx_[a-z0-9]+' /proc/cpuinfo | sort -u | tr '\n' ' ')"
}

case "${1:-}" in
  pack)
    rm -rf $pack && mkdir -p $pack/bin $pack/lib
    cp "${tests[@]}" $pack/bin/
    cp "${tools[@]}" $pack/
    copy_libs $pack/lib "" "${tests[@]}" "${tools[@]}"
    # The tests find fixtures at the path compiled into them; there, the tree is elsewhere.
    echo "$PWD" >$pack/source_dir
    pack_folder $pack
    ;;
  test)
    there
    src=$(cat $pack/source_dir)
    if [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
    # The CLI tests run the hearth and make_random_model of the build tree they were built in.
    mkdir -p "$src/build/bench"
    for tool in hearth bench/make_random_model; do
      [ -x "$src/build/$tool" ] || ln -sf "$PWD/$pack/$(basename $tool)" "$src/build/$tool"
    done
    failed=0
    for b in $pack/bin/*; do
      if out=$("$b" 2>&1); then
        echo "$(basename "$b"): $(echo "$out" | grep -E '^\[  PASSED  \]|SKIPPED \]' | head -2 | tr '\n' ' ')"
      else
        failed=1
        echo "$(basename "$b"): FAILED"
        echo "$out" | grep -v -E '^\[ +(RUN|OK) +\]' | tail -40
      fi
    done
    exit $failed
    ;;
  models)
    there
    [ -d /tmp/q17 ] || $pack/make_random_model /tmp/q17 --preset qwen3-1.7b --dtype bf16 | tail -1
    for bits in 4 8; do
      [ -d /tmp/q17q$bits ] ||
        $pack/hearth convert /tmp/q17 -q --q-bits $bits --q-group-size 64 --mlx-path /tmp/q17q$bits | tail -1
    done
    ;;
  matmuls)
    there
    shift
    $pack/prefill_bench "$@"
    ;;
  bench)
    there
    threads=${2:?THREADS}
    shift 2
    models=("$@")
    [ ${#models[@]} -gt 0 ] || models=(/tmp/q17q4 /tmp/q17q8 /tmp/q17)
    for round in $(seq "${ROUNDS:-2}"); do
      for model in "${models[@]}"; do
        for amx in 0 1; do
          # shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
          echo "round $round AMX=$amx $(basename "$model"): $(HEARTH_THREADS=$threads HEARTH_CPU_AMX=$amx \
            $pack/hearth bench "$model" --device cpu --no-record ${BENCH_FLAGS:---reps 2} 2>&1 |
            grep -E '^(pp|tg)[0-9]+' | tr -s ' ' | tr '\n' ' ')"
        done
      done
    done
    ;;
  *)
    echo "usage: $0 pack|test|models|matmuls [T N K THREADS...]|bench THREADS [MODEL...]" >&2
    exit 2
    ;;
esac
