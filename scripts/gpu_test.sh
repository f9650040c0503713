#!/usr/bin/env bash
# The GPU tests (ctest label `gpu`) on a machine with an NVIDIA GPU that lacks this project's
# build dependencies (the `device` machine: CUDA, CMake and ctest, but no apt packages).
#   scripts/gpu_test.sh pack   here, after the release build: copies build/tests/gpu's test
#                              binaries, build/hearth and build/bench's make_random_model,
#                              cuda_ops_bench and cuda_stream_chain_bench (for GPU benchmarks),
#                              and the shared libraries they need beyond glibc, libstdc++ and
#                              CUDA's into .gpu-pack/, then packs that folder as .gpu-pack.tar.xz
#                              (the carried tree is capped; the tarball is a tenth of the folder)
#   scripts/gpu_test.sh run    there, from the repo root with .gpu-pack.tar.xz (or .gpu-pack/)
#                              carried: registers the packed binaries as ctest tests labelled gpu
#                              and runs ctest -L gpu
# On a GPU machine with the full toolchain the same tests run with
#   cmake --preset release && cmake --build --preset release && ctest --preset release -L gpu
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/pack.sh
pack=.gpu-pack

# The pack's libraries, then the CUDA toolkit's (cuBLAS) where the GPU machine keeps them.
lib_path() {
  local libs="$PWD/$pack/lib" d pip_cublas
  pip_cublas=$(python3 -c 'import nvidia.cublas as m; print(m.__path__[0] + "/lib")' 2>/dev/null || true)
  for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
    $pip_cublas; do
    if [ -d "$d" ]; then libs="$libs:$d"; fi
  done
  echo "$libs"
}
# There, the folder comes from the carried tarball (afresh: a warm machine keeps an older one).
unpack() {
  if [ -f "$pack.tar.xz" ]; then rm -rf "$pack" && tar -xJf "$pack.tar.xz"; fi
}
case "${1:-}" in
  pack)
    mapfile -t bins < <(find build/tests/gpu -maxdepth 1 -type f -executable -name 'gpu_*' | sort)
    [ ${#bins[@]} -gt 0 ] || { echo "no GPU test binaries in build/tests/gpu: build with the CUDA backend" >&2; exit 1; }
    rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib"
    cp "${bins[@]}" "$pack/bin/"
    tools=(build/hearth build/bench/make_random_model build/bench/cuda_ops_bench build/bench/cuda_stream_chain_bench)
    cp "${tools[@]}" "$pack/"
    # Not CUDA's own (the GPU machine has its toolkit), nor the TLS and compression libraries
    # every distribution carries.
    copy_libs "$pack/lib" 'libcublas[^/]*|libcudart|libssl|libcrypto|libbrotli[a-z]*' "${bins[@]}" "${tools[@]}"
    pack_folder "$pack"
    ;;
  run)
    unpack
    [ -d "$pack/bin" ] || { echo "$pack/bin missing: run '$0 pack' where the project builds, carry $pack" >&2; exit 1; }
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    libs=$(lib_path)
    # Tests run the CLI as the build tree's build/hearth (HEARTH_BINARY).
    if [ ! -e build/hearth ]; then mkdir -p build && ln -s "$PWD/$pack/hearth" build/hearth; fi
    dir=$(mktemp -d)
    for b in "$pack"/bin/gpu_*; do
      name=$(basename "$b")
      echo "add_test($name \"$PWD/$b\")" >>"$dir/CTestTestfile.cmake"
      echo "set_tests_properties($name PROPERTIES LABELS gpu ENVIRONMENT \"LD_LIBRARY_PATH=$libs\")" \
        >>"$dir/CTestTestfile.cmake"
    done
    cd "$dir" && ctest -L gpu --output-on-failure -V --timeout 300
    ;;
  env)
    unpack
    # For running the packed tools by hand there: eval "$(scripts/gpu_test.sh env)"
    echo "export LD_LIBRARY_PATH=$(lib_path)"
    ;;
  *)
    echo "usage: $0 pack|run|env" >&2
    exit 2
    ;;
esac
