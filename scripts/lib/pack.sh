# shellcheck shell=bash
# Shared by scripts/gpu_test.sh and scripts/cpu_device.sh: packing binaries built here for the
# `device` machine, which has no apt packages (source this file).

# copy_libs DEST EXTRA BINARY...: copies into DEST the shared libraries the binaries load, less
# glibc's, libstdc++ and libgcc_s (every Linux has them) and zlib, and less those whose file names
# match the extended regex EXTRA (e.g. 'libcudart' where the other machine has its own), so that
# the carried tree stays under its cap.
copy_libs() {
  local dest=$1 names='libc|libm|libgcc_s|libstdc\+\+|ld-linux[^/]*|libpthread|libdl|librt|libz' b
  if [ -n "$2" ]; then names="$names|$2"; fi
  shift 2
  for b in "$@"; do
    ldd "$b" | awk '$3 ~ /^\// {print $3}' | { grep -Ev "/($names)\.so" || true; } | xargs -r cp -L -t "$dest/"
  done
}

# pack_folder DIR: strips DIR's binaries and libraries and packs DIR as DIR.tar.xz; -9e because
# the binaries share most of their code, which a large window finds (a third of the size).
pack_folder() {
  local dir=$1
  find "$dir" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-unneeded {} +
  XZ_OPT=-9e tar -cJf "$dir.tar.xz" "$dir"
  du -sh "$dir" "$dir.tar.xz"
}
