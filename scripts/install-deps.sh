#!/usr/bin/env bash
# Installs the system tools the engine and its tests use, when missing.
set -euo pipefail
need=()
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v xz >/dev/null || need+=(xz-utils)
command -v zstd >/dev/null || need+=(zstd)
command -v gzip >/dev/null || need+=(gzip)
command -v igzip >/dev/null || need+=(isal)
# make native: the decoder child (native/inflate) is C against ISA-L and liblzma.
command -v cc >/dev/null || need+=(gcc libc6-dev)
[ -f /usr/include/isa-l.h ] || need+=(libisal-dev)
[ -f /usr/include/lzma.h ] || need+=(liblzma-dev)
command -v losetup >/dev/null || need+=(util-linux)
command -v losetup >/dev/null || need+=(mount)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing packages: ${need[*]}; install them as root (apt-get install -y ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
