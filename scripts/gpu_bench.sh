#!/usr/bin/env bash
# GPU benchmarks on a machine like the `device` one (CUDA, no build dependencies), with the
# binaries of `scripts/gpu_test.sh pack` carried as .gpu-pack.tar.xz. Decode numbers move by a
# percent between machines and calls, so a change is judged against its base on one warm
# machine, the two alternating (bench/RESULTS.md says why `hearth bench` and not the op bench).
#   scripts/gpu_bench.sh base REV          here: builds hearth at REV in a worktree and packs it
#                                          as .gpu-base.tar.xz (carry it with the pack)
#   scripts/gpu_bench.sh models            there: random Llama-3-8B shapes in /tmp: l8 (bf16),
#                                          l8q4 and l8q8 (MLX affine, groups of 64); ~2 min; with
#                                          GGUF=1 also l8-q4_0.gguf (GGUF Q4_0: groups of 32;
#                                          carry tests/data/external/tokenizers/llama3_1)
#   scripts/gpu_bench.sh ab [MODEL...]     there: .gpu-base.tar.xz's hearth against the pack's,
#                                          tg128, two rounds (default models: l8q4 l8)
#   scripts/gpu_bench.sh knob NAME [MODEL...]
#                                          there: the pack's hearth with NAME=0 and NAME=1 (or
#                                          each of KNOB_VALUES, e.g. KNOB_VALUES="0 1 2 3")
#   scripts/gpu_bench.sh ncu [REGEX]       there: Nsight Compute, one launch of each launch
#                                          configuration of the kernels matching REGEX in
#                                          `cuda_ops_bench --rows 1 --context 512`; NCU_STALLS=1
#                                          adds each stall reason's cycles per issued instruction
#                                          and the instruction and sector counts
#   scripts/gpu_bench.sh sass REGEX        there: the SASS of the pack's kernels whose mangled
#                                          names match REGEX (cuobjdump is there, not here)
#   scripts/gpu_bench.sh timeline-pack     here: builds hearth with -DHEARTH_CUDA_TIMELINE=ON in
#                                          build-timeline/ and packs it as .gpu-timeline.tar.xz
#   scripts/gpu_bench.sh timeline [MODEL...]
#                                          there: that hearth's in-graph timeline of one decode
#                                          step per model (src/backends/cuda/timeline.cu), written
#                                          to timeline-MODEL.txt in TIMELINE_DIR (default .), and
#                                          its time by kernel printed
# Extra `hearth bench` flags come from BENCH_FLAGS (e.g. "--prompt-tokens 8192 --reps 1").
set -euo pipefail
cd "$(dirname "$0")/.."
pack=$PWD/.gpu-pack

# One `hearth bench` of BINARY on MODEL: its tg line, labelled.
bench() {
  local label=$1 binary=$2 model=$3
  # shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
  echo "$label $(basename "$model"): $("$binary" bench "$model" --no-record ${BENCH_FLAGS:---reps 2} 2>&1 |
    grep -E '^tg[0-9]+' | tr -s ' ')"
}

