#!/usr/bin/env bash
# The GPU tests (ctest label `gpu`) on a machine with an NVIDIA GPU that lacks this project's
# build dependencies (the `device` machine: CUDA, CMake and ctest, but no apt packages).
#   scripts/gpu_test.sh pack   here, after the release build: copies build/tests/gpu's test
#                              binaries, build/hearth and build/bench/make_random_model (for GPU
#                              benchmarks) and the shared libraries they need beyond glibc,
#                              libstdc++ and CUDA's into .gpu-pack/, then packs that folder as
#                              .gpu-pack.tar.xz (the carried tree is capped; the tarball is a
#                              fifth of the folder)
#   scripts/gpu_test.sh run    there, from the repo root with .gpu-pack.tar.xz (or .gpu-pack/)
#                              carried: registers the packed binaries as ctest tests labelled gpu
#                              and runs ctest -L gpu
# On a GPU machine with the full toolchain the same tests run with
#   cmake --preset release && cmake --build --preset release && ctest --preset release -L gpu
set -euo pipefail
cd "$(dirname "$0")/.."
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
    tools=(build/hearth build/bench/make_random_model build/bench/cuda_ops_bench)
    cp "${tools[@]}" "$pack/"
    for b in "${bins[@]}" "${tools[@]}"; do
      # Not glibc's, libstdc++, CUDA's own (the GPU machine has its toolkit), nor the
      # compression and TLS libraries every distribution carries (the carried tree is capped).
      ldd "$b" | awk '$3 ~ /^\// {print $3}' |
        { grep -Ev '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux[^/]*|libpthread|libdl|librt|libcublas[^/]*|libcudart|libssl|libcrypto|libz|libbrotli[a-z]*)\.so' || true; } |
        xargs -r cp -L -t "$pack/lib/"
    done
    strip --strip-unneeded "$pack"/bin/* "$pack"/hearth "$pack"/make_random_model "$pack"/cuda_ops_bench "$pack"/lib/*
    # -9e: the binaries share most of their code, which a large window finds (a third of the size).
    XZ_OPT=-9e tar -cJf "$pack.tar.xz" "$pack"
    du -sh "$pack" "$pack.tar.xz"
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