models_or_default() {
  if [ $# -gt 0 ]; then printf '%s\n' "$@"; else printf '%s\n' /tmp/l8q4 /tmp/l8; fi
}

# The carried tarball NAME.tar.xz (made here by `$0 HOW`), unpacked afresh into NAME/.
unpack_carried() {
  local name=$1 how=$2
  [ -f "$name.tar.xz" ] || { echo "$name.tar.xz missing: run '$0 $how' here and carry it" >&2; exit 1; }
  rm -rf "$name" && mkdir "$name" && tar -xJf "$name.tar.xz" -C "$name"
}

there() {
  eval "$(bash scripts/gpu_test.sh env)"
  [ -x "$pack/hearth" ] || { echo "$pack/hearth missing: carry .gpu-pack.tar.xz" >&2; exit 1; }
}

case "${1:-}" in
  base)
    rev=${2:?usage: $0 base REV}
    tree=$(mktemp -d)/base
    git worktree add -q --detach "$tree" "$rev"
    (cd "$tree" && cmake --preset release >/dev/null && cmake --build --preset release --target hearth >/dev/null)
    strip "$tree/build/hearth"
    tar -cJf .gpu-base.tar.xz -C "$tree/build" hearth
    git worktree remove --force "$tree"
    rmdir "$(dirname "$tree")"
    du -h .gpu-base.tar.xz
    ;;
  timeline-pack)
    cmake -S . -B build-timeline -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_CUDA_TIMELINE=ON \
      -DHEARTH_TESTS=OFF >/dev/null
    cmake --build build-timeline --target hearth >/dev/null
    dir=$(mktemp -d)
    cp build-timeline/hearth "$dir/hearth" && strip "$dir/hearth"
    tar -cJf .gpu-timeline.tar.xz -C "$dir" hearth
    rm -rf "$dir"
    du -h .gpu-timeline.tar.xz
    ;;
  timeline)
    there
    shift
    unpack_carried .gpu-timeline timeline-pack
    mapfile -t models < <(models_or_default "$@")
    for model in "${models[@]}"; do
      report=${TIMELINE_DIR:-.}/timeline-$(basename "$model").txt
      # shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
      HEARTH_CUDA_TIMELINE=$report .gpu-timeline/hearth bench "$model" --no-record ${BENCH_FLAGS:---reps 1} >/dev/null 2>&1
      echo "== $(basename "$model")"
      sed -n '1p;/^# path by kernel/,$p' "$report"
    done
    ;;
  models)
    there
    # A GGUF file carries its tokenizer: Llama 3.1's (tests/data/external, carried) fits the vocabulary.
    tok=tests/data/external/tokenizers/llama3_1
    if [ "${GGUF:-0}" = 1 ]; then
      [ -f $tok/tokenizer.json ] || { echo "GGUF=1 needs $tok: carry it" >&2; exit 1; }
      [ ! -d /tmp/l8 ] || [ -f /tmp/l8/tokenizer.json ] || rm -rf /tmp/l8 /tmp/l8q4 /tmp/l8q8
    fi
    tok_flag=()
    if [ -f $tok/tokenizer.json ]; then tok_flag=(--tokenizer $tok); fi
    [ -d /tmp/l8 ] || "$pack/make_random_model" /tmp/l8 --preset llama-3-8b "${tok_flag[@]}" | tail -1
    for bits in 4 8; do
      [ -d /tmp/l8q$bits ] ||
        "$pack/hearth" convert /tmp/l8 -q --q-bits $bits --q-group-size 64 --mlx-path /tmp/l8q$bits | tail -1
    done
    if [ "${GGUF:-0}" = 1 ] && [ ! -f /tmp/l8-q4_0.gguf ]; then
      "$pack/hearth" convert /tmp/l8 --to gguf --type q4_0 --out /tmp/l8-q4_0.gguf | tail -1
    fi
    ;;
  ab)
    there
    shift
    unpack_carried .gpu-base "base REV"
    mapfile -t models < <(models_or_default "$@")
    for round in 1 2; do
      for model in "${models[@]}"; do
        bench "base r$round" "$PWD/.gpu-base/hearth" "$model"
        bench "new  r$round" "$pack/hearth" "$model"
      done
    done
    ;;
  knob)
    there
    name=${2:?usage: $0 knob NAME [MODEL...]}
    shift 2
    mapfile -t models < <(models_or_default "$@")
    for round in 1 2; do
      for model in "${models[@]}"; do
        for value in ${KNOB_VALUES:-0 1}; do
          export "$name=$value"
          bench "$name=$value r$round" "$pack/hearth" "$model"
        done
        unset "$name"
      done
    done
    ;;
  ncu)
    there
    regex=${2:-matvec|attention_decode|attention_merge|prepare_x}
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
    [ -n "$ncu" ] || { echo "no ncu on this machine" >&2; exit 1; }
    extra=() keep='^  [a-z_].*\(|Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued'
    if [ "${NCU_STALLS:-0}" = 1 ]; then
      extra=(--section SchedulerStats --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,dram__bytes_read.sum")
      keep="$keep|Issue Slots Busy|Eligible Warps|_per_issue_active|inst_executed.sum|sectors_pipe|dram__bytes"
    fi
    "$ncu" --kernel-name "regex:$regex" --filter-mode per-launch-config --launch-count 1 \
      --cache-control none --clock-control none \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats "${extra[@]}" \
      "$pack/cuda_ops_bench" --rows 1 --context 512 2>&1 | grep -E "$keep"
    ;;
  sass)
    there
    regex=${2:?usage: $0 sass REGEX}
    dump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
    # One function per "Function :" header; print those whose names match.
    "$dump" -sass "$pack/hearth" | awk -v re="$regex" '/Function :/ { on = ($0 ~ re) } on'
    ;;
  *)
    echo "usage: $0 base REV | models | ab [MODEL...] | knob NAME [MODEL...] | ncu [REGEX] | sass REGEX |" \
      "timeline-pack | timeline [MODEL...]" >&2
    exit 2
    ;;
esac
